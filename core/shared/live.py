"""What a running diana-tui shares with `diana` processes on the same data dir and config.

The app (``Sharing``) holds a lock file for as long as it runs (naming itself in it), and
keeps in SQLite:

- a row saying it runs (``live_apps``), with its pid and config dir;
- its MCP servers' state as its Servers pane sees it (``live_servers``), written with that
  row and again shortly after any server changes;
- requests from `diana` (``live_requests``): it takes them up as they come (``Glance``),
  at most ``PICKUP_INTERVAL`` seconds later, in one transaction, and answers identical ones
  (same kind, same server, same parameters) with one action: a flood of requests waits for
  the next action, and each request gets its outcome. There are two sorts, and nothing else
  is carried out: a reconnect (acting on one server at most once every ``ACTION_SPACING``
  seconds), and the questions of core/shared/queries.py, which change nothing (tools, health,
  resources, prompts, one resource, one prompt; ``tools`` with ``refresh`` has the servers
  list their tools again), answered on the app's live connections, ``MAX_QUERIES`` at a
  time, with an answer of at most ``MAX_ANSWER_BYTES``.

A `diana` command finds the app with ``running_app``: a row whose lock file is held. A row
whose lock is free is from an app that ended without cleaning up (killed): it is removed
there and then. The lock, not the pid, says whether the app runs: the kernel lets go of it
when the process ends however it ends, and a pid can be reused. Anything with the database
file can write a row, so every row is checked before it is believed (core/shared/live_rows.py):
one that cannot be read, or names a process that is not running, does not hold the lock or
did not write it, is passed over with a warning.

This module holds what a command finds (the app, its servers' state); the app's side is
core/shared/sharing.py, a command's requests of the app core/shared/app_requests.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from ..config.settings import Paths
from ..mcp.info import ServerInfo
from ..storage.db import Database
from ..system.os_processes import is_held, lock_holders, running
from .applock import LOCKS_DIR
from .live_rows import (
    APP_ID,
    MAX_SHARED_BYTES,
    AppRow,
    RetryAt,
    read_table,
    row_problem,
    row_values,
)

Warn = Callable[[str], None]


def _ignore(_text: str) -> None:
    pass


@dataclass(frozen=True)
class LiveApp:
    """A diana-tui running on this data dir with the same config dir."""

    app_id: str
    pid: int
    started_at: datetime
    servers_at: datetime  # when it last wrote its servers' state

    def describe(self) -> str:
        return f"diana-tui (pid {self.pid})"


class Glance:
    """Whether the database may have been written since the last look, told without SQLite:
    every commit, of any process, writes its -wal file (WAL mode), so its size and time
    change. A look is due when they did, and at least every ``every`` seconds whatever they
    say (a time the file system keeps too coarsely cannot hide a request for longer)."""

    def __init__(self, database: Path, every: float) -> None:
        self._wal = database.with_name(database.name + "-wal")
        self._every = every
        self._seen: tuple[int, int] | None = None
        self._looked = -float("inf")

    def due(self) -> bool:
        try:
            info = os.stat(self._wal)
            stamp: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None  # not there (yet): look
        now = time.monotonic()
        if stamp is not None and stamp == self._seen and now - self._looked < self._every:
            return False
        self._seen, self._looked = stamp, now
        return True


# -- the command's side ----------------------------------------------------------------------


def lock_path(paths: Paths, app_id: str) -> Path:
    return paths.data_dir / LOCKS_DIR / f"{app_id}.lock"


def config_key(paths: Paths) -> str:
    return str(paths.config_dir.resolve())


def data_key(paths: Paths) -> str:
    return str(paths.data_dir.resolve())


def _lock_content(path: Path) -> dict[str, Any] | None:
    """What the app wrote in its lock file (its id, pid and data dir), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        said = json.loads(os.read(fd, 4096))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return said if isinstance(said, dict) else None


def _inconsistency(paths: Paths, app: AppRow) -> str | None:
    """Why a row whose lock is held is not a running diana-tui's own, or None when it is:
    the process it names runs, holds the lock, and wrote in it this row's id and data dir."""
    path = lock_path(paths, app.app_id)
    if not running(app.pid):
        return f"its pid {app.pid} is not running"
    holders = lock_holders(path)
    if holders is not None and app.pid not in holders:
        held_by = ", ".join(str(pid) for pid in sorted(holders))
        return f"its lock is held by pid {held_by}, not by its pid {app.pid}"
    said = _lock_content(path)
    expected = {"app_id": app.app_id, "pid": app.pid, "data_dir": data_key(paths)}
    if said != expected:
        return "its lock file does not name it and this data dir"
    if app.servers_at is None:
        return "it has not shared its servers"
    return None


async def running_app(db: Database, paths: Paths, warn: Warn | None = None) -> LiveApp | None:
    """The app running on this data dir with this config dir (the latest started, if
    several), or None. Rows of apps that ended without cleaning up are removed. A row that
    cannot be read, or whose app is not the one its lock and pid say (a row written by hand),
    is not trusted: ``warn`` is told why, and it is passed over."""
    warn = warn or _ignore
    rows = await read_table(
        db, "live_apps", "SELECT app_id, pid, config_dir, started_at, servers_at FROM live_apps"
    )
    ours = config_key(paths)
    candidates: list[AppRow] = []
    for row in rows:
        values = row_values(row)
        try:
            app = AppRow.model_validate(values)
        except ValidationError as exc:
            named = values.get("app_id")
            warn(
                f"live_apps: the row of app {named!r:.60} cannot be read "
                f"({row_problem(exc)}); ignored"
            )
            if not (isinstance(named, str) and APP_ID.fullmatch(named)):
                await forget_app(db, named)  # no app has such an id, so none holds its lock
            elif not is_held(lock_path(paths, named)):
                await _forget_ended(db, paths, named)
            continue
        if app.config_dir == ours:
            candidates.append(app)
    for app in sorted(candidates, key=lambda app: app.started_at, reverse=True):
        if not is_held(lock_path(paths, app.app_id)):
            await _forget_ended(db, paths, app.app_id)
            continue
        problem = _inconsistency(paths, app)
        if problem is not None:
            warn(f"live_apps: app {app.app_id} is not taken for a running diana-tui: {problem}")
            continue
        assert app.servers_at is not None
        return LiveApp(app.app_id, app.pid, app.started_at, app.servers_at)
    return None


async def _forget_ended(db: Database, paths: Paths, app_id: str) -> None:
    """An app that ended without cleaning up (killed): its rows and lock file go."""
    await forget_app(db, app_id)
    with contextlib.suppress(OSError):
        lock_path(paths, app_id).unlink()


async def forget_app(db: Database, app_id: Any) -> None:
    async def work(connection: Any) -> None:
        await connection.execute("DELETE FROM live_servers WHERE app_id = ?", (app_id,))
        await connection.execute("DELETE FROM live_apps WHERE app_id = ?", (app_id,))

    await db.write(work)


async def app_servers(
    db: Database, app: LiveApp, now: datetime, warn: Warn | None = None
) -> list[ServerInfo]:
    """The app's servers as it last wrote them, in its order; ``retry_in_s`` as of now. A
    row that cannot be read is left out, and ``warn`` is told which and why."""
    warn = warn or _ignore
    rows = await read_table(
        db,
        "live_servers",
        "SELECT position, length(diagnostics) AS size, "
        "CASE WHEN length(diagnostics) <= ? THEN diagnostics END AS diagnostics "
        "FROM live_servers WHERE app_id = ? ORDER BY position",
        (MAX_SHARED_BYTES, app.app_id),
    )
    servers = []
    for row in rows:
        try:
            servers.append(_shared_server(row["diagnostics"], row["size"], now))
        except (ValueError, TypeError) as exc:
            warn(
                f"live_servers: server {row['position']!r} of {app.describe()} cannot be read "
                f"({row_problem(exc)}); left out"
            )
    return servers


def _shared_server(text: Any, size: Any, now: datetime) -> ServerInfo:
    if text is None:
        raise ValueError(
            "diagnostics is empty"
            if size is None
            else f"diagnostics is past {MAX_SHARED_BYTES:,} bytes"
        )
    if not isinstance(text, str | bytes):
        raise ValueError("diagnostics is not text")
    try:
        shown = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("diagnostics is not valid JSON") from None
    if not isinstance(shown, dict):
        raise ValueError("diagnostics is not a JSON object")
    server = ServerInfo.model_validate(shown)
    retry_at = RetryAt.model_validate(shown).retry_at
    if retry_at is not None:
        left = (retry_at - now).total_seconds()
        server = server.model_copy(update={"retry_in_s": round(max(0.0, left), 1)})
    return server
