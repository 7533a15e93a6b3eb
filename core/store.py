"""The SQLite database: one WAL-mode file under the data dir, versioned migrations,
the execution log and the facts memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from .telemetry import StructuredLog

# Each entry moves the schema from version i to i+1; never edit one that has shipped.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE execution_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        correlation_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        agent TEXT,
        arguments TEXT NOT NULL,
        status TEXT NOT NULL,
        error_code TEXT,
        result TEXT,
        error TEXT,
        origin TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        latency_ms REAL NOT NULL
    );
    CREATE INDEX execution_log_correlation ON execution_log(correlation_id);
    CREATE INDEX execution_log_started ON execution_log(started_at);

    CREATE TABLE facts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '',
        source TEXT,
        created_at TEXT NOT NULL
    );
    CREATE VIRTUAL TABLE facts_fts USING fts5(
        content, tags, content='facts', content_rowid='id'
    );
    CREATE TRIGGER facts_after_insert AFTER INSERT ON facts BEGIN
        INSERT INTO facts_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
    END;
    CREATE TRIGGER facts_after_delete AFTER DELETE ON facts BEGIN
        INSERT INTO facts_fts(facts_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
    END;
    """,
    """
    CREATE TABLE proposals (
        id TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        agent TEXT,
        arguments TEXT NOT NULL,
        risk TEXT NOT NULL,
        reason TEXT NOT NULL,
        confidence REAL,
        correlation_id TEXT NOT NULL,
        origin TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        decided_at TEXT,
        decided_by TEXT,
        reject_reason TEXT,
        executor TEXT,
        result TEXT,
        error TEXT,
        error_code TEXT,
        finished_at TEXT
    );
    CREATE INDEX proposals_status ON proposals(status, created_at);
    """,
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX conversations_updated ON conversations(updated_at);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id),
        role TEXT NOT NULL,
        kind TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT '',
        thinking TEXT,
        tool_calls TEXT,
        tool_name TEXT,
        data TEXT,
        correlation_id TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX messages_conversation ON messages(conversation_id, id);
    """,
]

BUSY_TIMEOUT_MS = 10_000
WRITE_RETRY_START = 0.1
WRITE_RETRY_MAX = 5.0
# Once closing, a batch that still cannot be written goes to the JSON-lines log instead.
WRITE_ATTEMPTS_WHEN_CLOSING = 5


@dataclass(frozen=True)
class ExecutionRecord:
    """One finished call, as the execution log stores it (arguments already redacted)."""

    correlation_id: str
    tool: str
    agent: str | None
    arguments: dict[str, Any]
    status: str
    error_code: str | None
    result: Any
    error: str | None
    origin: str
    started_at: datetime
    finished_at: datetime
    latency_ms: float


class StorageError(Exception):
    """The data directory or database cannot be used; the message names the path."""


async def connect(path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> aiosqlite.Connection:
    """Open the database file in WAL mode and bring its schema up to date."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = await aiosqlite.connect(path, timeout=busy_timeout_ms / 1000)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open the database {path}: {_reason(exc)}") from None
    try:
        db.row_factory = aiosqlite.Row
        await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        await _set_wal(db, busy_timeout_ms / 1000)
        await db.execute("PRAGMA synchronous = NORMAL")
        await migrate(db)
    except sqlite3.Error as exc:
        await db.close()
        raise StorageError(f"cannot use the database {path}: {_reason(exc)}") from None
    return db


async def _set_wal(db: aiosqlite.Connection, within: float) -> None:
    """Switching to WAL needs the file to itself, and SQLite does not wait for that on its
    own: two processes opening a new database together retry until the other is done."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.02)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


async def migrate(db: aiosqlite.Connection) -> None:
    # BEGIN IMMEDIATE serialises two processes that open a fresh database together.
    await db.execute("BEGIN IMMEDIATE")
    try:
        async with db.execute("PRAGMA user_version") as cursor:
            row = await cursor.fetchone()
        version = int(row[0]) if row else 0
        for index in range(version, len(MIGRATIONS)):
            for statement in _split_statements(MIGRATIONS[index]):
                await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {index + 1}")
        await db.commit()
    except BaseException:
        await db.rollback()
        raise


def _split_statements(script: str) -> list[str]:
    """Split a migration on top-level semicolons, keeping trigger bodies whole."""
    statements: list[str] = []
    current: list[str] = []
    depth = 0
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        current.append(line)
        upper = stripped.upper()
        if upper.endswith("BEGIN"):
            depth += 1
        if upper.startswith("END;"):
            depth -= 1
        if stripped.endswith(";") and depth == 0:
            statements.append("\n".join(current))
            current = []
    if current:
        statements.append("\n".join(current))
    return statements


class ExecutionLog:
    """Records calls off the hot path: ``record`` queues, a writer task batches into SQLite
    and the JSON-lines log. A failed write is retried with backoff, keeping the batch;
    ``close`` drains the queue, so a clean shutdown loses nothing."""

    def __init__(self, db: aiosqlite.Connection, log: StructuredLog) -> None:
        self._db = db
        self._log = log
        self._queue: asyncio.Queue[ExecutionRecord | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="execution-log-writer")

    def record(self, record: ExecutionRecord) -> None:
        if self._writer is None:
            # Nothing will write the database any more; keep the call in the JSON-lines log.
            self._log.emit("execution_log.unwritten", level="error", **_as_log_fields(record))
            return
        self._queue.put_nowait(record)

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
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            records = [r for r in batch if r is not None]
            try:
                if records:
                    await self._write_with_retry(records)
            finally:
                for _ in batch:
                    self._queue.task_done()
            if len(records) != len(batch):
                return

    async def _write_with_retry(self, records: list[ExecutionRecord]) -> None:
        delay = WRITE_RETRY_START
        for attempt in range(1, WRITE_ATTEMPTS_WHEN_CLOSING + 1):
            try:
                await self._write(records)
                return
            except Exception as exc:  # the log must never take the app down
                with contextlib.suppress(Exception):
                    await self._db.rollback()
                self._log.emit(
                    "execution_log.write_failed",
                    level="error",
                    error=str(exc),
                    attempt=attempt,
                    records=len(records),
                )
            if self._closing and attempt >= WRITE_ATTEMPTS_WHEN_CLOSING:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, WRITE_RETRY_MAX)
        for record in records:
            self._log.emit("execution_log.unwritten", level="error", **_as_log_fields(record))

    async def _write(self, records: list[ExecutionRecord]) -> None:
        rows = [
            (
                r.correlation_id,
                r.tool,
                r.agent,
                to_json(r.arguments),
                r.status,
                r.error_code,
                None if r.result is None else to_json(r.result),
                r.error,
                r.origin,
                r.started_at.isoformat(),
                r.finished_at.isoformat(),
                r.latency_ms,
            )
            for r in records
        ]
        await self._db.executemany(
            "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, "
            "error_code, result, error, origin, started_at, finished_at, latency_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        await self._db.commit()
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


def to_json(value: Any) -> str:
    """JSON text for any value; what JSON cannot hold is kept as its repr."""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(repr(value))


def _as_log_fields(record: ExecutionRecord) -> dict[str, Any]:
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


async def recent_calls(db: aiosqlite.Connection, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` calls, oldest first."""
    async with db.execute(
        "SELECT * FROM (SELECT * FROM execution_log ORDER BY id DESC LIMIT ?) ORDER BY id",
        (limit,),
    ) as cursor:
        rows = await cursor.fetchall()
    calls = []
    for row in rows:
        call = dict(row)
        call["arguments"] = json.loads(call["arguments"])
        call["result"] = None if call["result"] is None else json.loads(call["result"])
        calls.append(call)
    return calls


_WORD = re.compile(r"\w+", re.UNICODE)


class FactStore:
    """Facts the assistant remembers, ranked by FTS5 (bm25)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def save(self, content: str, tags: list[str], source: str | None, at: datetime) -> int:
        cursor = await self._db.execute(
            "INSERT INTO facts (content, tags, source, created_at) VALUES (?, ?, ?, ?)",
            (content, " ".join(tags), source, at.isoformat()),
        )
        await self._db.commit()
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    async def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        words = _WORD.findall(query)
        if not words:
            return []
        # Quote every word so user text can never be read as FTS5 query syntax.
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        async with self._db.execute(
            "SELECT facts.id, facts.content, facts.tags, facts.source, facts.created_at, "
            "bm25(facts_fts) AS rank FROM facts_fts JOIN facts ON facts.id = facts_fts.rowid "
            "WHERE facts_fts MATCH ? ORDER BY rank LIMIT ?",
            (match, limit),
        ) as cursor:
            rows = await cursor.fetchall()
        return [
            {
                "id": row["id"],
                "content": row["content"],
                "tags": row["tags"].split() if row["tags"] else [],
                "source": row["source"],
                "created_at": row["created_at"],
                "score": round(-float(row["rank"]), 4),
            }
            for row in rows
        ]
