"""What a running diana-tui shares with `diana` processes on the same data dir and config.

The app (``Sharing``) holds a lock file for as long as it runs, and keeps in SQLite:

- a row saying it runs (``live_apps``), with its pid and config dir;
- its MCP servers' state as its Servers pane sees it (``live_servers``), written again
  shortly after any server changes;
- requests from `diana` (``live_requests``): it looks for them every ``PICKUP_INTERVAL``
  seconds, carries each out once (a request is claimed in one statement) and writes the
  outcome.

A `diana` command finds the app with ``running_app``: a row whose lock file is held. A row
whose lock is free is from an app that ended without cleaning up (killed): it is removed
there and then. The lock, not the pid, says whether the app runs: the kernel lets go of it
when the process ends however it ends, and a pid can be reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .clock import Clock
from .config import Paths
from .db import Database
from .events import (
    CallFinished,
    Event,
    EventBus,
    Notice,
    ServerStatusChanged,
    Subscription,
    ToolsChanged,
)
from .files import open_private, private_dir
from .mcp.info import ServerInfo
from .mcp.manager import MCPManager
from .telemetry import StructuredLog, redact
from .watch import stop_task

LOCKS_DIR = "apps"  # under the data dir: one lock file per running app
PICKUP_INTERVAL = 0.25  # seconds between the app's looks for requests
PUBLISH_DELAY = 0.2  # changes within this many seconds are written once
ANSWER_POLL = 0.1  # seconds between a command's looks for the outcome
# How long a command waits for the outcome: a reconnect takes at most the server's connect
# timeout (30 s at most) twice, once for the handshake and once for listing its tools.
ANSWER_PATIENCE = 75.0
RECONNECT = "reconnect"


@dataclass(frozen=True)
class LiveApp:
    """A diana-tui running on this data dir with the same config dir."""

    app_id: str
    pid: int
    started_at: datetime
    servers_at: datetime | None  # when it last wrote its servers' state

    def describe(self) -> str:
        return f"diana-tui (pid {self.pid})"


class AppGone(Exception):
    """The app stopped, or did not answer in time; the message says which."""


def _lock_path(paths: Paths, app_id: str) -> Path:
    return paths.data_dir / LOCKS_DIR / f"{app_id}.lock"


def _config_key(paths: Paths) -> str:
    return str(paths.config_dir.resolve())


def _is_held(path: Path) -> bool:
    """Whether a running app holds the lock file at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone, or not a file we made: no app holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # closing lets go of a shared lock taken just now
    return False


async def running_app(db: Database, paths: Paths) -> LiveApp | None:
    """The app running on this data dir with this config dir (the latest started, if
    several), or None. Rows of apps that ended without cleaning up are removed."""
    rows = await db.read(
        "SELECT app_id, pid, started_at, servers_at FROM live_apps WHERE config_dir = ? "
        "ORDER BY started_at DESC",
        (_config_key(paths),),
    )
    for row in rows:
        if _is_held(_lock_path(paths, row["app_id"])):
            servers_at = row["servers_at"]
            return LiveApp(
                row["app_id"],
                row["pid"],
                datetime.fromisoformat(row["started_at"]),
                datetime.fromisoformat(servers_at) if servers_at else None,
            )
        await _forget(db, row["app_id"])
        with contextlib.suppress(OSError):
            _lock_path(paths, row["app_id"]).unlink()
    return None


async def _forget(db: Database, app_id: str) -> None:
    async def work(connection: Any) -> None:
        await connection.execute("DELETE FROM live_servers WHERE app_id = ?", (app_id,))
        await connection.execute("DELETE FROM live_apps WHERE app_id = ?", (app_id,))

    await db.write(work)


async def app_servers(db: Database, app: LiveApp, now: datetime) -> list[ServerInfo]:
    """The app's servers as it last wrote them, in its order; ``retry_in_s`` as of now."""
    rows = await db.read(
        "SELECT diagnostics FROM live_servers WHERE app_id = ? ORDER BY position",
        (app.app_id,),
    )
    servers = []
    for row in rows:
        server = json.loads(row["diagnostics"])
        retry_at = server.pop("retry_at", None)
        if retry_at is not None:
            left = (datetime.fromisoformat(retry_at) - now).total_seconds()
            server["retry_in_s"] = round(max(0.0, left), 1)
        servers.append(ServerInfo.from_public(server))
    return servers


async def ask_app(
    db: Database,
    paths: Paths,
    app: LiveApp,
    kind: str,
    server: str | None,
    clock: Clock,
    patience: float = ANSWER_PATIENCE,
) -> dict[str, Any]:
    """Ask the app to carry out one request and return its outcome. AppGone if the app
    stops first or does not answer within ``patience`` seconds."""

    async def insert(connection: Any) -> int:
        cursor = await connection.execute(
            "INSERT INTO live_requests (app_id, kind, server, requested_at) VALUES (?, ?, ?, ?)",
            (app.app_id, kind, server, clock.now().isoformat()),
        )
        return int(cursor.lastrowid)

    request_id = await db.write(insert)
    deadline = time.monotonic() + patience
    while True:
        row = await db.read_one(
            "SELECT finished_at, outcome FROM live_requests WHERE id = ?", (request_id,)
        )
        if row is not None and row["finished_at"] is not None:
            await db.execute("DELETE FROM live_requests WHERE id = ?", (request_id,))
            outcome: dict[str, Any] = json.loads(row["outcome"])
            return outcome
        if not _is_held(_lock_path(paths, app.app_id)):
            await db.execute("DELETE FROM live_requests WHERE id = ?", (request_id,))
            raise AppGone(f"{app.describe()} stopped before it answered")
        if time.monotonic() > deadline:
            await db.execute("DELETE FROM live_requests WHERE id = ?", (request_id,))
            raise AppGone(f"{app.describe()} did not answer within {patience:g} s")
        await asyncio.sleep(ANSWER_POLL)


class Sharing:
    """The app's side: it runs, its servers' state, and the requests it carries out."""

    def __init__(
        self,
        db: Database,
        paths: Paths,
        mcp: MCPManager,
        bus: EventBus,
        clock: Clock,
        log: StructuredLog | None = None,
    ) -> None:
        self._db = db
        self._paths = paths
        self._mcp = mcp
        self._bus = bus
        self._clock = clock
        self._log = log
        self.app_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._lock_fd: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._carrying: set[asyncio.Task[None]] = set()
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        path = _lock_path(self._paths, self.app_id)
        private_dir(path.parent)
        fd = open_private(path, os.O_RDWR | os.O_NOFOLLOW)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else has it
        self._lock_fd = fd
        await self._db.execute(
            "INSERT INTO live_apps (app_id, pid, config_dir, started_at) VALUES (?, ?, ?, ?)",
            (self.app_id, os.getpid(), _config_key(self._paths), self._clock.now().isoformat()),
        )
        await self.publish()
        self._subscription = self._bus.subscribe()
        self._tasks = [
            asyncio.create_task(self._follow(self._subscription), name="live-follow"),
            asyncio.create_task(self._serve(), name="live-requests"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []
        if self._subscription is not None:
            self._subscription.close()
        for task in list(self._carrying):
            await stop_task(task)
        try:
            if self._lock_fd is not None:  # it started
                await self._finish_unanswered()
                await _forget(self._db, self.app_id)
        finally:
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    _lock_path(self._paths, self.app_id).unlink()
                os.close(self._lock_fd)
                self._lock_fd = None

    # -- its servers ------------------------------------------------------------------------

    async def publish(self) -> None:
        """Write the servers' state as the app sees it now, replacing what was there."""
        now = self._clock.now()
        rows = []
        for position, info in enumerate(self._mcp.all_diagnostics()):
            server = info.public()
            if info.retry_in_s is not None:
                server["retry_at"] = (now + timedelta(seconds=info.retry_in_s)).isoformat()
            rows.append((self.app_id, position, json.dumps(redact(server), default=str)))

        async def work(connection: Any) -> None:
            await connection.execute("DELETE FROM live_servers WHERE app_id = ?", (self.app_id,))
            await connection.executemany(
                "INSERT INTO live_servers (app_id, position, diagnostics) VALUES (?, ?, ?)", rows
            )
            await connection.execute(
                "UPDATE live_apps SET servers_at = ? WHERE app_id = ?",
                (now.isoformat(), self.app_id),
            )

        await self._db.write(work)

    async def _follow(self, events: Subscription) -> None:
        """Write the servers again shortly after any of them changes."""
        while True:
            if not _changes_servers(await events.get()):
                continue
            await asyncio.sleep(PUBLISH_DELAY)
            while not events.queue.empty():  # what changed meanwhile is written with it
                await events.get()
            try:
                await self.publish()
            except Exception as exc:  # the next change tries again
                self._emit("live.publish_failed", error=str(exc))

    # -- requests ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            await asyncio.sleep(PICKUP_INTERVAL)
            try:
                await self._pick_up()
            except Exception as exc:  # a busy database: the next look tries again
                self._emit("live.pickup_failed", error=str(exc))

    async def _pick_up(self) -> None:
        rows = await self._db.read(
            "SELECT id, kind, server FROM live_requests "
            "WHERE app_id = ? AND picked_at IS NULL ORDER BY id",
            (self.app_id,),
        )
        for row in rows:
            claimed = await self._db.execute(
                "UPDATE live_requests SET picked_at = ? WHERE id = ? AND picked_at IS NULL",
                (self._clock.now().isoformat(), row["id"]),
            )
            if claimed:
                task = asyncio.create_task(self._carry_out(row["id"], row["kind"], row["server"]))
                self._carrying.add(task)
                task.add_done_callback(self._carrying.discard)

    async def _carry_out(self, request_id: int, kind: str, server: str | None) -> None:
        if kind == RECONNECT:  # said in the app, so a reconnect nobody pressed is explained
            which = f"MCP server {server}" if server else "every MCP server"
            self._bus.publish(Notice("information", f"`diana reconnect`: reconnecting {which}"))
        try:
            outcome = await self._outcome(kind, server)
        except Exception as exc:
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
        self._emit("live.request_done", kind=kind, server=server or "all", outcome=outcome)
        await self._answer(request_id, outcome)

    async def _outcome(self, kind: str, server: str | None) -> dict[str, Any]:
        if kind != RECONNECT:
            return {"error": f"diana-tui does not know the request {kind!r}"}
        try:
            names = await self._mcp.reconnect(server)
        except KeyError:
            return {"error": self._mcp.not_configured(str(server)), "unknown": True}
        await self._mcp.wait_reconnected(names)
        servers = []
        for name in names:
            state = self._mcp.connections[name].state
            servers.append(
                {
                    "name": name,
                    "ok": bool(state.last_attempt_ok),
                    "tools": len(state.tools),
                    "error": None if state.last_attempt_ok else str(state.last_error),
                }
            )
        return {"servers": redact(servers)}

    async def _answer(self, request_id: int, outcome: dict[str, Any]) -> None:
        await self._db.execute(
            "UPDATE live_requests SET finished_at = ?, outcome = ? WHERE id = ?",
            (self._clock.now().isoformat(), json.dumps(outcome), request_id),
            until_landed=True,
        )

    async def _finish_unanswered(self) -> None:
        """Requests this app claimed or was sent and will not carry out now it stops."""
        await self._db.execute(
            "UPDATE live_requests SET finished_at = ?, outcome = ? "
            "WHERE app_id = ? AND finished_at IS NULL",
            (
                self._clock.now().isoformat(),
                json.dumps({"error": "it stopped before carrying this out"}),
                self.app_id,
            ),
        )

    def _emit(self, event: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, "info", **fields)


def _changes_servers(event: Event) -> bool:
    """Whether the servers' state as shared changes with ``event``."""
    if isinstance(event, CallFinished):  # its calls and errors counts
        return (event.agent or "").startswith("mcp-")
    return isinstance(event, ServerStatusChanged | ToolsChanged)
