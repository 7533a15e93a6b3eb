"""The MCP sub-agent's requests as every process sees them: each request's state, written to
SQLite as it changes, so `mcp_check_subagent_status` in any diana process (and after a
restart) answers for requests made elsewhere.

Only what a request shows is stored (its public view: kind, server, priority, state,
progress, message, the tools a test found, a failed server's stderr tail, which process ran
it), never the config it was given, which may hold secrets. A request that was queued or in
progress in a process that is gone is shown as cancelled, saying so: nobody will finish it.
Writes go through one task per process, the newest state of each request at a time, so a
burst of progress costs one transaction and a slow database never holds the sub-agent up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any

from ..storage.db import Database
from ..system.telemetry import StructuredLog

OPEN = ("queued", "in_progress")
COLUMNS = (
    "id, kind, server, priority, state, progress, message, origin, pid, created_at, "
    "updated_at, detail"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RequestRecords:
    def __init__(self, db: Database, log: StructuredLog | None = None) -> None:
        self._db = db
        self._log = log
        self._pending: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._task: asyncio.Task[None] | None = None

    def note(self, shown: dict[str, Any]) -> None:
        """A request's public view as it is now; written soon, in order, the newest wins."""
        self._pending[str(shown["request_id"])] = dict(shown)
        self._settled.clear()
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._write_all(), name="subagent-records")

    async def flush(self) -> None:
        """Until every state noted so far is written (or its write failed and was logged)."""
        if self._task is None:
            return
        await self._settled.wait()

    async def close(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _write_all(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            try:
                await self._write(list(batch.values()))
            except Exception as exc:  # an aid to other processes: the request goes on
                if self._log is not None:
                    self._log.emit("subagent.record_failed", "warning", error=str(exc))
            if not self._pending:
                self._settled.set()

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        pid = os.getpid()
        rows = [
            (
                shown["request_id"],
                shown["kind"],
                shown["server"],
                shown.get("priority", "normal"),
                shown["state"],
                int(shown["progress"]),
                shown["message"],
                shown.get("origin", "api"),
                pid,
                shown["created_at"],
                shown["updated_at"],
                json.dumps(
                    {k: shown[k] for k in ("tools", "stderr_tail") if k in shown},
                    ensure_ascii=False,
                ),
            )
            for shown in batch
        ]

        async def upsert(connection: Any) -> None:
            await connection.executemany(
                f"INSERT INTO subagent_requests ({COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "state = excluded.state, progress = excluded.progress, "
                "message = excluded.message, updated_at = excluded.updated_at, "
                "detail = excluded.detail",
                rows,
            )

        await self._db.write(upsert)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        await self.flush()
        rows = await self._db.read(
            f"SELECT {COLUMNS} FROM subagent_requests WHERE id = ?", (request_id,)
        )
        return _shown(rows[0]) if rows else None

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The latest requests of every process, newest first."""
        await self.flush()
        rows = await self._db.read(
            f"SELECT {COLUMNS} FROM subagent_requests ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (limit,),
        )
        return [_shown(row) for row in rows]


def _shown(row: Any) -> dict[str, Any]:
    """A stored request as the model and a person are shown it; one left open by a process
    that is gone is cancelled, saying which."""
    shown: dict[str, Any] = {
        "request_id": row["id"],
        "kind": row["kind"],
        "server": row["server"],
        "priority": row["priority"],
        "state": row["state"],
        "progress": row["progress"],
        "message": row["message"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "origin": row["origin"],
        "pid": row["pid"],
    }
    try:
        detail = json.loads(row["detail"])
    except (TypeError, ValueError):
        detail = {}
    if isinstance(detail, dict):
        shown.update({k: v for k, v in detail.items() if k in ("tools", "stderr_tail")})
    pid = row["pid"]
    if shown["state"] in OPEN and pid != os.getpid() and not _alive(int(pid)):
        shown["state"] = "cancelled"
        shown["message"] = (
            f"interrupted: the diana process that ran it (pid {pid}) stopped before it "
            "finished; mcp-servers.json is as that process left it"
        )
    return shown
