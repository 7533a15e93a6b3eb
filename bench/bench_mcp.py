"""MCP: per-call overhead against the raw SDK, concurrent connects, kill -9 detection, and
large results over stdio.

Run from the repository root:  .venv/bin/python bench/bench_mcp.py
Every figure is measured in this run; ratios compare figures from the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.calls.orchestrator import Orchestrator  # noqa: E402
from diana.core.config.mcp_servers import MCPServerConfig  # noqa: E402
from diana.core.mcp.connection import ServerConnection  # noqa: E402
from diana.core.mcp.failures import ServerDown  # noqa: E402
from diana.core.mcp.info import ServerStatus  # noqa: E402
from diana.core.mcp.manager import MCPManager  # noqa: E402
from mcp import Client, MCPError, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.types import TextContent  # noqa: E402

FIXTURE = str(ROOT / "tests" / "fixtures" / "mcp_fixture.py")
RAW = str(ROOT / "tests" / "fixtures" / "raw_mcp_server.py")
SLOW_START = 0.5  # seconds a light server waits before answering, like one that loads data
WARMUP = 50
ROUNDS = 5
CALLS = 200
FANOUT = 20
FANOUT_TIMEOUT = 30.0  # the largest allowed; 20 start-ups on 2 cores can outlast the 10 s default
KILLS = 10
LARGE_RESULTS = (20_000_000, 50_000_000)  # bytes of text in one tool result
LARGE_TOOL_TIMEOUT = 300.0  # a slow reader must be measured, not cut off
LARGE_SIDES = ("orchestrator.execute", "ServerConnection.call_tool")
LARGE_RESULT_ARG = "--large-result"  # run one large_result() in this process, print JSON
POLL = 0.005
ARGS = {"text": "x"}
UNUSED_CONFIG = Path("/nonexistent/mcp-servers.json")  # servers are passed to start() directly


def fixture(name: str, timeout: float = 10.0) -> MCPServerConfig:
    return MCPServerConfig(name=name, command=sys.executable, args=[FIXTURE], timeout=timeout)


async def per_call_ms(call: Callable[[], Awaitable[object]], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def wait_until(condition: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(POLL)
    return True


async def call_overhead() -> tuple[dict[str, float], list[float]]:
    """Median per-call ms of each side, and the per-round diana/raw ratios. Sides: through the
    orchestrator, diana's connection alone, the raw SDK (each its own server process)."""
    orchestrator = Orchestrator()
    manager = MCPManager(orchestrator, lambda: UNUSED_CONFIG)
    params = StdioServerParameters(command=sys.executable, args=[FIXTURE])
    try:
        await manager.start([fixture("fx")])
        await manager.wait_ready()
        connection = manager.connections["fx"]
        async with Client(stdio_client(params), mode="auto", cache=None) as client:
            sides: dict[str, Callable[[], Awaitable[object]]] = {
                "diana": lambda: orchestrator.execute("fx_echo", ARGS),
                "connection": lambda: connection.call_tool("echo", ARGS, 10),
                "raw": lambda: client.call_tool("echo", ARGS, read_timeout_seconds=10),
            }
            result = await orchestrator.execute("fx_echo", ARGS)
            if not result.success:
                raise SystemExit(f"fx_echo failed: {result}")
            for call in sides.values():
                await per_call_ms(call, WARMUP)
            samples: dict[str, list[float]] = {side: [] for side in sides}
            round_ratios = []
            for _ in range(ROUNDS):
                # Call by call in turn, so load from elsewhere on the machine hits every side.
                times: dict[str, list[float]] = {side: [] for side in sides}
                for _ in range(CALLS):
                    for side, call in sides.items():
                        times[side] += await per_call_ms(call, 1)
                for side in sides:
                    samples[side] += times[side]
                round_ratios.append(
                    statistics.median(times["diana"]) / statistics.median(times["raw"])
                )
    finally:
        await manager.close()
        await orchestrator.shutdown()
    return {side: statistics.median(times) for side, times in samples.items()}, round_ratios


def light(name: str) -> MCPServerConfig:
    """An SDK-free server that is slow to start but costs almost no CPU."""
    return MCPServerConfig(
        name=name,
        command=sys.executable,
        args=[RAW, "--start-delay", str(SLOW_START)],
        timeout=FANOUT_TIMEOUT,
    )


async def time_to_ready(count: int, heavy: bool = True) -> tuple[float, int, float]:
    """Wall time for a fresh manager to bring ``count`` servers to their first attempt, how
    many were ready, and the CPU seconds the server processes used (counted once reaped)."""
    cpu_before = children_cpu()
    orchestrator = Orchestrator()
    manager = MCPManager(orchestrator, lambda: UNUSED_CONFIG)
    make = (lambda i: fixture(f"fx{i}", FANOUT_TIMEOUT)) if heavy else (lambda i: light(f"l{i}"))
    try:
        start = time.perf_counter()
        await manager.start([make(i) for i in range(count)])
        await manager.wait_ready()
        elapsed = time.perf_counter() - start
        ready = sum(c.ready for c in manager.connections.values())
    finally:
        await manager.close()
        await orchestrator.shutdown()
    return elapsed, ready, children_cpu() - cpu_before


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def kill_detection() -> list[float]:
    """Seconds from SIGKILL of the server process to the connection leaving READY."""
    connection = ServerConnection(fixture("fx"))
    samples = []
    try:
        connection.start()
        await connection.wait_first_attempt()
        for _ in range(KILLS):
            if not await wait_until(lambda: connection.ready, 15):
                raise SystemExit(f"server not ready: {connection.state.last_error}")
            pid = connection.state.pid
            assert pid is not None
            start = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            await wait_until(lambda: connection.state.status is not ServerStatus.READY, 30)
            samples.append(time.perf_counter() - start)
            connection.reconnect()
            await connection.wait_attempt_after_reconnect()
    finally:
        await connection.stop()
    return samples


def reset_peak_rss() -> None:
    """Linux: start this process's peak resident set size afresh (see proc(5), clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_mb() -> tuple[float, float]:
    """This process's resident set size now, and at its peak since the last reset, in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class ResultLost(Exception):
    """The call ended without the whole text."""


async def large_result(size: int, side: str) -> dict[str, Any]:
    """One call, in this process, that returns ``size`` bytes of text: seconds, RSS before
    and peak RSS during the call, and why the text did not arrive whole, if it did not."""
    orchestrator = Orchestrator()
    manager = MCPManager(orchestrator, lambda: UNUSED_CONFIG)
    config = MCPServerConfig(
        name="fx",
        command=sys.executable,
        args=[FIXTURE, "--large-output"],
        toolTimeout=LARGE_TOOL_TIMEOUT,
    )
    try:
        await manager.start([config])
        await manager.wait_ready()
        connection = manager.connections["fx"]
        call = {
            "orchestrator.execute": lambda: execute_text(orchestrator, size),
            "ServerConnection.call_tool": lambda: call_text(connection, size),
        }[side]
        before, _ = rss_mb()
        reset_peak_rss()
        start = time.perf_counter()
        lost = None
        try:
            if len(text := await call()) != size:
                lost = f"{len(text):,} of {size:,} bytes arrived"
        except (ResultLost, MCPError, ServerDown) as exc:
            lost = str(exc)
        elapsed = time.perf_counter() - start
        _, peak = rss_mb()
    finally:
        await manager.close()
        await orchestrator.shutdown()
    return {"seconds": elapsed, "before_mb": before, "peak_mb": peak, "lost": lost}


async def execute_text(orchestrator: Orchestrator, size: int) -> str:
    result = await orchestrator.execute("fx_big_text", {"size": size})
    if not result.success:
        raise ResultLost(result.error)
    return str(result.data)


async def call_text(connection: ServerConnection, size: int) -> str:
    result = await connection.call_tool("big_text", {"size": size}, LARGE_TOOL_TIMEOUT)
    block = result.content[0]
    return block.text if isinstance(block, TextContent) else ""


async def large_results() -> list[tuple[int, str, dict[str, Any]]]:
    """Each size and side in a fresh diana process, so that no peak holds memory an earlier
    call left behind."""
    rows = []
    for size in LARGE_RESULTS:
        for side in LARGE_SIDES:
            child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, LARGE_RESULT_ARG, str(size), side, stdout=PIPE
            )
            output, _ = await child.communicate()
            rows.append((size, side, json.loads(output)))
    return rows


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


async def main() -> None:
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores, Python {sys.version.split()[0]}")

    medians, round_ratios = await call_overhead()
    diana_ms, raw_ms = medians["diana"], medians["raw"]
    ratio = diana_ms / raw_ms
    print(
        f"\n1. per-call time, echo over stdio, median of {ROUNDS} x {CALLS} calls per side "
        f"(after {WARMUP} warm-up calls), sides taking turns call by call:"
    )
    print(f"  orchestrator.execute('fx_echo')   {diana_ms:7.3f} ms")
    print(f"  ServerConnection.call_tool        {medians['connection']:7.3f} ms  (diana transport)")
    print(f"  raw SDK Client.call_tool('echo')  {raw_ms:7.3f} ms")
    print(f"  added by diana                    {(diana_ms - raw_ms) * 1000:7.1f} µs")
    print(f"  per-round ratios: {', '.join(f'{r:.3f}' for r in round_ratios)}")
    print(f"  ratio of medians: {ratio:.3f}x  (goal <= 1.10x) -> {verdict(ratio <= 1.10)}")

    one_s, one_ready, one_cpu = await time_to_ready(1)
    many_s, many_ready, many_cpu = await time_to_ready(FANOUT)
    fan_ratio = many_s / one_s
    print(
        f"\n2. MCPManager start + wait_ready, fresh manager each run "
        f"(handshake timeout {FANOUT_TIMEOUT:g} s):"
    )
    print(f"  1 server:    {one_s:6.2f} s  ({one_ready}/1 ready, server CPU {one_cpu:.2f} s)")
    print(
        f"  {FANOUT} servers:  {many_s:6.2f} s  ({many_ready}/{FANOUT} ready, "
        f"server CPU {many_cpu:.2f} s)"
    )
    print(f"  ratio: {fan_ratio:.2f}x  (goal <= 1.5x) -> {verdict(fan_ratio <= 1.5)}")
    if fan_ratio > 1.5:
        print(
            f"  why: the connects are concurrent, but each server is a new Python process; the "
            f"{FANOUT} used {many_cpu:.1f} s of CPU from start to exit (mostly interpreter and "
            f"SDK import), ~{many_cpu / cores:.1f} s for each of {cores} cores. Process "
            f"start-up on {cores} cores dominates the wall time, not the manager."
        )

    light_one, _r1, _c1 = await time_to_ready(1, heavy=False)
    light_many, light_ready, light_cpu = await time_to_ready(FANOUT, heavy=False)
    light_ratio = light_many / light_one
    print(
        f"\n2b. the same with light servers (no SDK, {SLOW_START:g} s start-up spent waiting, "
        f"not computing): what the manager itself adds when CPU is not the limit:"
    )
    print(f"  1 server:    {light_one:6.2f} s")
    print(
        f"  {FANOUT} servers:  {light_many:6.2f} s  ({light_ready}/{FANOUT} ready, "
        f"server CPU {light_cpu:.2f} s)"
    )
    print(f"  ratio: {light_ratio:.2f}x  (goal <= 1.5x) -> {verdict(light_ratio <= 1.5)}")

    kills = await kill_detection()
    worst = max(kills)
    print(f"\n3. kill -9 of the server process -> connection no longer ready ({KILLS} kills):")
    print(f"  median {statistics.median(kills) * 1000:7.1f} ms   max {worst * 1000:7.1f} ms")
    print(f"  goal: max <= 1 s -> {verdict(worst <= 1.0)}")

    rows = await large_results()
    print(
        "\n4. one tool result of N bytes of text over stdio, each in a fresh process "
        "(health probe at its defaults):"
    )
    for size, side, figures in rows:
        growth = figures["peak_mb"] - figures["before_mb"]
        lost = f"  LOST: {figures['lost']}" if figures["lost"] else ""
        print(
            f"  {size / 1e6:3.0f} MB  {side:27} {figures['seconds']:6.2f} s  "
            f"peak RSS {figures['peak_mb']:5.0f} MB ({growth:+5.0f} MB over the "
            f"{figures['before_mb']:.0f} MB before, {growth * 2**20 / size:4.1f}x the result){lost}"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == [LARGE_RESULT_ARG]:
        print(json.dumps(asyncio.run(large_result(int(sys.argv[2]), sys.argv[3]))))
    else:
        asyncio.run(main())
