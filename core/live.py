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
  seconds), and the questions of core/queries.py, which change nothing (tools, health,
  resources, prompts, one resource, one prompt; ``tools`` with ``refresh`` has the servers
  list their tools again), answered on the app's live connections, ``MAX_QUERIES`` at a
  time, with an answer of at most ``MAX_ANSWER_BYTES``.

A `diana` command finds the app with ``running_app``: a row whose lock file is held. A row
whose lock is free is from an app that ended without cleaning up (killed): it is removed
there and then. The lock, not the pid, says whether the app runs: the kernel lets go of it
when the process ends however it ends, and a pid can be reused. Anything with the database
file can write a row, so every row is checked before it is believed (``_AppRow`` and the
others below): one that cannot be read, or names a process that is not running, does not
hold the lock or did not write it, is passed over with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from .applock import LOCKS_DIR, is_held
from .clock import Clock
from .config import Paths
from .db import Database, StorageError
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
from .queries import QUERIES, Answer, answer_of
from .telemetry import SECRET_VALUES, StructuredLog, redact
from .watch import stop_task

PICKUP_INTERVAL = 0.25  # seconds between the app's looks for requests
PUBLISH_DELAY = 0.2  # changes within this many seconds are written once
PUBLISH_RETRY = 1.0  # seconds before the servers' state is written again after a failure
ANSWER_POLL = 0.1  # seconds between a command's looks for the outcome
# Seconds between glances at the database file, between those looks: a look is taken as soon
# as it has been written (a request made, an outcome written), without waiting for the next.
PICKUP_GLANCE = 0.05  # the app's, for requests
ANSWER_GLANCE = 0.02  # a command's, for the outcome (while it waits, and only then)
# How long a command waits for the outcome: a reconnect takes at most the server's connect
# timeout (30 s at most) twice, once for the handshake and once for listing its tools.
ANSWER_PATIENCE = 75.0
# How long a command waits for the app to take its request up: a running app looks every
# PICKUP_INTERVAL, so one that has not within this is not serving requests.
PICKUP_PATIENCE = 30.0
# Identical requests are answered by one action; one target is acted on at most once in
# this many seconds, so a flood of requests waits rather than restarting a server on end.
ACTION_SPACING = 1.0
MAX_WAITING = 10_000  # requests taken up and not yet answered; more are told to try later
MAX_SHARED_BYTES = 8 << 20  # a server's shared state past this is not read
RECONNECT = "reconnect"
MAX_NAME = 256  # characters of a server name in a request
# A question (core/queries.py) asked of the app: a command that finds it has not taken the
# request up within this many seconds connects to the servers itself.
QUERY_PICKUP_PATIENCE = 5.0
MAX_QUERIES = 4  # questions answered at once; more wait for one to end
MAX_ANSWER_BYTES = MAX_SHARED_BYTES  # an answer past this is not passed on (nor read back)
MAX_PARAMS = 64 * 1024  # characters of a request's parameters (JSON)
MAX_URI = 8192  # characters of a resource's URI in a request
MAX_PROMPT_ARGUMENTS = 100

Warn = Callable[[str], None]
_Key = tuple[str, str | None, str]  # a request's kind, server and parameters (JSON)


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


class AppGone(Exception):
    """The app stopped, or did not answer in time; the message says which."""


class UnknownServer(Exception):
    """The app has no MCP server of the name asked about; the message says so, as it does."""


# -- what is read back, checked in one place -------------------------------------------------
#
# Every row of the live tables is written by a diana-tui, but anything with the database file
# can write one: each is checked before it is used, and one that fails is skipped, named.

APP_ID = re.compile(r"(\d{1,10})-[0-9a-f]{8}")


def _moment(value: Any) -> Any:
    """An ISO date and time, as the app writes them (text only: SQLite keeps what it is given)."""
    if not isinstance(value, str):
        raise ValueError("is not text")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not a date and time") from None


Moment = Annotated[AwareDatetime, BeforeValidator(_moment)]


def _app_id(value: Any) -> Any:
    """An app's id is its pid and 8 hex digits: nothing else (a path, say) names a lock."""
    if not isinstance(value, str):
        raise ValueError("is not text")
    if not APP_ID.fullmatch(value):
        raise ValueError(f"{value[:40]!r} is not an app's id (its pid, a dash, 8 hex digits)")
    return value


class _Row(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _AppRow(_Row):
    """A row of live_apps."""

    app_id: Annotated[StrictStr, BeforeValidator(_app_id)]
    pid: Annotated[StrictInt, Field(gt=0, lt=1 << 31)]
    config_dir: StrictStr
    started_at: Moment
    servers_at: Moment | None

    @model_validator(mode="after")
    def _pid_is_the_ids(self) -> _AppRow:
        if int(self.app_id.split("-")[0]) != self.pid:  # the app's id starts with its pid
            raise ValueError(f"pid {self.pid} is not the pid its app_id names")
        return self


class _RetryAt(_Row):
    retry_at: Moment | None = None


class _Asked(_Row):
    """A request's parameters: only those its kind takes."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _ToolsAsked(_Asked):
    refresh: StrictBool = False


class _ReadAsked(_Asked):
    uri: Annotated[StrictStr, Field(min_length=1, max_length=MAX_URI)]


class _PromptAsked(_Asked):
    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)]
    arguments: Annotated[dict[StrictStr, StrictStr], Field(max_length=MAX_PROMPT_ARGUMENTS)] = {}


# What each kind of request takes; a kind not here is refused, so nothing else is done.
_ASKED: dict[str, type[_Asked]] = {
    RECONNECT: _Asked,
    "tools": _ToolsAsked,
    "health": _Asked,
    "resources": _Asked,
    "prompts": _Asked,
    "read": _ReadAsked,
    "prompt": _PromptAsked,
}
# Every kind of request there is: a reconnect, and the questions (none changes anything).
Kind = Literal["reconnect", "tools", "health", "resources", "prompts", "read", "prompt"]
assert set(_ASKED) == set(get_args(Kind)) == {RECONNECT, *QUERIES}
_OF_ONE_SERVER = ("read", "prompt")  # kinds that name a server
_OF_NO_SERVER = ("tools", "health")  # kinds that are about every agent


class _RequestRow(_Row):
    """A request as the app takes it up from live_requests."""

    kind: Kind
    server: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)] | None
    params: Annotated[StrictStr, Field(max_length=MAX_PARAMS)] | None = None

    @model_validator(mode="after")
    def _server_as_the_kind_needs(self) -> _RequestRow:
        if self.kind in _OF_ONE_SERVER and self.server is None:
            raise ValueError(f"a {self.kind} request names a server")
        if self.kind in _OF_NO_SERVER and self.server is not None:
            raise ValueError(f"a {self.kind} request names no server")
        return self

    def asked(self) -> dict[str, Any]:
        """The parameters, checked against what the kind takes; ValueError if they are not."""
        try:
            given = {} if self.params is None else json.loads(self.params)
        except (ValueError, RecursionError):
            raise ValueError("params is not valid JSON") from None
        if not isinstance(given, dict):
            raise ValueError("params is not a JSON object")
        return _ASKED[self.kind].model_validate(given).model_dump()


class ServerOutcome(_Row):
    name: StrictStr
    ok: StrictBool
    tools: Annotated[StrictInt, Field(ge=0)]
    error: StrictStr | None


class Outcome(_Row):
    """What the app wrote for a request: an error, how each server's reconnect ended, or
    the answer to a question (core/queries.py, as JSON)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    error: StrictStr | None = None
    unknown: StrictBool = False  # the error is that no server has the name
    servers: list[ServerOutcome] | None = None
    answer: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_of_them(self) -> Outcome:
        if sum(part is not None for part in (self.error, self.servers, self.answer)) != 1:
            raise ValueError("has not exactly one of an error, servers and an answer")
        return self

    def stored(self) -> str:
        """As JSON text of ASCII only (text that is not UTF-8 stays escaped)."""
        return json.dumps(self.model_dump(exclude_defaults=True))

    def summary(self) -> dict[str, Any]:
        """For the log: an answer by its size only (it may be a whole resource)."""
        if self.answer is not None:
            return {"answer_bytes": len(self.stored())}
        return self.model_dump(exclude_defaults=True)


def _problem(exc: Exception) -> str:
    """A validation failure in one line, naming the column or field."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    said = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        said.append(f"{where}: {message}" if where else message)
    return "; ".join(said[:3]) + (f" (and {len(said) - 3} more)" if len(said) > 3 else "")


def _row(row: Any) -> dict[str, Any]:
    return {key: row[key] for key in row.keys()}


async def _read(db: Database, table: str, sql: str, params: Iterable[Any] = ()) -> list[Any]:
    try:
        return await db.read(sql, params)
    except sqlite3.Error as exc:  # a table changed by hand
        raise StorageError(f"cannot read {table} in {db.path}: {exc}") from None


# -- the command's side ----------------------------------------------------------------------


def _lock_path(paths: Paths, app_id: str) -> Path:
    return paths.data_dir / LOCKS_DIR / f"{app_id}.lock"


def _config_key(paths: Paths) -> str:
    return str(paths.config_dir.resolve())


def _data_key(paths: Paths) -> str:
    return str(paths.data_dir.resolve())


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return False
    return True


def _lock_holders(path: Path) -> set[int] | None:
    """The pids holding the lock file at ``path``, as the kernel lists them (/proc/locks);
    None where it does not."""
    try:
        info = os.stat(path, follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            lines = listing.read(1 << 20).splitlines()
    except OSError:
        return None
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    holders = set()
    for line in lines:
        words = line.split()
        if "->" in words or len(words) < 6:  # a process waiting for the lock holds nothing
            continue
        if words[1] == "FLOCK" and words[5] == inode and words[4].isdigit():
            holders.add(int(words[4]))
    return holders or None


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


def _inconsistency(paths: Paths, app: _AppRow) -> str | None:
    """Why a row whose lock is held is not a running diana-tui's own, or None when it is:
    the process it names runs, holds the lock, and wrote in it this row's id and data dir."""
    path = _lock_path(paths, app.app_id)
    if not _is_running(app.pid):
        return f"its pid {app.pid} is not running"
    holders = _lock_holders(path)
    if holders is not None and app.pid not in holders:
        held_by = ", ".join(str(pid) for pid in sorted(holders))
        return f"its lock is held by pid {held_by}, not by its pid {app.pid}"
    said = _lock_content(path)
    expected = {"app_id": app.app_id, "pid": app.pid, "data_dir": _data_key(paths)}
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
    rows = await _read(
        db, "live_apps", "SELECT app_id, pid, config_dir, started_at, servers_at FROM live_apps"
    )
    ours = _config_key(paths)
    candidates: list[_AppRow] = []
    for row in rows:
        values = _row(row)
        try:
            app = _AppRow.model_validate(values)
        except ValidationError as exc:
            named = values.get("app_id")
            warn(
                f"live_apps: the row of app {named!r:.60} cannot be read ({_problem(exc)}); ignored"
            )
            if not (isinstance(named, str) and APP_ID.fullmatch(named)):
                await _forget(db, named)  # no app has such an id, so none holds its lock
            elif not is_held(_lock_path(paths, named)):
                await _forget_ended(db, paths, named)
            continue
        if app.config_dir == ours:
            candidates.append(app)
    for app in sorted(candidates, key=lambda app: app.started_at, reverse=True):
        if not is_held(_lock_path(paths, app.app_id)):
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
    await _forget(db, app_id)
    with contextlib.suppress(OSError):
        _lock_path(paths, app_id).unlink()


async def _forget(db: Database, app_id: Any) -> None:
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
    rows = await _read(
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
                f"({_problem(exc)}); left out"
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
    retry_at = _RetryAt.model_validate(shown).retry_at
    if retry_at is not None:
        left = (retry_at - now).total_seconds()
        server = server.model_copy(update={"retry_in_s": round(max(0.0, left), 1)})
    return server


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
        elif not is_held(_lock_path(paths, app.app_id)):
            gone = f"{app.describe()} stopped before it answered"
        elif row["picked_at"] is None and time.monotonic() - started > pickup_patience:
            gone = f"{app.describe()} did not take the request up within {pickup_patience:g} s"
        elif time.monotonic() - started > patience:
            gone = f"{app.describe()} did not answer within {patience:g} s"
        if gone is not None:
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
    """The app's answer to a question of core/queries.py. UnknownServer if it has no server
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
            f"(live_requests.outcome: {_problem(exc)})"
        ) from None


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
        path = _lock_path(self._paths, self.app_id)
        private_dir(path.parent)
        fd = open_private(path, os.O_RDWR | os.O_NOFOLLOW)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else has it
        self._lock_fd = fd
        # What a `diana` checks the row against: a row naming this lock is this app's.
        said = {"app_id": self.app_id, "pid": os.getpid(), "data_dir": _data_key(self._paths)}
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
                await _forget(self._db, self.app_id)
        finally:
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    _lock_path(self._paths, self.app_id).unlink()
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
                    (self.app_id, os.getpid(), _config_key(self._paths), now.isoformat()),
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
            outcome = self._take_up(row["id"], _row(row))
            if outcome is not None:
                answers.setdefault(outcome.stored(), []).append(row["id"])
        for stored, ids in answers.items():
            await self._answer(ids, stored)

    def _take_up(self, request_id: int, values: dict[str, Any]) -> Outcome | None:
        """The request joins those waiting for the same action, or is answered now (the
        outcome): one that cannot be read, names no configured server, or is one too many."""
        try:
            request = _RequestRow.model_validate(values)
            asked = request.asked()
        except ValueError as exc:  # a ValidationError too
            self._emit("live.request_refused", id=request_id, error=_problem(exc))
            return Outcome(error=f"diana-tui cannot read this request: {_problem(exc)}")
        if request.server is not None and request.server not in self._mcp.configs:
            return Outcome(error=self._mcp.not_configured(request.server), unknown=True)
        if self._waiting_count >= MAX_WAITING:
            return Outcome(error=f"too many requests ({MAX_WAITING:,}) wait; try again later")
        key = (request.kind, request.server, json.dumps(asked, sort_keys=True))
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
        """A question of core/queries.py, answered on the app's connections as they are;
        configured secret values in it are masked before it is written."""
        from .queries import answer

        try:
            found = await answer(kind, self._mcp, server, asked, now=self._clock.now, here=False)
        except KeyError:
            return Outcome(error=self._mcp.not_configured(str(server)), unknown=True)
        return Outcome(answer=_masked(found.model_dump(mode="json")))

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
        """Requests this app claimed or was sent and will not carry out now it stops."""
        await self._db.execute(
            "UPDATE live_requests SET finished_at = ?, outcome = ? "
            "WHERE app_id = ? AND finished_at IS NULL",
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
