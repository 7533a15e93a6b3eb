"""`diana stats` over 100,000 logged calls: the time to count them.

Run from the repository root:  .venv/bin/python bench/bench_stats.py
Every figure is measured in this run; nothing is asserted. A fresh database gets 100,000
execution-log rows (40 tools of 8 servers and 4 built-in agents, mixed outcomes, spread over
30 days); then diana.core.usage.stats.usage counts them, whole, since 1 day, for one tool and
for one server, each 7 times (median and worst printed). The goal is 300 ms for the whole log.
BENCH_ROWS changes the number of rows.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diana.core.storage.schema import connect
from diana.core.usage.stats import usage

ROWS = int(os.environ.get("BENCH_ROWS", "100000"))
RUNS = 7
STATUSES = ["succeeded"] * 85 + ["failed"] * 6 + ["refused"] * 4 + ["timed_out"] * 2
STATUSES += ["pending_approval"] * 2 + ["cancelled"]


def rows(now: datetime) -> list[tuple[object, ...]]:
    chance = random.Random(7)
    agents = [f"mcp-server{n}" for n in range(8)] + ["memory", "clock", "obsidian", "local-tools"]
    made = []
    for index in range(ROWS):
        agent = agents[index % len(agents)]
        tool = f"{agent.removeprefix('mcp-')}_tool{index % 40 // len(agents)}"
        started = now - timedelta(seconds=chance.uniform(0, 30 * 86400))
        latency = chance.lognormvariate(3, 1)
        finished = started + timedelta(milliseconds=latency)
        made.append(
            (
                f"c{index}",
                tool,
                agent,
                "{}",
                chance.choice(STATUSES),
                None,
                None,
                None,
                "bench",
                started.isoformat(),
                finished.isoformat(),
                latency,
                latency / 1000,
            )
        )
    return made


async def main() -> None:
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as scratch:
        db = await connect(Path(scratch) / "diana.db")
        made = rows(now)
        await db.write(
            lambda c: c.executemany(
                "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, "
                "error_code, result, error, origin, started_at, finished_at, latency_ms, "
                "cost_units) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                made,
            )
        )
        servers = {f"server{n}": f"mcp-server{n}" for n in range(8)}
        cases = {
            "the whole log": {},
            "since 1 day": {"since": now - timedelta(days=1)},
            "one tool": {"tool": "server3_tool0"},
            "one server": {"server": "server5"},
        }
        print(f"diana stats over {ROWS:,} logged calls ({RUNS} runs each, after one warm-up)")
        for label, filters in cases.items():
            await usage(db, servers, **filters)  # type: ignore[arg-type]
            times = []
            for _ in range(RUNS):
                started = time.perf_counter()
                report = await usage(db, servers, **filters)  # type: ignore[arg-type]
                times.append((time.perf_counter() - started) * 1000)
            counted = sum(u.calls for u in report.tools)
            print(
                f"  {label:<14} {statistics.median(times):7.1f} ms median, "
                f"{max(times):7.1f} ms worst ({counted:,} calls, {len(report.tools)} tools)"
            )
        await db.close()


if __name__ == "__main__":
    asyncio.run(main())
