"""MCP health probes: what keeping 20 stdio servers watched costs, and how soon a hung one is
found. Each variant starts 20 of the project's fixture servers (real subprocesses through the
MCP SDK) and measures a quiet window: probes per second, and the CPU time of this process and
of the servers, as a share of one core. Variants: probes off (the floor), the former cadence
(a probe every 15 s, given up after 10 s of silence) and today's defaults. Then servers are
stopped with SIGSTOP at random moments between probes, and the time until each is marked down
is measured (goal: within 10 s).

Run from the repository root:  .venv/bin/python bench/bench_health.py [--window SECONDS]
Every figure is measured in this run; ratios compare figures from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.config.mcp_servers import HEALTH_INTERVAL, PROBE_TIMEOUT, MCPServerConfig  # noqa: E402
from diana.core.mcp.connection import ServerConnection  # noqa: E402
from diana.core.mcp.info import ServerStatus  # noqa: E402

FIXTURE = str(ROOT / "tests" / "fixtures" / "mcp_fixture.py")
SERVERS = 20
HANGS = 6  # servers stopped, one after another, for the detection figures
TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(pids: list[int]) -> float:
    """CPU seconds the processes have used (user and system), from /proc."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


class Variant:
    def __init__(self, name: str, interval: float, probe_timeout: float | None) -> None:
        self.name = name
        self.interval = interval
        self.probe_timeout = probe_timeout
        self.probes = 0

    def counted(self, _connection: ServerConnection, kind: str, _seconds: float) -> None:
        if kind == "probe":
            self.probes += 1

    def connect(
        self, index: int, on_change: Callable[[ServerConnection], None] = lambda _c: None
    ) -> ServerConnection:
        config = MCPServerConfig(name=f"s{index}", command=sys.executable, args=[FIXTURE])
        return ServerConnection(
            config,
            health_interval=self.interval,
            probe_timeout=self.probe_timeout,
            backoff_start=600,
            on_work=self.counted,
            on_change=on_change,
        )


async def started(variant: Variant, count: int) -> list[ServerConnection]:
    connections = [variant.connect(i) for i in range(count)]
    for connection in connections:
        connection.start()
    await asyncio.gather(*(c.wait_first_attempt() for c in connections))
    ready = [c for c in connections if c.ready]
    if len(ready) != count:
        raise SystemExit(f"bench_health: {count - len(ready)} servers did not start")
    return connections


async def window(variant: Variant, seconds: float) -> dict[str, float]:
    connections = await started(variant, SERVERS)
    try:
        await asyncio.sleep(1.0)  # start-up's own work settles
        pids = [c.state.pid for c in connections if c.state.pid is not None]
        probes, ours, theirs = variant.probes, time.process_time(), server_cpu(pids)
        began = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - began
        return {
            "probes_per_s": (variant.probes - probes) / elapsed,
            "client_cpu": (time.process_time() - ours) / elapsed * 100,
            "server_cpu": (server_cpu(pids) - theirs) / elapsed * 100,
        }
    finally:
        await asyncio.gather(*(c.stop() for c in connections))


async def detection() -> list[float]:
    """Seconds from SIGSTOP to the server marked down, at today's defaults."""
    variant = Variant("defaults", HEALTH_INTERVAL, None)
    found: list[float] = []
    for index in range(HANGS):
        down = asyncio.Event()

        def on_change(connection: ServerConnection, down: asyncio.Event = down) -> None:
            if connection.state.status is ServerStatus.ERROR:
                down.set()

        connection = variant.connect(index, on_change)
        connection.start()
        await connection.wait_first_attempt()
        pid = connection.state.pid
        assert connection.ready and pid is not None
        await asyncio.sleep(random.uniform(0, HEALTH_INTERVAL))  # anywhere between probes
        stopped = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(down.wait(), 60)
            found.append(time.monotonic() - stopped)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            await connection.stop()
    return found


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured per variant")
    args = parser.parse_args()
    variants = [
        Variant("probes off", 3600.0, None),
        Variant("every 15 s, 10 s", 15.0, 10.0),
        Variant(f"every {HEALTH_INTERVAL:g} s, {PROBE_TIMEOUT:g} s", HEALTH_INTERVAL, None),
    ]
    figures = {v.name: await window(v, args.window) for v in variants}
    print(f"{SERVERS} stdio servers watched, {args.window:g} s measured per variant")
    print("  (CPU as % of one core; this process / the servers together):")
    for name, f in figures.items():
        print(
            f"  {name:<18} {f['probes_per_s']:6.2f} probes/s   "
            f"CPU {f['client_cpu']:5.2f} % / {f['server_cpu']:5.2f} %"
        )
    floor, now = figures["probes off"], figures[variants[2].name]
    extra = now["client_cpu"] + now["server_cpu"] - floor["client_cpu"] - floor["server_cpu"]
    per_probe = extra / 100 / now["probes_per_s"] * 1000 if now["probes_per_s"] else 0.0
    print(f"  today's probes over the floor: {extra:+.2f} % of a core, {per_probe:.2f} ms CPU each")
    found = await detection()
    bound = HEALTH_INTERVAL + PROBE_TIMEOUT
    print(f"a hung server (SIGSTOP at a random moment), {HANGS} times, at today's defaults:")
    print(
        f"  marked down after median {statistics.median(found):.1f} s, max {max(found):.1f} s "
        f"(bound {bound:g} s; goal 10 s: {'met' if max(found) <= 10 else 'NOT met'})"
    )


if __name__ == "__main__":
    asyncio.run(main())
