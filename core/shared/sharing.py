"""The app's side of what a running diana-tui shares with `diana` (core/shared/live.py): the lock
file and the row saying it runs, its servers' state written again shortly after any change,
and the requests it takes up and carries out.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..config.settings import Paths
from ..config.watch import stop_task
from ..events import (
    CallFinished,
    Event,
    EventBus,
    Notice,
    ServerStatusChanged,
    Subscription,
    ToolsChanged,
)
from ..mcp.manager import MCPManager
from ..storage.db import Database
from ..system.clock import Clock
from ..system.files import open_private, private_dir
from ..system.telemetry import SECRET_VALUES, StructuredLog, redact
from .live import Glance, config_key, data_key, forget_app, lock_path
from .live_rows import (
    APPROVE,
    CALLS,
    MAX_ANSWER_BYTES,
    MAX_NAME,
    MAX_PARAMS,
    RECONNECT,
    Outcome,
    RequestRow,
    ServerOutcome,
    row_problem,
    row_values,
)

PICKUP_INTERVAL = 0.25  # seconds between the app's looks for requests
PUBLISH_DELAY = 0.2  # changes within this many seconds are written once
PUBLISH_RETRY = 1.0  # seconds before the servers' state is written again after a failure
# Seconds between glances at the database file, between those looks: a look is taken as soon
# as it has been written (a request made, an outcome written), without waiting for the next.
PICKUP_GLANCE = 0.05  # the app's, for requests
# Identical requests are answered by one action; one target is acted on at most once in
# this many seconds, so a flood of requests waits rather than restarting a server on end.
ACTION_SPACING = 1.0
MAX_WAITING = 10_000  # requests taken up and not yet answered; more are told to try later
MAX_QUERIES = 4  # questions answered at once; more wait for one to end

_Key = tuple[str, str | None, str]  # a request's kind, server and parameters (JSON)

if TYPE_CHECKING:
    from ..models import ToolResult

# How the app runs a call it is asked for (tool, arguments, origin), through its own gate;
# and approves a proposal (id, by whom), running its call: the result, or an exception
# whose text says why it was refused.
RunCall = Callable[[str, dict[str, Any], str], Awaitable["ToolResult"]]
Approve = Callable[[str, str], Awaitable["ToolResult"]]
# Approvals refused for what the proposal is (decided, damaged, changed): said to the command.
REFUSALS = ("AlreadyDecided", "DamagedProposal", "ProposalChanged", "UnknownProposal")


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
        *,
        run_call: RunCall | None = None,
        approve: Approve | None = None,
    ) -> None:
        self._db = db
        self._run_call = run_call
        self._approve = approve
        self._paths = paths
        self._mcp = mcp
        self._bus = bus
        self._clock = clock
        self._log = log
        self.app_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._lock_fd: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._subscription: Subscription | None = None
        # Requests taken up and not yet answered, by what they ask (kind, server, the
        # parameters as JSON): each waits for the next action on its target, which answers
        # them all.
        self._waiting: dict[_Key, list[int]] = {}
        self._waiting_count = 0
        self._acting: dict[_Key, asyncio.Task[None]] = {}
        self._last_action: dict[_Key, float] = {}
        self._questions = asyncio.Semaphore(MAX_QUERIES)

    async def start(self) -> None:
        path = lock_path(self._paths, self.app_id)
        private_dir(path.parent)
        fd = open_private(path, os.O_RDWR | os.O_NOFOLLOW)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else has it
        self._lock_fd = fd
        # What a `diana` checks the row against: a row naming this lock is this app's.
        said = {"app_id": self.app_id, "pid": os.getpid(), "data_dir": data_key(self._paths)}
        os.write(fd, json.dumps(said).encode())
        # Subscribed first: a server that changes while the first state is being written is
        # written again (it was lost, and `diana servers` showed it as it had been).
        self._subscription = self._bus.subscribe()
        await self.publish(announce=True)  # the row and the servers, in one transaction
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
        for task in list(self._acting.values()):
            await stop_task(task)
        try:
            if self._lock_fd is not None:  # it started
                await self._finish_unanswered()
                await forget_app(self._db, self.app_id)
        finally:
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    lock_path(self._paths, self.app_id).unlink()
                os.close(self._lock_fd)
                self._lock_fd = None

    # -- its servers ------------------------------------------------------------------------

    async def publish(self, *, announce: bool = False) -> None:
        """Write the servers' state as the app sees it now, replacing what was there; with
        ``announce``, the row saying the app runs with it."""
        now = self._clock.now()
        rows = []
        for position, info in enumerate(self._mcp.all_diagnostics()):
            server = info.model_dump(mode="json")
            if info.retry_in_s is not None:
                server["retry_at"] = (now + timedelta(seconds=info.retry_in_s)).isoformat()
            rows.append((self.app_id, position, json.dumps(redact(server), default=str)))

        async def work(connection: Any) -> None:
            if announce:
                await connection.execute(
                    "INSERT INTO live_apps (app_id, pid, config_dir, started_at) "
                    "VALUES (?, ?, ?, ?)",
                    (self.app_id, os.getpid(), config_key(self._paths), now.isoformat()),
                )
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
            while True:  # written until it is: no later change may come to write it
                try:
                    await self.publish()
                    break
                except Exception as exc:
                    self._emit("live.publish_failed", error=str(exc))
                    await asyncio.sleep(PUBLISH_RETRY)

    # -- requests ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        glance = Glance(self._db.path, PICKUP_INTERVAL)
        while True:
            await asyncio.sleep(PICKUP_GLANCE)
            if not glance.due():
                continue
            try:
                await self._pick_up()
            except Exception as exc:  # a busy database: the next look tries again
                self._emit("live.pickup_failed", error=str(exc))

    async def _pick_up(self) -> None:
        """Take up the requests sent since the last look, in one transaction. Those that
        cannot be carried out are answered at once; the others wait for their target's
        next action."""
        waiting = await self._db.read(
            "SELECT 1 FROM live_requests WHERE app_id = ? AND picked_at IS NULL LIMIT 1",
            (self.app_id,),
        )
        if not waiting:
            return
        now = self._clock.now().isoformat()

        async def claim(connection: Any) -> list[Any]:
            cursor = await connection.execute(
                "SELECT id, substr(kind, 1, 64) AS kind, substr(server, 1, ?) AS server, "
                "substr(params, 1, ?) AS params "
                "FROM live_requests WHERE app_id = ? AND picked_at IS NULL ORDER BY id LIMIT ?",
                (MAX_NAME + 1, MAX_PARAMS + 1, self.app_id, MAX_WAITING),
            )
            rows = list(await cursor.fetchall())
            if rows:  # the same rows: no other writer comes between, and only this app claims
                await connection.execute(
                    "UPDATE live_requests SET picked_at = ? "
                    "WHERE app_id = ? AND picked_at IS NULL AND id <= ?",
                    (now, self.app_id, rows[-1]["id"]),
                )
            return rows

        answers: dict[str, list[int]] = {}  # outcome: the requests answered with it now
        for row in await self._db.write(claim):
            outcome = self._take_up(row["id"], row_values(row))
            if outcome is not None:
                answers.setdefault(outcome.stored(), []).append(row["id"])
        for stored, ids in answers.items():
            await self._answer(ids, stored)

    def _take_up(self, request_id: int, values: dict[str, Any]) -> Outcome | None:
        """The request joins those waiting for the same action, or is answered now (the
        outcome): one that cannot be read, names no configured server, or is one too many."""
        try:
            request = RequestRow.model_validate(values)
            asked = request.asked()
        except ValueError as exc:  # a ValidationError too
            self._emit("live.request_refused", id=request_id, error=row_problem(exc))
            return Outcome(error=f"diana-tui cannot read this request: {row_problem(exc)}")
        if request.server is not None and request.server not in self._mcp.configs:
            return Outcome(error=self._mcp.not_configured(request.server), unknown=True)
        if self._waiting_count >= MAX_WAITING:
            return Outcome(error=f"too many requests ({MAX_WAITING:,}) wait; try again later")
        if request.kind in CALLS and (self._run_call is None or self._approve is None):
            return Outcome(error=f"it does not run {request.kind} requests")
        key = (request.kind, request.server, json.dumps(asked, sort_keys=True))
        if request.kind in CALLS:  # each runs once: never joined with an identical one
            key = (request.kind, f"#{request_id}", key[2])
        self._waiting.setdefault(key, []).append(request_id)
        self._waiting_count += 1
        if key not in self._acting:
            task = asyncio.create_task(self._act(key), name=f"live-{request.kind}")
            self._acting[key] = task
        return None

    async def _act(self, key: _Key) -> None:
        """Carry out what the requests for ``key`` ask, once for all those waiting, then
        again for those that came meanwhile; a reconnect never twice within ACTION_SPACING
        seconds."""
        kind, server, asked = key
        try:
            while key in self._waiting:
                last = self._last_action.get(key)
                if last is not None:
                    await asyncio.sleep(max(0.0, last + ACTION_SPACING - time.monotonic()))
                ids = self._waiting.pop(key)  # the requests that came while it waited too
                self._waiting_count -= len(ids)
                if kind == RECONNECT:  # said in the app, so a reconnect nobody pressed is explained
                    self._last_action[key] = time.monotonic()
                    which = f"MCP server {server}" if server else "every MCP server"
                    notice = f"`diana reconnect`: reconnecting {which}"
                    self._bus.publish(Notice("information", notice))
                try:
                    if kind == RECONNECT:
                        outcome = await self._outcome(server)
                    elif kind in CALLS:
                        outcome = await self._run(kind, json.loads(asked))
                    else:
                        async with self._questions:
                            outcome = await self._answer_question(kind, server, json.loads(asked))
                    stored = outcome.stored()
                except Exception as exc:
                    outcome = Outcome(error=f"{type(exc).__name__}: {exc}")
                    stored = outcome.stored()
                if len(stored) > MAX_ANSWER_BYTES:  # ASCII: a character is a byte
                    outcome = Outcome(
                        error=f"its answer is {len(stored):,} bytes, past the "
                        f"{MAX_ANSWER_BYTES:,} it passes on"
                    )
                    stored = outcome.stored()
                self._emit(
                    "live.request_done",
                    kind=kind,
                    server=server or "all",
                    requests=len(ids),
                    outcome=outcome.summary(),
                )
                await self._answer(ids, stored)
        finally:
            self._acting.pop(key, None)

    async def _answer_question(
        self, kind: str, server: str | None, asked: dict[str, Any]
    ) -> Outcome:
        """A question of core/shared/queries.py, answered on the app's connections as they are;
        configured secret values in it are masked before it is written."""
        from .queries import answer

        try:
            found = await answer(kind, self._mcp, server, asked, now=self._clock.now, here=False)
        except KeyError:
            return Outcome(error=self._mcp.not_configured(str(server)), unknown=True)
        return Outcome(answer=_masked(found.model_dump(mode="json")))

    async def _run(self, kind: str, asked: dict[str, Any]) -> Outcome:
        """A call run through the app's own gate, as its /call runs one (origin kept), or a
        proposal approved and its call run here; the result, secrets masked, as the answer."""
        assert self._run_call is not None and self._approve is not None
        if kind == APPROVE:
            try:
                result = await self._approve(asked["proposal"], asked["by"])
            except Exception as exc:
                if type(exc).__name__ not in REFUSALS:
                    raise
                return Outcome(answer={"refused": str(exc), "why": type(exc).__name__})
        else:
            result = await self._run_call(asked["tool"], asked["arguments"], asked["origin"])
        return Outcome(answer={"result": _masked(result.model_dump(mode="json"))})

    async def _outcome(self, server: str | None) -> Outcome:
        try:
            names = await self._mcp.reconnect(server)
        except KeyError:
            return Outcome(error=self._mcp.not_configured(str(server)), unknown=True)
        await self._mcp.wait_reconnected(names)
        servers = []
        for name in names:
            state = self._mcp.connections[name].state
            error = None if state.last_attempt_ok else redact(str(state.last_error))
            servers.append(
                ServerOutcome(
                    name=name, ok=bool(state.last_attempt_ok), tools=len(state.tools), error=error
                )
            )
        return Outcome(servers=servers)

    async def _answer(self, ids: list[int], stored: str) -> None:
        """Every one of the requests gets the outcome, in one transaction."""
        finished = self._clock.now().isoformat()

        async def work(connection: Any) -> None:
            for start in range(0, len(ids), 500):  # within SQLite's count of parameters
                chunk = ids[start : start + 500]
                await connection.execute(
                    "UPDATE live_requests SET finished_at = ?, outcome = ? "
                    f"WHERE finished_at IS NULL AND id IN ({', '.join('?' * len(chunk))})",
                    (finished, stored, *chunk),
                )

        await self._db.write(work, until_landed=True)

    async def _finish_unanswered(self) -> None:
        """Requests this app claimed or was sent and will not carry out now it stops. A call
        or an approval it has not taken up is left as it is: its command, seeing the app
        gone, takes it back and runs it itself."""
        await self._db.execute(
            "UPDATE live_requests SET finished_at = ?, outcome = ? "
            "WHERE app_id = ? AND finished_at IS NULL "
            "AND (picked_at IS NOT NULL OR kind NOT IN ('call', 'approve'))",
            (
                self._clock.now().isoformat(),
                Outcome(error="it stopped before carrying this out").stored(),
                self.app_id,
            ),
        )

    def _emit(self, event: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, "info", **fields)


def _masked(value: Any) -> Any:
    """A copy of a JSON value with every configured secret value in its text as ***."""
    if isinstance(value, str):
        return SECRET_VALUES.mask(value)
    if isinstance(value, dict):
        return {_masked(key): _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return value


def _changes_servers(event: Event) -> bool:
    """Whether the servers' state as shared changes with ``event``."""
    if isinstance(event, CallFinished):  # its calls and errors counts
        return (event.agent or "").startswith("mcp-")
    return isinstance(event, ServerStatusChanged | ToolsChanged)
