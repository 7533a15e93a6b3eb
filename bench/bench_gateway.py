"""`diana serve` as a gateway: what an allowed call costs through it, against the same call
straight to the server, side by side with FastMCP's proxy (PyPI `fastmcp`) in front of the
same server; and the memory of a `diana serve` process that forwards calls.

Run from the repository root:  .venv/bin/python bench/bench_gateway.py [--fastmcp PYTHON]
PYTHON: the interpreter of a throwaway venv with fastmcp installed (never the project's own),
e.g. `python3 -m venv /tmp/fastmcp-venv && /tmp/fastmcp-venv/bin/pip install fastmcp`;
without it, FastMCP's column is left out.

Every path is driven by the official MCP SDK client over stdio, in this process, with a warm
session (CALLS calls, after WARM uncounted ones), the paths taking turns ROUNDS times:
- straight: the fixture server (tests/fixtures/mcp_fixture.py) started by the client;
- diana: `diana serve` in front of that server (policy allows it: the gate runs, nothing is
  held), the tool under diana's name (`fx_echo`);
- fastmcp: FastMCP's proxy (`fastmcp.server.create_proxy`) in front of the same server.
The overhead of a gateway is its p50 (and p99) minus the straight call's. Goal: diana's
overhead <= FastMCP's. Memory: the peak resident size (VmHWM) after its calls of the `diana
serve` that owns the server, and of one started beside a running app (tests/fixtures/
live_app.py), which forwards its calls to the app.

Under load (`--http`): HOSTS hosts, each with its own token, make CALLS calls at once; most the
policy allows, one each waits for a person, and two `diana` processes race to decide them
(`diana approve`, `diana reject`), as tests/test_serve_load.py plays it (tests/serving.py).
Printed: the calls made, answered, lost (0), run twice (0), whether every call is logged with
its client, the processes left running once the gateway stopped (0), wall time and calls/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_cli import app_running
from bench_cli import diana as diana_command

from tests.commands import run_diana
from tests.serving import (
    CALLS as LOAD_CALLS,
)
from tests.serving import (
    HOSTS as LOAD_HOSTS,
)
from tests.serving import (
    configure_two,
    decide_every_held,
    http_gateway,
    lines,
    one_host,
    running_with,
    text_of,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = str(ROOT / "tests" / "fixtures" / "mcp_fixture.py")
WARM = 20
CALLS = 200
ROUNDS = 3
PROXY = """
import sys
from fastmcp.server import create_proxy
config = {"mcpServers": {"fx": {"command": sys.argv[1], "args": [sys.argv[2]]}}}
create_proxy(config).run(transport="stdio", show_banner=False)
"""


@asynccontextmanager
async def session(command: str, args: list[str]) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as opened:
        await opened.initialize()
        yield opened


async def timed_calls(opened: ClientSession, tool: str) -> list[float]:
    """Milliseconds of each of CALLS calls of ``tool``, after WARM uncounted ones."""
    took = []
    for n in range(WARM + CALLS):
        start = time.perf_counter()
        result = await opened.call_tool(tool, {"text": f"call {n}"})
        elapsed = (time.perf_counter() - start) * 1000
        if result.is_error:
            raise SystemExit(f"{tool} failed: {result.content}")
        if n >= WARM:
            took.append(elapsed)
    return took


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def peak_rss_mb(name: str) -> float | None:
    """The peak resident size of the running process whose command line holds ``name``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if name in cmdline and "diana.tui.cli" in cmdline:
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return None


def configure(tmp: str) -> tuple[Path, Path]:
    """The fixture server as `fx`, its tools allowed: the gate runs, and nothing is held."""
    config, data = Path(tmp, "config"), Path(tmp, "data")
    config.mkdir()
    server = {"command": sys.executable, "args": [FIXTURE]}
    (config / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"fx": server}}))
    (config / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))
    return config, data


async def run(config: Path, data: Path, fastmcp: str | None) -> None:
    diana = diana_command(config, data, "serve")[1:]  # after the interpreter
    paths: dict[str, tuple[str, list[str], str]] = {
        "straight": (sys.executable, [FIXTURE], "echo"),
        "diana": (sys.executable, diana, "fx_echo"),
    }
    if fastmcp:
        paths["fastmcp"] = (fastmcp, ["-c", PROXY, sys.executable, FIXTURE], "echo")
    samples: dict[str, list[float]] = {name: [] for name in paths}
    memory: list[float] = []
    for _ in range(ROUNDS):
        for name, (command, args, tool) in paths.items():
            async with session(command, args) as opened:
                samples[name] += await timed_calls(opened, tool)
                if name == "diana":
                    peak = peak_rss_mb(str(data))
                    if peak is not None:
                        memory.append(peak)
    print(
        f"{ROUNDS} rounds of {CALLS} warm calls per path, taking turns "
        f"(load average {os.getloadavg()[0]:.2f})"
    )
    straight = samples["straight"]
    base50, base99 = statistics.median(straight), percentile(straight, 99)
    print(f"{'path':<10}{'p50 ms':>9}{'p99 ms':>9}{'overhead p50':>15}{'overhead p99':>15}")
    overhead = {}
    for name, values in samples.items():
        p50, p99 = statistics.median(values), percentile(values, 99)
        overhead[name] = (p50 - base50, p99 - base99)
        extra = "" if name == "straight" else f"{p50 - base50:>15.2f}{p99 - base99:>15.2f}"
        print(f"{name:<10}{p50:>9.2f}{p99:>9.2f}{extra}")
    if memory:
        print(f"diana serve peak resident memory, owning the server: {max(memory):.1f} MB")
    if "fastmcp" in overhead:
        ours, theirs = overhead["diana"][0], overhead["fastmcp"][0]
        met = "met" if ours <= theirs else "NOT met"
        print(f"goal: diana's overhead p50 {ours:.2f} ms <= FastMCP's {theirs:.2f} ms: {met}")
    else:
        print("FastMCP's proxy left out (no --fastmcp PYTHON)")


async def forwarding_memory(config: Path, data: Path) -> float | None:
    """The peak resident size of a `diana serve` started beside a running app, after its
    calls (each run by the app, on the app's server)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with app_running(config, data, env):
        diana = diana_command(config, data, "serve")[1:]
        async with session(sys.executable, diana) as opened:
            await timed_calls(opened, "fx_echo")
            return peak_rss_mb(str(data))


def answered_as_expected(mark: str, result: object, ran_held: list[str]) -> bool:
    """A call's answer says what became of it: an allowed one its result, a held one its
    result once approved, or that it was rejected."""
    if not isinstance(result, types.CallToolResult):
        return False
    text = text_of(result)
    if "-a" in mark or mark in ran_held:
        return not result.is_error and text == f"appended {mark}"
    return result.is_error and "reject" in text.lower()


async def under_load(tmp: Path) -> None:
    config, data = tmp / "config", tmp / "data"
    config.mkdir()
    allowed, held = tmp / "allowed", tmp / "held"
    configure_two(config, allowed, held)
    made = await asyncio.gather(
        *(run_diana(config, data, "serve", "token", "add", f"host{n}") for n in range(LOAD_HOSTS))
    )
    tokens = [token.stdout.strip() for token in made]
    results: dict[str, object] = {
        f"h{h}-{'held' if n == LOAD_CALLS - 1 else f'a{n}'}": None
        for h in range(LOAD_HOSTS)
        for n in range(LOAD_CALLS)
    }
    with http_gateway(config, data) as url:
        start = time.perf_counter()
        hosts = [one_host(url, token, n) for n, token in enumerate(tokens)]
        deciders = [
            decide_every_held(config, data, verb, LOAD_HOSTS) for verb in ("approve", "reject")
        ]
        outcomes = await asyncio.gather(*hosts, *deciders, return_exceptions=True)
        wall = time.perf_counter() - start
    for outcome in outcomes[:LOAD_HOSTS]:
        if isinstance(outcome, list):
            results.update(dict(outcome))
    ran = Counter(lines(allowed)) + Counter(lines(held))
    answered = sum(answered_as_expected(m, r, lines(held)) for m, r in results.items())
    listed = await run_diana(config, data, "log", "--json", "--limit", "10000")
    logged = Counter(
        (call["origin"], call["arguments"].get("mark"))
        for call in json.loads(listed.stdout or "[]")
        if call["origin"].startswith("host:")
    )
    expected = {(f"host:{m.split('-')[0].replace('h', 'host', 1)}", m) for m in results}
    every_logged = set(logged) == expected and all(
        count == 1 for (_, mark), count in logged.items() if "-a" in mark
    )
    orphans = running_with(str(allowed)) + running_with(str(held)) + running_with(str(data))
    print(
        f"under load: {LOAD_HOSTS} hosts x {LOAD_CALLS} calls at once over --http, "
        f"one each held and decided by 2 `diana` processes (load average "
        f"{os.getloadavg()[0]:.2f})"
    )
    print(f"  calls made         {len(results)}")
    print(f"  answered           {answered}")
    print(f"  lost               {len(results) - answered}")
    print(f"  run twice          {sum(count - 1 for count in ran.values() if count > 1)}")
    print(f"  logged with client {'yes' if every_logged else 'NO'}")
    print(f"  orphan processes   {len(orphans)}")
    print(f"  wall time          {wall:.2f} s, {len(results) / wall:.0f} calls/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fastmcp", metavar="PYTHON", help="a venv's python with fastmcp")
    parser.add_argument("--skip-load", action="store_true", help="leave the load figures out")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(*configure(tmp), options.fastmcp))
    with tempfile.TemporaryDirectory() as tmp:
        config, data = configure(tmp)
        forwarding = asyncio.run(forwarding_memory(config, data))
        shown = "not measured" if forwarding is None else f"{forwarding:.1f} MB"
        print(f"diana serve peak resident memory, forwarding to a running app: {shown}")
    if not options.skip_load:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(under_load(Path(tmp)))


if __name__ == "__main__":
    main()
