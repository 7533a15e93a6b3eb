"""One SQLite connection and the one transaction discipline every store in DIANA follows.

The app and any number of `diana` processes share one WAL-mode file. Python's sqlite3 opens
implicit deferred transactions and leaves one open when a statement fails; in WAL mode a
deferred transaction that read first gets SQLITE_BUSY at once (no busy wait) when another
process committed meanwhile. So here:

- the connection is in autocommit mode, and a write is ``BEGIN IMMEDIATE`` ... ``COMMIT``
  (or one statement alone, which SQLite makes its own transaction, ``write_one``): waiting
  for the write lock goes through ``busy_timeout``, never a stale snapshot;
- any error, cancellation included, rolls the transaction back before anything else runs;
- one transaction at a time per connection (a lock), reads included, so two tasks never
  interleave statements inside one transaction;
- SQLITE_BUSY / SQLITE_LOCKED is retried with bounded backoff, the whole unit of work again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ..system.files import open_private, private_dir, tighten

T = TypeVar("T")

BUSY_TIMEOUT_MS = 10_000
# After SQLite's own busy wait, how long a write keeps trying (seconds), and its backoff.
WRITE_PATIENCE = 30.0
RETRY_START = 0.05
RETRY_MAX = 1.0
# How long to wait for aiosqlite's thread after a failed open, so it never reports into a
# closed event loop.
THREAD_JOIN = 2.0

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
# Worth another try for a record that must land: the disk may come back or be freed.
SQLITE_IOERR = 10
SQLITE_FULL = 13

Work = Callable[[aiosqlite.Connection], Awaitable[T]]


class StorageError(Exception):
    """The data directory or database cannot be used; the message names the path."""


SQLITE_INTEGER_MAX = 2**63 - 1  # the largest integer SQLite stores; a larger one cannot be bound


def is_row_id(value: int) -> bool:
    """Whether ``value`` can be a row id (1 to SQLITE_INTEGER_MAX): SQLite cannot even be
    asked about a larger one (binding it raises OverflowError)."""
    return 1 <= value <= SQLITE_INTEGER_MAX


def is_busy(exc: BaseException) -> bool:
    """Another connection holds the lock SQLite needed (after its busy wait)."""
    return _primary_code(exc) in (SQLITE_BUSY, SQLITE_LOCKED) or (
        isinstance(exc, sqlite3.OperationalError)
        and _primary_code(exc) is None
        and ("locked" in str(exc) or "busy" in str(exc))
    )


def is_transient(exc: BaseException) -> bool:
    """Busy, or a disk that failed or filled: the same write may land later."""
    return is_busy(exc) or _primary_code(exc) in (SQLITE_IOERR, SQLITE_FULL)


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
    return None if code is None else code & 0xFF


def reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class Database:
    """A connection whose every transaction follows the module's discipline.

    ``read`` runs one statement and returns its rows; ``write`` runs a unit of work inside
    ``BEGIN IMMEDIATE`` ... ``COMMIT`` and may run it again after SQLITE_BUSY, so the work
    must only issue statements (no other side effects)."""

    def __init__(
        self, connection: aiosqlite.Connection, path: Path, patience: float = WRITE_PATIENCE
    ) -> None:
        self._connection = connection
        self._turn = asyncio.Lock()
        self.path = path
        self.patience = patience
        self.closed = False

    @classmethod
    async def open(
        cls, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS, patience: float = WRITE_PATIENCE
    ) -> Database:
        """Open ``path`` in WAL mode. StorageError (naming the path) if it cannot be used."""
        _check_file(path)
        connection = aiosqlite.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None)
        opening = asyncio.ensure_future(_opened(connection))
        try:
            await asyncio.shield(opening)
        except asyncio.CancelledError:
            await _close_once_open(opening, connection)
            raise
        except (OSError, sqlite3.Error) as exc:
            await _join_thread(connection)
            raise StorageError(f"cannot open the database {path}: {reason(exc)}") from None
        db = cls(connection, path, patience)
        async with released_on_failure(path, db.close):
            connection.row_factory = aiosqlite.Row
            await connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await _set_wal(connection, busy_timeout_ms / 1000)
            await connection.execute("PRAGMA synchronous = NORMAL")
            # What is deleted or overwritten (a secret scrubbed from a settled proposal, a row
            # past retention) is zeroed in the file, not left in free space.
            await connection.execute("PRAGMA secure_delete = ON")
        return db

    async def checkpoint(self) -> bool:
        """Copy the write-ahead log into the file and empty it, so what was deleted is no
        longer in the -wal file either; whether it could (not while another connection
        reads an older snapshot: then the next checkpoint does)."""
        row = await self.read_one("PRAGMA wal_checkpoint(TRUNCATE)")
        return row is not None and int(row[0]) == 0

    async def close(self) -> None:
        async with self._turn:
            self.closed = True
            await self._connection.close()

    async def read(self, sql: str, params: Iterable[Any] = ()) -> list[aiosqlite.Row]:
        """The rows ``sql`` selects. A read that is cancelled still runs to its end first:
        its statement, left open, would hold an old snapshot, and every later write on this
        connection would be refused as busy."""
        async with self._turn:
            reading = asyncio.ensure_future(self._rows(sql, tuple(params)))
            cancelled = False
            while not reading.done():
                try:
                    await asyncio.shield(reading)
                except asyncio.CancelledError:
                    cancelled = True
                except Exception:
                    pass  # raised below, from the task
            if cancelled:
                if not reading.cancelled():
                    reading.exception()  # retrieved: the cancellation is what is raised
                raise asyncio.CancelledError
            return reading.result()

    async def _rows(self, sql: str, params: tuple[Any, ...]) -> list[aiosqlite.Row]:
        async with self._connection.execute(sql, params) as cursor:
            return list(await cursor.fetchall())

    async def read_one(self, sql: str, params: Iterable[Any] = ()) -> aiosqlite.Row | None:
        rows = await self.read(sql, params)
        return rows[0] if rows else None

    async def write(self, work: Work[T], *, until_landed: bool = False) -> T:
        """Run ``work`` in one write transaction and return what it returns. SQLITE_BUSY is
        retried with backoff for ``patience`` seconds, then StorageError says so; with
        ``until_landed`` (records that must never be dropped) busy and I/O errors are
        retried until it lands. Other errors are raised at once, the transaction rolled
        back."""
        return await self._retrying(lambda: self._transaction(work), until_landed)

    async def write_one(self, sql: str, params: Iterable[Any] = ()) -> int | None:
        """One statement as its own transaction (SQLite makes a lone statement in autocommit
        mode atomic, and waits for the write lock through ``busy_timeout`` as ``BEGIN
        IMMEDIATE`` does): no BEGIN or COMMIT round trip. The id of the row it inserted, if
        any. Retried as ``write`` is."""
        values = tuple(params)

        async def statement() -> int | None:
            async with self._turn:
                return (await self._connection.execute(sql, values)).lastrowid

        return await self._retrying(statement, until_landed=False)

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], until_landed: bool) -> T:
        delay = RETRY_START
        started = time.monotonic()
        while True:
            try:
                return await attempt()
            except sqlite3.Error as exc:
                if until_landed and is_transient(exc):
                    pass
                elif not is_busy(exc):
                    raise
                elif time.monotonic() - started >= self.patience:
                    raise StorageError(
                        f"the database {self.path} stayed busy for "
                        f"{time.monotonic() - started:.1f} s (another process kept writing); "
                        "nothing was changed, try again"
                    ) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def execute(
        self, sql: str, params: Iterable[Any] = (), *, until_landed: bool = False
    ) -> int:
        """One statement in its own write transaction; the number of rows it changed."""

        async def statement(connection: aiosqlite.Connection) -> int:
            cursor = await connection.execute(sql, tuple(params))
            return cursor.rowcount

        return await self.write(statement, until_landed=until_landed)

    async def _transaction(self, work: Work[T]) -> T:
        async with self._turn:
            connection = self._connection
            try:
                # Inside the try: a cancel while BEGIN is on its way still lets it run, so
                # what it opened is rolled back (a BEGIN that failed leaves nothing to roll
                # back, and the rollback's complaint is ignored).
                await connection.execute("BEGIN IMMEDIATE")
                result = await work(connection)
                await connection.execute("COMMIT")
            except BaseException:
                await self._roll_back()
                raise
            return result

    async def _roll_back(self) -> None:
        """Roll back before the lock is released, even while being cancelled: the next
        transaction on this connection must never start inside this one."""
        rollback = asyncio.ensure_future(self._connection.rollback())
        cancelled = False
        while not rollback.done():
            try:
                await asyncio.shield(rollback)
            except asyncio.CancelledError:
                cancelled = True
            except Exception:
                pass  # the connection is gone: nothing is left open on it
        if not rollback.cancelled():
            rollback.exception()  # retrieved, so a failed rollback raises no warning later
        if cancelled:
            raise asyncio.CancelledError


@contextlib.asynccontextmanager
async def released_on_failure(
    path: Path, release: Callable[[], Awaitable[None]]
) -> AsyncIterator[None]:
    """A start-up step over the database at ``path``: if it fails, ``release`` what was
    opened before the error goes on (a SQLite error as StorageError naming the file)."""
    try:
        yield
    except sqlite3.Error as exc:
        await release()
        raise StorageError(f"cannot use the database {path}: {reason(exc)}") from None
    except BaseException:
        await release()
        raise


def _check_file(path: Path) -> None:
    """A database path that exists must be a regular file (not a folder, FIFO or device:
    SQLite would fail late, block, or read without end). One that does not is made, empty
    and 0600, in a 0700 folder."""
    try:
        private_dir(path.parent)
        mode = path.stat().st_mode
    except FileNotFoundError:
        _make_private_file(path)
        return
    except OSError as exc:
        raise StorageError(f"cannot open the database {path}: {reason(exc)}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise StorageError(
            f"cannot open the database {path}: it is {kind}; move it aside or choose "
            "another --data-dir"
        )
    tighten(path)
    for suffix in SQLITE_COMPANIONS:
        tighten(path.with_name(path.name + suffix), follow=False)


# SQLite gives its -wal, -shm and -journal files the mode of the database file itself, so the
# database is made 0600 before SQLite opens it (a umask set around connect would change it
# for every thread of the process at once).
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _make_private_file(path: Path) -> None:
    try:
        os.close(open_private(path, os.O_RDONLY | os.O_EXCL | os.O_NOFOLLOW))
    except FileExistsError:  # another process made it first, or a dangling link
        pass
    except OSError as exc:
        raise StorageError(f"cannot open the database {path}: {reason(exc)}") from None


async def _opened(connection: aiosqlite.Connection) -> None:
    await connection


async def _close_once_open(opening: asyncio.Future[None], connection: aiosqlite.Connection) -> None:
    """Stopped (Ctrl-C) while the file was opening: aiosqlite's thread goes on opening it and
    then reports to the loop. Wait for that and close the connection, so the thread never
    reports to a loop that has closed (a traceback on the way out)."""
    with contextlib.suppress(BaseException):
        await asyncio.wait([opening])
    if opening.done() and not opening.cancelled() and opening.exception() is None:
        with contextlib.suppress(Exception):
            await connection.close()
    else:
        await _join_thread(connection)


async def _join_thread(connection: aiosqlite.Connection) -> None:
    """aiosqlite stops its (non-daemon) thread after a failed connect and reports to the
    loop from it: wait, so the report lands before the loop closes and the process ends."""
    thread = getattr(connection, "_thread", None)
    if thread is not None and thread.is_alive():
        with contextlib.suppress(Exception):
            await asyncio.to_thread(thread.join, THREAD_JOIN)
    await asyncio.sleep(0)


async def _set_wal(connection: aiosqlite.Connection, within: float) -> None:
    """Switching to WAL needs the file to itself, and SQLite does not wait for that on its
    own: two processes opening a new database together retry until the other is done."""
    deadline = time.monotonic() + within
    while True:
        try:
            await connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)
