"""Finding and installing servers from the MCP Registry, against the fake registry on
127.0.0.1 (tests/fixtures/fake_registry.py).

- Search latency: `RegistryClient.search` asking the registry each time (a cache TTL of 0)
  vs answered from its cache; median of SEARCHES each, the two taking turns.
- Install to ready: from asking the registry for io.github.modelcontextprotocol/time to
  the MCP sub-agent having tested the server for real (spawned, handshake, tools listed,
  stopped) and written mcp-servers.json, vs the server's own start: spawning the same
  program with the MCP SDK's client until its tools are listed. Median of INSTALLS each, the
  two taking turns. Goal: install-to-ready at most 1.2 times the server's own start.
- For a person's view, the whole `diana servers install` command (process start, imports,
  the above) is timed once too.

Run from the repository root:  .venv/bin/python bench/bench_registry.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.config.settings import RegistrySettings  # noqa: E402
from diana.core.mcp.registry import RegistryClient  # noqa: E402
from diana.core.mcp.registry_entry import plan_install  # noqa: E402
from diana.core.runtime import Profile, Runtime  # noqa: E402
from diana.core.system.clock import SystemClock  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.fixtures.fake_registry import FakeRegistry  # noqa: E402

SEARCHES = 200
INSTALLS = 7
GOAL = 1.2
TIME = "io.github.modelcontextprotocol/time"


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def search_latency(url: str, cache: Path) -> tuple[float, float]:
    clock = SystemClock()
    fresh = RegistryClient(RegistrySettings(url=url, cache_ttl=0), cache / "fresh", clock)
    kept = RegistryClient(RegistrySettings(url=url, cache_ttl=3600), cache / "kept", clock)
    await kept.search("time")  # fills the cache
    asked, cached = [], []
    for _ in range(SEARCHES):
        for client, samples in ((fresh, asked), (kept, cached)):
            started = time.perf_counter()
            await client.search("time")
            samples.append(time.perf_counter() - started)
    return median_ms(asked), median_ms(cached)


async def own_start(command: str) -> float:
    """Spawn the server with the SDK's client and list its tools: its own start."""
    started = time.perf_counter()
    async with Client(stdio_client(StdioServerParameters(command=command)), mode="auto") as c:
        await c.list_tools()
    return time.perf_counter() - started


async def install_to_ready(url: str, root: Path, run: int) -> tuple[float, str]:
    config_dir, data_dir = root / f"config-{run}", root / f"data-{run}"
    config_dir.mkdir()
    (config_dir / "settings.json").write_text(
        json.dumps({"registry": {"url": url, "cache_ttl": 0}})
    )
    (config_dir / "mcp-servers.json").write_text("[]")
    async with await Runtime.open(
        Profile.APP.but(servers="on_demand", chat=False, share=False, watch=False),
        config_dir,
        data_dir,
    ) as runtime:
        started = time.perf_counter()
        entry = await runtime.registry.server(TIME)
        plan = plan_install(entry)
        request = runtime.subagent.add_server("time", plan.entry({}), origin="bench")
        await runtime.subagent.wait(request.id)
        took = time.perf_counter() - started
        if request.state.value != "completed":
            raise SystemExit(f"install failed: {request.message}")
        command = json.loads((config_dir / "mcp-servers.json").read_text())[0]["command"]
    return took, command


def whole_command(url: str, root: Path) -> float:
    config_dir, data_dir = root / "config-cli", root / "data-cli"
    config_dir.mkdir()
    (config_dir / "settings.json").write_text(json.dumps({"registry": {"url": url}}))
    (config_dir / "mcp-servers.json").write_text("[]")
    argv = [sys.executable, "-m", "diana.tui.cli", "--config-dir", str(config_dir)]
    argv += ["--data-dir", str(data_dir), "servers", "install", TIME]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"diana servers install failed: {done.stderr}")
    return took


async def main() -> None:
    with FakeRegistry() as registry, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asked, cached = await search_latency(registry.url, root / "cache")
        print(f"search, asking the registry : {asked:7.2f} ms (median of {SEARCHES})")
        print(f"search, from the cache      : {cached:7.2f} ms  ({asked / cached:.0f}x faster)")

        installs, starts = [], []
        command = ""
        for run in range(INSTALLS + 1):
            took, command = await install_to_ready(registry.url, root, run)
            start = await own_start(command)
            if run:  # the first of each warms the disk cache and imports
                installs.append(took)
                starts.append(start)
        install, start = median_ms(installs), median_ms(starts)
        ratio = install / start
        verdict = "meets" if ratio <= GOAL else "misses"
        print(f"server's own start          : {start:7.1f} ms (median of {INSTALLS}; {command})")
        print(f"install to ready            : {install:7.1f} ms (median of {INSTALLS})")
        print(f"install / own start         : {ratio:7.2f}x  ({verdict} the goal of {GOAL}x)")
        print(
            f"`diana servers install`     : {whole_command(registry.url, root) * 1000:7.1f} ms "
            "(the whole command, once)"
        )


if __name__ == "__main__":
    asyncio.run(main())
