"""A `diana` command's requests of a running diana-tui: a reconnect or a question of
core/shared/queries.py, written to live_requests, and the outcome the app writes back, waited for
(glancing at the database file) within the patience given and checked before it is used.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from ..config.settings import Paths
from ..storage.db import Database, StorageError
from ..system.clock import Clock
from ..system.os_processes import is_held
from .live import Glance, LiveApp, lock_path
from .live_rows import MAX_ANSWER_BYTES, MAX_PARAMS, Outcome, row_problem
from .queries import Answer, answer_of

if TYPE_CHECKING:
    from ..models import ToolResult

ANSWER_POLL = 0.1  # seconds between a command's looks for the outcome
# Seconds between glances at the database file (see Glance) while a command waits for the
# outcome: a look is taken as soon as the app has written it.
ANSWER_GLANCE = 0.02
# How long a command waits for the outcome: a reconnect takes at most the server's connect
# timeout (30 s at most) twice, once for the handshake and once for listing its tools.
ANSWER_PATIENCE = 75.0
# How long a command waits for the app to take its request up: a running app looks every
# PICKUP_INTERVAL, so one that has not within this is not serving requests.
PICKUP_PATIENCE = 30.0
# A question (core/shared/queries.py) asked of the app: a command that finds it has not taken the
# request up within this many seconds connects to the servers itself.
QUERY_PICKUP_PATIENCE = 5.0


class AppGone(Exception):
    """The app stopped, or did not answer in time; the message says which."""


class AppNotTaken(AppGone):
    """The app stopped, or did not take the request up in time, before it took it up: the
    request is taken back, so it is never carried out there."""


class UnknownServer(Exception):
    """The app has no MCP server of the name asked about; the message says so, as it does."""


async def ask_app(
    db: Database,
    paths: Paths,
    app: LiveApp,
    kind: str,
    server: str | None,
    clock: Clock,
    patience: float = ANSWER_PATIENCE,
    *,
    params: dict[str, Any] | None = None,
    pickup_patience: float = PICKUP_PATIENCE,
) -> Outcome:
    """Ask the app to carry out one request and return its outcome. AppGone if the app
    stops first, does not take the request up within ``pickup_patience`` seconds, or does
    not answer within ``patience`` seconds; StorageError if what it wrote cannot be read."""
    given = None if not params else json.dumps(params, sort_keys=True)

    async def insert(connection: Any) -> int:
        cursor = await connection.execute(
            "INSERT INTO live_requests (app_id, kind, server, params, requested_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (app.app_id, kind, server, given, clock.now().isoformat()),
        )
        return int(cursor.lastrowid)

    request_id = await db.write(insert)
    started = time.monotonic()
    glance = Glance(db.path, ANSWER_POLL)
    while True:
        if not glance.due():
            await asyncio.sleep(ANSWER_GLANCE)
            continue
        row = await db.read_one(
            "SELECT picked_at, finished_at, length(outcome) AS size, "
            "CASE WHEN length(outcome) <= ? THEN outcome END AS outcome "
            "FROM live_requests WHERE id = ?",
            (MAX_ANSWER_BYTES, request_id),
        )
        if row is not None and row["finished_at"] is not None:
            await db.execute("DELETE FROM live_requests WHERE id = ?", (request_id,))
            if row["outcome"] is None and row["size"] is not None:
                raise StorageError(
                    f"the outcome {app.describe()} wrote for request {request_id} cannot be "
                    f"read (live_requests.outcome: past {MAX_ANSWER_BYTES:,} characters)"
                )
            return _outcome_of(app, request_id, row["outcome"])
        gone = None
        if row is None:
            gone = f"{app.describe()} lost the request before it answered"
        elif not is_held(lock_path(paths, app.app_id)):
            gone = f"{app.describe()} stopped before it answered"
        elif row["picked_at"] is None and time.monotonic() - started > pickup_patience:
            gone = f"{app.describe()} did not take the request up within {pickup_patience:g} s"
        elif time.monotonic() - started > patience:
            gone = f"{app.describe()} did not answer within {patience:g} s"
        if gone is not None:
            # Taken back only if the app has not taken it up meanwhile (one statement: the
            # app claims with one too), so a request is carried out by one of the two.
            untaken = await db.execute(
                "DELETE FROM live_requests WHERE id = ? AND picked_at IS NULL", (request_id,)
            )
            if untaken:
                raise AppNotTaken(gone)
            if row is not None and row["picked_at"] is None:
                continue  # taken up just now: its outcome is coming, or the app's end
            await db.execute("DELETE FROM live_requests WHERE id = ?", (request_id,))
            raise AppGone(gone)
        await asyncio.sleep(ANSWER_GLANCE)


async def ask_app_question(
    db: Database,
    paths: Paths,
    app: LiveApp,
    kind: str,
    server: str | None,
    clock: Clock,
    params: dict[str, Any] | None = None,
) -> Answer:
    """The app's answer to a question of core/shared/queries.py. UnknownServer if it has no server
    of that name; AppGone if it does not answer (it stopped, did not take the request up
    within QUERY_PICKUP_PATIENCE seconds, refused it, or its answer is too large to pass
    on: the command then answers itself); StorageError if what it wrote cannot be read."""
    outcome = await ask_app(
        db, paths, app, kind, server, clock, params=params, pickup_patience=QUERY_PICKUP_PATIENCE
    )
    if outcome.unknown:
        raise UnknownServer(outcome.error)
    if outcome.answer is None:
        raise AppGone(f"{app.describe()} did not answer: {outcome.error or 'no answer'}")
    try:
        return answer_of(kind, outcome.answer)
    except ValueError as exc:
        raise StorageError(
            f"the answer {app.describe()} wrote cannot be read (live_requests.outcome: {exc})"
        ) from None


def _outcome_of(app: LiveApp, request_id: int, text: Any) -> Outcome:
    try:
        if not isinstance(text, str):
            raise ValueError("outcome is not text")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("outcome is not valid JSON") from None
        return Outcome.model_validate(value)
    except ValueError as exc:
        raise StorageError(
            f"the outcome {app.describe()} wrote for request {request_id} cannot be read "
            f"(live_requests.outcome: {row_problem(exc)})"
        ) from None


# How long a command waits for the app to run a call it asked for: longer than a call's own
# timeout; the app ending first is seen at once (its lock), and ends the wait with a line.
CALL_PATIENCE = 3600.0


class Refused(Exception):
    """The app would not approve the proposal (decided already, damaged, changed): ``why``
    names the reason's kind, the message says it."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


async def app_runs(
    db: Database,
    paths: Paths,
    app: LiveApp,
    clock: Clock,
    kind: str,
    params: dict[str, Any],
    *,
    pickup_patience: float = QUERY_PICKUP_PATIENCE,
) -> ToolResult:
    """The app runs a call (``kind`` call: tool, arguments, origin) or approves a proposal
    and runs its call (approve: proposal, by), through its own gate, once; its result.
    AppNotTaken if it did not take the request up (it never runs there: the caller may run
    it itself); Refused for an approval it refused; any other end is a failed result in one
    line naming the app."""
    from ..models import ErrorCode, ToolResult

    given = json.dumps(params, sort_keys=True)
    if len(given) > MAX_PARAMS:
        return ToolResult.fail(
            ErrorCode.INVALID_ARGUMENTS,
            f"the call's arguments are {len(given):,} characters of JSON, past the "
            f"{MAX_PARAMS:,} diana passes to {app.describe()}, which runs the MCP servers",
        )
    try:
        outcome = await ask_app(
            db,
            paths,
            app,
            kind,
            None,
            clock,
            CALL_PATIENCE,
            params=params,
            pickup_patience=pickup_patience,
        )
    except AppNotTaken:
        raise
    except (AppGone, StorageError) as exc:
        return ToolResult.fail(
            ErrorCode.AGENT_UNAVAILABLE, f"{exc}; whether the call ran is in `diana log`"
        )
    if outcome.answer is None:
        return ToolResult.fail(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{app.describe()} did not run the call: {outcome.error or 'no answer'}",
        )
    refused = outcome.answer.get("refused")
    if isinstance(refused, str):
        raise Refused(refused, str(outcome.answer.get("why")))
    try:
        return ToolResult.model_validate(outcome.answer.get("result"))
    except ValueError as exc:
        raise_as = f"the result {app.describe()} wrote cannot be read ({row_problem(exc)})"
        return ToolResult.fail(ErrorCode.INVALID_RESPONSE, raise_as)
