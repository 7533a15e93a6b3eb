"""The execution log: every finished call's record, written off the hot path in batches,
pruned by age, read back and followed as other processes write."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import aiosqlite

from ..system.clock import Clock, SystemClock
from ..system.telemetry import StructuredLog
from .call_record import CallRecord
from .db import Database
from .stored import (
    loaded_json,
    scrub_rows,
    stored_json,
    stored_text,
    stored_time,
    to_json,
)

WRITE_RETRY_START = 0.1
WRITE_RETRY_MAX = 5.0
# Once closing, a batch that still cannot be written goes to the JSON-lines log instead.
WRITE_ATTEMPTS_WHEN_CLOSING = 5
# While no call is written, how often (seconds) the writer looks whether a day has passed.
PRUNE_CHECK_INTERVAL = 3600.0
# How often `follow_calls` looks for new rows, in seconds.
FOLLOW_INTERVAL = 0.5
# Runs of consecutive row ids this process wrote, kept for `CallsFromElsewhere` (a run is
# extended while nobody else writes, so this many runs means as many interleaved writers).
OWN_RUNS_KEPT = 10_000
# Rows read by id in one statement (well under SQLite's limit on parameters).
IDS_PER_READ = 500
# Seconds a caller waits for its call's record to be written (`landed`) before going on.
LANDED_WITHIN = 10.0


class _Prune:
    """Queued by ``start``: prune before anything else, and let ``flush`` wait for it."""


_PRUNE = _Prune()


class ExecutionLog:
    """Records calls off the hot path: ``record`` queues, a writer task batches into SQLite
    and the JSON-lines log. A failed write is retried with backoff, keeping the batch;
    ``close`` drains the queue, so a clean shutdown loses nothing. Every record can be
    stored: text that is not UTF-8 is replaced and values are cut to STORED_VALUE_LIMIT,
    with a note on the row; nothing in a record stops the writer.

    With ``retention_days``, rows that started longer ago are deleted at start and then once
    a day (the first write of a new local day, or an idle hourly look)."""

    def __init__(
        self,
        db: Database,
        log: StructuredLog,
        *,
        clock: Clock | None = None,
        retention_days: int | None = None,
    ) -> None:
        self._db = db
        self._log = log
        self._clock = clock or SystemClock()
        self._retention_days = retention_days
        self._pruned_on: date | None = None
        self._queue: asyncio.Queue[CallRecord | _Prune | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        # [first, last] ids of rows written here, oldest first; see `own_runs`.
        self._own: deque[list[int]] = deque(maxlen=OWN_RUNS_KEPT)
        # Records queued and not written yet (by id: each is alive while queued), and the
        # callers waiting for one (`landed`).
        self._unwritten: set[int] = set()
        self._landing: dict[int, asyncio.Future[None]] = {}

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="execution-log-writer")
        if self._retention_days is not None:
            self._queue.put_nowait(_PRUNE)

    def record(self, record: CallRecord) -> None:
        if self._writer is None or self._writer.done():
            # Nothing will write the database any more; keep the call in the JSON-lines log.
            self._log.emit("execution_log.unwritten", level="error", **_as_log_fields(record))
            return
        self._unwritten.add(id(record))
        self._queue.put_nowait(record)

    async def landed(self, record: CallRecord, within: float = LANDED_WITHIN) -> bool:
        """Wait until ``record`` is written (in the database; once closing, a record that
        cannot be is in the JSON-lines log), each batch one transaction for every caller
        waiting on it; False if ``within`` seconds passed first (it is still written)."""
        key = id(record)
        if key not in self._unwritten:
            return True
        waiter = self._landing.get(key)
        if waiter is None:
            waiter = self._landing[key] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(within):
                await asyncio.shield(waiter)
        except TimeoutError:
            self._log.emit("execution_log.slow", "warning", waited=within, tool=record.tool)
            return False
        return True

    def _landed(self, records: list[CallRecord]) -> None:
        for record in records:
            self._unwritten.discard(id(record))
            waiter = self._landing.pop(id(record), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def flush(self) -> None:
        """Wait until everything recorded so far is written."""
        if self._writer is not None:
            await self._queue.join()

    async def close(self) -> None:
        if self._writer is None:
            return
        self._closing = True
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        self._writer = None

    async def _write_loop(self) -> None:
        idle_check = None if self._retention_days is None else PRUNE_CHECK_INTERVAL
        while True:
            try:
                async with asyncio.timeout(idle_check):
                    first = await self._queue.get()
            except TimeoutError:
                await self._prune_once_a_day(self._clock.now())
                continue
            batch = [first]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            records = [r for r in batch if isinstance(r, CallRecord)]
            try:
                if records:
                    await self._write_with_retry(records)
                if any(item is _PRUNE for item in batch):
                    await self.prune(self._clock.now())
                elif records:
                    # The calls' own time: no extra clock reading per batch.
                    await self._prune_once_a_day(max(r.finished_at for r in records))
            except Exception as exc:  # never reached by design; the writer goes on regardless
                self._log.emit("execution_log.writer_error", "error", error=_describe(exc))
            finally:
                self._landed(records)
                for _ in batch:
                    self._queue.task_done()
            if any(item is None for item in batch):
                return

    async def _prune_once_a_day(self, now: datetime) -> None:
        if self._retention_days is not None and _local_day(now) != self._pruned_on:
            await self.prune(now)

    async def prune(self, now: datetime) -> int:
        """Delete the rows that started more than ``retention_days`` before ``now``; the
        number deleted. Looks first, so a day with nothing to delete takes no write lock."""
        if self._retention_days is None:
            return 0
        cutoff = stored_time(now - timedelta(days=self._retention_days))
        deleted = 0
        try:
            expired = await self._db.read_one(
                "SELECT 1 FROM execution_log WHERE started_at < ? LIMIT 1", (cutoff,)
            )
            if expired is not None:
                deleted = await self._db.execute(
                    "DELETE FROM execution_log WHERE started_at < ?", (cutoff,)
                )
        except Exception as exc:  # tried again with the next write
            self._log.emit("execution_log.prune_failed", level="error", error=_describe(exc))
            return 0
        self._pruned_on = _local_day(now)
        if deleted:
            self._log.emit("execution_log.pruned", rows=deleted, before=cutoff)
        return deleted

    async def _write_with_retry(self, records: list[CallRecord]) -> None:
        rows = [_stored_row(r) for r in records]
        delay = WRITE_RETRY_START
        for attempt in range(1, WRITE_ATTEMPTS_WHEN_CLOSING + 1):
            try:
                last = await _insert(self._db, rows)
                self._wrote(last - len(rows) + 1, last)
                break
            except Exception as exc:  # the log must never take the app down
                self._log.emit(
                    "execution_log.write_failed",
                    level="error",
                    error=_describe(exc),
                    attempt=attempt,
                    records=len(records),
                )
            if self._closing and attempt >= WRITE_ATTEMPTS_WHEN_CLOSING:
                for record in records:
                    self._log.emit(
                        "execution_log.unwritten", level="error", **_as_log_fields(record)
                    )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, WRITE_RETRY_MAX)
        for r in records:
            self._log.emit(
                "tool.finished",
                level="info" if r.status == "succeeded" else "warning",
                correlation_id=r.correlation_id,
                tool=r.tool,
                agent=r.agent,
                status=r.status,
                error_code=r.error_code,
                latency_ms=round(r.latency_ms, 3),
            )

    def _wrote(self, first: int, last: int) -> None:
        if self._own and self._own[-1][1] == first - 1:
            self._own[-1][1] = last
        else:
            self._own.append([first, last])

    def own_runs(self, after_id: int) -> list[tuple[int, int]]:
        """The ids (as runs ``(first, last)``, oldest first) of rows this process wrote
        after row ``after_id``: its own calls, which a view already has from its events."""
        return [(max(first, after_id + 1), last) for first, last in self._own if last > after_id]

    def forget_own_runs(self, through_id: int) -> None:
        """Rows up to ``through_id`` are seen: their runs need not be kept."""
        while self._own and self._own[0][1] <= through_id:
            self._own.popleft()
        if self._own and self._own[0][0] <= through_id:
            self._own[0][0] = through_id + 1


async def _insert(db: Database, rows: list[tuple[Any, ...]]) -> int:
    """Insert ``rows``; the id of the last. The usual batch, one call, is one statement on
    its own (no BEGIN or COMMIT round trip); more are one transaction, inside which the ids
    are consecutive (AUTOINCREMENT, nobody else writing): ``last - len + 1 .. last``."""
    if len(rows) == 1:
        last = await db.write_one(INSERT_CALL, rows[0])
        assert last is not None  # an INSERT always sets it
        return last
    return await db.write(lambda connection: _insert_calls(connection, rows))


async def _insert_calls(connection: aiosqlite.Connection, rows: list[tuple[Any, ...]]) -> int:
    await connection.executemany(INSERT_CALL, rows)
    async with connection.execute("SELECT last_insert_rowid()") as cursor:
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def scrub_calls(connection: aiosqlite.Connection, text: str, marker: str) -> int:
    """Replace ``text`` by ``marker`` in every logged call's arguments, result and error,
    inside the caller's write transaction; how many calls changed."""
    columns = {"arguments": True, "result": True, "error": False}
    return await scrub_rows(connection, "execution_log", columns, text, marker)


INSERT_CALL = (
    "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, error_code, "
    "result, error, origin, started_at, finished_at, latency_ms, cost_units, note, proposal) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _stored_row(r: CallRecord) -> tuple[Any, ...]:
    """The row for one record; never raises, whatever the record holds."""
    notes: list[str] = []
    arguments = stored_json(r.arguments, "arguments", notes)
    result = None if r.result is None else stored_json(r.result, "result", notes)
    return (
        stored_text(r.correlation_id, "correlation id", notes),
        stored_text(r.tool, "tool name", notes),
        stored_text(r.agent, "agent", notes),
        arguments,
        stored_text(r.status, "status", notes),
        stored_text(r.error_code, "error code", notes),
        result,
        stored_text(r.error, "error", notes),
        stored_text(r.origin, "origin", notes),
        r.started_at.isoformat(),
        r.finished_at.isoformat(),
        r.latency_ms,
        r.cost_units,
        "; ".join(notes) or None,
        stored_text(r.proposal, "proposal", notes),
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _as_log_fields(record: CallRecord) -> dict[str, Any]:
    return {
        "correlation_id": record.correlation_id,
        "tool": record.tool,
        "agent": record.agent,
        "status": record.status,
        "error_code": record.error_code,
        "arguments": to_json(record.arguments),
        "error": record.error,
        "started_at": record.started_at.isoformat(),
        "latency_ms": round(record.latency_ms, 3),
    }


def _local_day(moment: datetime) -> date:
    return moment.astimezone().date()


async def recent_calls(db: Database, limit: int = 50) -> list[CallRecord]:
    """The newest ``limit`` calls, oldest first."""
    return await query_calls(db, limit=limit)


# The calls of one origin: its own, and the runs of the proposals it made (an approved call
# runs with the origin "proposal ID", approvals/service.py).
BY_ORIGIN = "(origin = ? OR origin IN (SELECT 'proposal ' || id FROM proposals WHERE origin = ?))"


def origin_clause(origin: str | None) -> tuple[list[str], list[Any]]:
    """The WHERE clause (none, or one) and its parameters for the calls of ``origin``."""
    return ([], []) if origin is None else ([BY_ORIGIN], [origin, origin])


async def query_calls(
    db: Database,
    *,
    since: datetime | None = None,
    tool: str | None = None,
    status: str | None = None,
    origin: str | None = None,
    after_id: int | None = None,
    through_id: int | None = None,
    limit: int | None = 50,
) -> list[CallRecord]:
    """Calls matching every filter given, oldest first. Without ``after_id``: the newest
    ``limit`` of them; with it, the first ``limit`` written after that row (to follow the
    log). ``through_id`` leaves out rows written after it; ``limit`` None: no limit.
    ``origin``: the calls it made, and the runs of the proposals it made."""
    clauses, params = origin_clause(origin)
    for clause, value in (
        ("started_at >= ?", None if since is None else stored_time(since)),
        ("tool = ?", tool),
        ("status = ?", status),
        ("id > ?", after_id),
        ("id <= ?", through_id),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    params.append(-1 if limit is None else limit)  # LIMIT -1: no limit
    if after_id is None:
        query = (
            f"SELECT * FROM (SELECT * FROM execution_log{where} ORDER BY id DESC LIMIT ?) "
            "ORDER BY id"
        )
    else:
        query = f"SELECT * FROM execution_log{where} ORDER BY id LIMIT ?"
    return [_loaded_call(row) for row in await db.read(query, params)]


def _loaded_call(row: aiosqlite.Row) -> CallRecord:
    """A row read back as the record it was written from; what cannot be read in it is
    named in ``damaged``, so one bad row never hides the others."""
    damage: list[str] = []
    arguments = loaded_json(row["arguments"], "arguments", damage)
    return CallRecord(
        correlation_id=row["correlation_id"],
        tool=row["tool"],
        agent=row["agent"],
        arguments=arguments if isinstance(arguments, dict) else {"_": arguments},
        status=row["status"],
        error_code=row["error_code"],
        result=loaded_json(row["result"], "result", damage),
        error=row["error"],
        origin=row["origin"],
        started_at=_loaded_time(row["started_at"], "started_at", damage),
        finished_at=_loaded_time(row["finished_at"], "finished_at", damage),
        latency_ms=row["latency_ms"],
        cost_units=row["cost_units"] or 0.0,
        proposal=row["proposal"],
        row_id=row["id"],
        note=row["note"],
        damaged="; ".join(damage) or None,
    )


def _loaded_time(text: str, what: str, damage: list[str]) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        damage.append(f"{what} is not a time")
        return datetime.fromtimestamp(0, UTC)


async def latest_call_id(db: Database) -> int:
    """The id of the newest row in the execution log; 0 when it is empty."""
    row = await db.read_one("SELECT max(id) FROM execution_log")
    return int(row[0]) if row and row[0] is not None else 0


async def follow_calls(
    db: Database,
    *,
    after_id: int,
    every: float = FOLLOW_INTERVAL,
    since: datetime | None = None,
    tool: str | None = None,
    status: str | None = None,
    origin: str | None = None,
) -> AsyncIterator[list[CallRecord]]:
    """Batches of matching calls written after row ``after_id`` by any process, oldest
    first, as they appear (the database is looked at every ``every`` seconds), forever."""
    last = after_id
    while True:
        await asyncio.sleep(every)
        top = await latest_call_id(db)
        if top <= last:
            continue
        calls = await query_calls(
            db,
            since=since,
            tool=tool,
            status=status,
            origin=origin,
            after_id=last,
            through_id=top,
            limit=None,
        )
        last = top  # rows that did not match are never looked at again
        if calls:
            yield calls


class CallsFromElsewhere:
    """The execution log's rows that other processes write (`diana call`, an approval made
    with `diana approve`, another app), as they appear: for a view that learns of this
    process's own calls from its events. Rows this process wrote are left out by id.

    ``poll`` is cheap while nobody else writes: SQLite's ``data_version`` moves only when
    another connection commits, and this process's own new rows are skipped without a read."""

    def __init__(self, db: Database, log: ExecutionLog, after_id: int = 0) -> None:
        self._db = db
        self._log = log
        self.after_id = after_id  # every row up to this one has been looked at
        self._version: int | None = None

    @property
    def closed(self) -> bool:
        return self._db.closed

    async def poll(self, limit: int | None = None) -> list[CallRecord]:
        """The rows others wrote since the last poll, oldest first; with ``limit``, only the
        newest ``limit`` of them (the older ones are passed over)."""
        self._skip_own_rows()
        row = await self._db.read_one("PRAGMA data_version")
        version = int(row[0]) if row is not None else None
        if version is not None and version == self._version:
            return []
        self._version = version
        top = await latest_call_id(self._db)
        if top <= self.after_id:
            return []
        own = self._log.own_runs(self.after_id)
        if sum(last - first + 1 for first, last in own if last <= top) == top - self.after_id:
            ids: list[int] = []  # every new row is this process's own
        else:
            rows = await self._db.read(
                "SELECT id FROM execution_log WHERE id > ? AND id <= ? ORDER BY id",
                (self.after_id, top),
            )
            ids = [i for (i,) in rows if not _within(i, own)]
        self.after_id = top
        self._log.forget_own_runs(top)
        if limit is not None:
            ids = ids[-limit:] if limit > 0 else []
        calls: list[CallRecord] = []
        for start in range(0, len(ids), IDS_PER_READ):
            chosen = ids[start : start + IDS_PER_READ]
            marks = ", ".join("?" * len(chosen))
            query = f"SELECT * FROM execution_log WHERE id IN ({marks}) ORDER BY id"
            calls.extend(_loaded_call(row) for row in await self._db.read(query, chosen))
        return calls

    def _skip_own_rows(self) -> None:
        """Rows right after ``after_id`` that this process wrote need no reading."""
        for first, last in self._log.own_runs(self.after_id):
            if first != self.after_id + 1:
                break
            self.after_id = last
        self._log.forget_own_runs(self.after_id)


def _within(row_id: int, runs: list[tuple[int, int]]) -> bool:
    """Whether ``row_id`` lies in one of ``runs`` (ascending, not overlapping)."""
    index = bisect.bisect_right(runs, row_id, key=lambda run: run[0]) - 1
    return index >= 0 and runs[index][0] <= row_id <= runs[index][1]
