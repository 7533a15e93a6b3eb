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
overhead <= FastMCP's. Memory: the peak resident size of the `diana serve` process
(VmHWM) after its calls.
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cli import diana as diana_command

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
        print(f"diana serve peak resident memory: {max(memory):.1f} MB")
    if "fastmcp" in overhead:
        ours, theirs = overhead["diana"][0], overhead["fastmcp"][0]
        met = "met" if ours <= theirs else "NOT met"
        print(f"goal: diana's overhead p50 {ours:.2f} ms <= FastMCP's {theirs:.2f} ms: {met}")
    else:
        print("FastMCP's proxy left out (no --fastmcp PYTHON)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fastmcp", metavar="PYTHON", help="a venv's python with fastmcp")
    fastmcp = parser.parse_args().fastmcp
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(*configure(tmp), fastmcp))


if __name__ == "__main__":
    main()
