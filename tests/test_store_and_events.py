"""The SQLite file (WAL, migrations, nothing lost on close) and the event bus policy."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import aiosqlite
import pytest
from diana.core.events import EventBus, Notice
from diana.core.runtime import Profile, Runtime
from diana.core.storage.schema import MIGRATIONS, connect

from .conftest import stepping_clock


async def test_database_is_wal_and_migrated_once(tmp_path: Path) -> None:
    db = await connect(tmp_path / "diana.db")
    assert (await db.read("PRAGMA journal_mode"))[0][0] == "wal"
    assert (await db.read("PRAGMA user_version"))[0][0] == len(MIGRATIONS)
    await db.execute("INSERT INTO facts (content, created_at) VALUES ('kept', 'now')")
    await db.close()

    again = await connect(tmp_path / "diana.db")  # a second open must not re-run migrations
    assert [row[0] for row in await again.read("SELECT content FROM facts")] == ["kept"]
    await again.close()


async def test_rows_written_before_the_proposal_column_name_their_proposal(
    tmp_path: Path,
) -> None:
    """An execution log from before calls carried their proposal: an approved call's row
    (its origin said which proposal) and a held call's row (its result said) name it."""
    path = tmp_path / "old.db"
    before = next(i for i, script in enumerate(MIGRATIONS) if "ADD COLUMN proposal " in script)
    async with aiosqlite.connect(path) as old:
        for script in MIGRATIONS[:before]:
            await old.executescript(script)
        await old.execute(f"PRAGMA user_version = {before}")
        row = "'c', 't', 'a', '{}', ?, NULL, ?, NULL, ?, 'then', 'then', 1.0"
        for status, result, origin in (
            ("succeeded", '"done"', "proposal p7"),
            ("pending_approval", '{"proposal_id": "p8"}', "chat"),
            ("pending_approval", "not json", "chat"),
            ("succeeded", '{"proposal_id": "p9"}', "chat"),
        ):
            await old.execute(
                "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, "
                "error_code, result, error, origin, started_at, finished_at, latency_ms) "
                f"VALUES ({row})",
                (status, result, origin),
            )
        await old.commit()
    db = await connect(path)
    named = [r[0] for r in await db.read("SELECT proposal FROM execution_log ORDER BY id")]
    await db.close()
    assert named == ["p7", "p8", None, None]


async def test_connections_opening_a_new_database_together_all_succeed(
    tmp_path: Path,
) -> None:
    for round_ in range(10):
        path = tmp_path / f"shared-{round_}.db"
        connections = await asyncio.gather(*(connect(path) for _ in range(3)))
        for db in connections:
            assert (await db.read("PRAGMA user_version"))[0][0] == len(MIGRATIONS)
            assert (await db.read("PRAGMA journal_mode"))[0][0] == "wal"
            await db.close()


async def test_every_call_is_in_the_database_after_a_clean_shutdown(
    config_dir: Path, data_dir: Path
) -> None:
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    await asyncio.gather(
        *(runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"}) for _ in range(300))
    )
    await runtime.close()  # no flush by hand: close must drain the writer

    async with aiosqlite.connect(data_dir / "diana.db") as db:
        async with db.execute(
            "SELECT count(*), count(DISTINCT correlation_id) FROM execution_log"
        ) as cursor:
            assert tuple(await cursor.fetchone()) == (300, 300)


async def test_structured_log_has_lifecycle_and_tool_events(
    config_dir: Path, data_dir: Path
) -> None:
    import json

    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    await runtime.orchestrator.execute("get_current_time", {}, correlation_id="abc")
    await runtime.close()

    lines = [
        json.loads(line)
        for line in (data_dir / "logs" / "diana-2026-03-14.jsonl").read_text().splitlines()
    ]
    events = [line["event"] for line in lines]
    assert events[0] == "runtime.started"
    assert events.count("agent.started") == 9
    assert events.count("agent.stopped") == 9
    tool_line = next(line for line in lines if line["event"] == "tool.finished")
    assert tool_line["correlation_id"] == "abc" and tool_line["tool"] == "get_current_time"
    assert events[-1] == "runtime.stopped"


async def test_a_full_subscriber_drops_its_oldest_events_and_never_blocks_publish() -> None:
    bus = EventBus()
    slow = bus.subscribe(maxsize=3)
    fast = bus.subscribe(maxsize=100)

    for i in range(10):
        bus.publish(Notice("info", f"n{i}"))  # synchronous: it cannot block

    assert slow.dropped == 7
    kept = [slow.queue.get_nowait() for _ in range(3)]
    assert [n.message for n in kept if isinstance(n, Notice)] == ["n7", "n8", "n9"]
    assert fast.dropped == 0 and fast.queue.qsize() == 10


async def test_drained_returns_when_the_consumer_has_handled_everything() -> None:
    bus = EventBus()
    subscription = bus.subscribe()
    handled: list[str] = []

    async def consume() -> None:
        async for event in subscription:
            assert isinstance(event, Notice)
            await asyncio.sleep(0)
            handled.append(event.message)

    consumer = asyncio.create_task(consume())
    for i in range(5):
        bus.publish(Notice("info", str(i)))
    await asyncio.wait_for(subscription.drained(), timeout=5)
    assert handled == ["0", "1", "2", "3", "4"]
    consumer.cancel()


@pytest.mark.parametrize(
    "status",
    ["approved", "executing", "succeeded", "failed", "interrupted", "rejected", "withdrawn"],
)
async def test_a_held_rows_status_in_the_database_is_the_one_the_app_shows(
    tmp_path: Path, status: str
) -> None:
    """The trigger that keeps a held call's row in step with its proposal says what
    held_outcome says, whether the row was written before the decision or after it."""
    from diana.core.storage.call_record import held_outcome

    path = tmp_path / "diana.db"
    db = await connect(path)
    await db.close()
    row = (
        "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, origin,"
        " started_at, finished_at, latency_ms, proposal) VALUES"
        " ('c', 't', 'a', '{}', 'pending_approval', 'chat', 'x', 'x', 1.0, ?)"
    )
    proposal = (
        "INSERT INTO proposals (id, tool, arguments, risk, reason, correlation_id, origin,"
        " status, created_at, updated_at) VALUES (?, 't', '{}', 'irreversible', 'r', 'c',"
        " 'chat', 'pending', 'x', 'x')"
    )
    decide = "UPDATE proposals SET status = ?, reject_reason = 'no', error = 'gone' WHERE id = ?"
    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.execute(proposal, ("before",))
        raw.execute(row, ("before",))  # held, then decided
        raw.execute(decide, (status, "before"))
        raw.execute(proposal, ("after",))
        raw.execute(decide, (status, "after"))
        raw.execute(row, ("after",))  # decided before its held row was written
        raw.execute(proposal, ("waiting",))
        raw.execute(row, ("waiting",))
        raw.commit()
        rows = dict(
            (
                (p, (s, e))
                for p, s, e in raw.execute("SELECT proposal, status, error FROM execution_log")
            )
        )
    expected = held_outcome(status, "no", "gone")
    assert rows["before"] == rows["after"] == expected
    assert rows["waiting"] == ("pending_approval", None)
