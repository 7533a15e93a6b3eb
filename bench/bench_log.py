"""The Execution Log pane under a flood: 1,000 log events a second for 10 s (500 calls a
second, each a CallStarted and a CallFinished on the app's event bus, and a row written to the
database as the orchestrator writes one for every call), while another process writes 50 rows
a second of its own (as `diana call` would), and a person types into the chat input.

Run from the repository root:  .venv/bin/python bench/bench_log.py
Every figure is measured in this run; nothing is asserted. Printed: the key-echo latency
(a key sent through the driver until the input shows it), the feed rate reached, how far the
pane lagged behind, the process's memory (RSS, and Python's allocated blocks) at the start,
each second and at the end, and the garbage collector's pauses meanwhile (a full collection
of the whole app's objects is what a key waits longest for).

BENCH_RATE (log events a second) and BENCH_SECONDS change the load. The app freezes what
start-up made (gc.freeze()), so full collections only walk what came after.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.events import CallFinished, CallStarted  # noqa: E402
from diana.tui.app import DianaApp, make_app  # noqa: E402
from diana.tui.panes.execlog import ExecutionLogPane  # noqa: E402
from terminal import app_dirs, echo_through_driver  # noqa: E402
from textual.widgets import Input  # noqa: E402

from tests.waits import settled, started  # noqa: E402

# Log events a second: half CallStarted, half CallFinished (BENCH_RATE to change it).
RATE = int(os.environ.get("BENCH_RATE", "1000"))
CALLS = RATE // 2
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
TICK = 0.01  # the feed publishes CALLS * TICK calls per tick
FOREIGN_RATE = 50  # rows per second written by another process
KEYS_PER_SECOND = 5
PAGE = os.sysconf("SC_PAGE_SIZE")

# Another process writing rows into the execution log, as `diana call` does.
FOREIGN_WRITER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
rate, until = float(sys.argv[2]), time.monotonic() + float(sys.argv[3])
n = 0
while time.monotonic() < until:
    n += 1
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, result, "
        "origin, started_at, finished_at, latency_ms) VALUES (?, 'save_fact', 'memory', '{}', "
        "'succeeded', '{\\"elsewhere\\": true}', 'cli', '2026-03-14T09:26:53+00:00', "
        "'2026-03-14T09:26:53+00:00', 1.0)",
        (f"other{n:06d}",),
    )
    db.execute("COMMIT")
    time.sleep(1 / rate)
print(n)
"""


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


async def feed(app: DianaApp, seconds: float) -> int:
    """CALLS calls a second through the bus and the execution log; the number fed."""
    runtime = app.runtime
    assert runtime is not None
    bus, log = runtime.bus, runtime.execution_log
    ids = itertools.count(1_000_000)
    per_tick = max(1, int(CALLS * TICK))
    start = time.perf_counter()
    fed = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        due = int(elapsed * CALLS) + per_tick
        now = datetime.now(UTC)
        while fed < due:
            call_id = next(ids)
            cid = f"flood{call_id}"
            arguments = {"n": call_id}
            bus.publish(CallStarted(call_id, cid, "save_fact", "memory", arguments, now, "bench"))
            result = {"id": call_id, "content": f"fact number {call_id}"}
            record = CallFinished(
                cid, "save_fact", "memory", arguments, "succeeded", None, result, None,
                "bench", now, now, 0.4, call_id=call_id,
            )  # fmt: skip
            bus.publish(record)
            log.record(record)
            fed += 1
        await asyncio.sleep(TICK)
    return fed


async def type_keys(app: DianaApp, seconds: float) -> list[float]:
    """A key every 1/KEYS_PER_SECOND s, sent as the terminal would; the time until the input
    shows each."""
    box = app.query_one("#chat-input", Input)
    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        await asyncio.sleep(1 / KEYS_PER_SECOND)
        latencies.append(await echo_through_driver(app, box))
        if len(box.value) > 40:
            box.value = ""
    return latencies


async def sample_memory(samples: list[tuple[float, int]], seconds: float) -> None:
    for _ in range(int(seconds)):
        await asyncio.sleep(1.0)
        samples.append((rss_mib(), sys.getallocatedblocks()))


class Pauses:
    """The garbage collector's pauses, by generation, while counting."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._began))

    def line(self) -> str:
        full = [took for generation, took in self.pauses if generation == 2]
        longest = max((took for _, took in self.pauses), default=0.0)
        return (
            f"{len(self.pauses)} collections, {len(full)} full (longest "
            f"{max(full, default=0.0) * 1000:.0f} ms); longest of all {longest * 1000:.0f} ms"
        )


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        app = make_app(*app_dirs(tmp, {"host": "http://127.0.0.1:9"}))
        async with app.run_test(size=(160, 48)) as pilot:
            await started(app)
            await pilot.pause()
            assert app.runtime is not None
            pane = app.query_one(ExecutionLogPane)
            app.query_one("#chat-input", Input).focus()
            await asyncio.sleep(1.0)  # the app settled: start-up work is done
            start_rss, start_blocks = rss_mib(), sys.getallocatedblocks()
            pauses = Pauses()
            gc.callbacks.append(pauses)
            writer = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                FOREIGN_WRITER,
                str(app.paths.data_dir / "diana.db"),
                str(FOREIGN_RATE),
                str(SECONDS),
                stdout=asyncio.subprocess.PIPE,
            )
            samples: list[tuple[float, int]] = []
            began = time.perf_counter()
            fed, keys, _ = await asyncio.gather(
                feed(app, SECONDS),
                type_keys(app, SECONDS),
                sample_memory(samples, SECONDS),
            )
            fed_in = time.perf_counter() - began
            gc.callbacks.remove(pauses)
            out, _ = await writer.communicate()
            foreign = int(out.decode().strip() or 0)
            # How long until the pane has shown everything fed (own and foreign).
            await settled(app)
            caught_up = time.perf_counter() - began - fed_in
            await app.runtime.execution_log.flush()
            newest = f"other{foreign:06d}"
            waited = time.perf_counter()
            while not any(c.correlation_id == newest for c in pane.calls.values()):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            foreign_lag = time.perf_counter() - waited
            end_rss, end_blocks = rss_mib(), sys.getallocatedblocks()
            rows, table_rows = len(pane.calls), pane.table.row_count
            dropped = app.subscription.dropped if app.subscription else 0
    print(
        f"fed {2 * fed:,} log events ({fed:,} calls) in {fed_in:.2f} s = "
        f"{2 * fed / fed_in:,.0f} events/s (goal {RATE:,}), and another process wrote "
        f"{foreign:,} rows"
    )
    print(
        f"key echo while fed: median {statistics.median(keys) * 1000:.1f} ms, "
        f"p95 {statistics.quantiles(keys, n=20)[-1] * 1000:.1f} ms, "
        f"max {max(keys) * 1000:.1f} ms over {len(keys)} keys  (goal <= 100 ms)"
    )
    print(
        f"the pane caught up {caught_up:.2f} s after the feed ended; the other process's last "
        f"row shown {foreign_lag:.2f} s after that; events dropped by the bus: {dropped}"
    )
    print(f"rows kept by the pane: {rows} (table {table_rows}); cap 500")
    print(f"garbage collector while fed: {pauses.line()}")
    rss = [r for r, _ in samples]
    blocks = [n for _, n in samples]
    print(
        f"memory (RSS): start {start_rss:.1f} MiB, end {end_rss:.1f} MiB "
        f"({end_rss - start_rss:+.1f}); each second: {' '.join(f'{r:.0f}' for r in rss)}"
    )
    print(
        f"Python's allocated blocks: start {start_blocks:,}, end {end_blocks:,} "
        f"({end_blocks - start_blocks:+,}); after 1 s {blocks[0]:,}, after {len(blocks)} s "
        f"{blocks[-1]:,} ({blocks[-1] - blocks[0]:+,}); each second, thousands: "
        f"{' '.join(f'{n // 1000}' for n in blocks)}"
    )


if __name__ == "__main__":
    asyncio.run(main())
