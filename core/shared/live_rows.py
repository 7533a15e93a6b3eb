"""The rows a running diana-tui and `diana` share in SQLite (live_apps, live_servers,
live_requests), as they are read back: each one checked in one place before it is believed.

Every row of the live tables is written by a diana-tui, but anything with the database file
can write one: each is checked before it is used, and one that fails is skipped, named.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from datetime import datetime
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

from ..storage.db import Database, StorageError
from .queries import QUERIES

MAX_SHARED_BYTES = 8 << 20  # a server's shared state past this is not read
RECONNECT = "reconnect"
# A call run by the app for a command or a gateway, and an approval of a proposal (the app
# runs its call): carried out once for each request, never joined with an identical one.
CALL, APPROVE = "call", "approve"
CALLS = (CALL, APPROVE)
MAX_ORIGIN = 128  # characters of a call's origin
ORIGIN = re.compile(r"cli|host:[A-Za-z0-9._@+/-]{1,64}")
MAX_NAME = 256  # characters of a server name in a request
MAX_ANSWER_BYTES = MAX_SHARED_BYTES  # an answer past this is not passed on (nor read back)
MAX_PARAMS = 64 * 1024  # characters of a request's parameters (JSON)
MAX_URI = 8192  # characters of a resource's URI in a request
MAX_PROMPT_ARGUMENTS = 100

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


class AppRow(_Row):
    """A row of live_apps."""

    app_id: Annotated[StrictStr, BeforeValidator(_app_id)]
    pid: Annotated[StrictInt, Field(gt=0, lt=1 << 31)]
    config_dir: StrictStr
    started_at: Moment
    servers_at: Moment | None

    @model_validator(mode="after")
    def _pid_is_the_ids(self) -> AppRow:
        if int(self.app_id.split("-")[0]) != self.pid:  # the app's id starts with its pid
            raise ValueError(f"pid {self.pid} is not the pid its app_id names")
        return self


class RetryAt(_Row):
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


def _origin(value: Any) -> Any:
    """Whom a call forwarded to the app comes from: a command, or a host of a gateway."""
    if not isinstance(value, str) or not ORIGIN.fullmatch(value):
        raise ValueError("is not `cli` or `host:NAME`")
    return value


class _CallAsked(_Asked):
    tool: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)]
    arguments: dict[StrictStr, Any]
    origin: Annotated[StrictStr, BeforeValidator(_origin)]


class _ApproveAsked(_Asked):
    proposal: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)]
    by: Literal["cli"]


# What each kind of request takes; a kind not here is refused, so nothing else is done.
_ASKED: dict[str, type[_Asked]] = {
    RECONNECT: _Asked,
    "tools": _ToolsAsked,
    "health": _Asked,
    "resources": _Asked,
    "prompts": _Asked,
    "read": _ReadAsked,
    "prompt": _PromptAsked,
    CALL: _CallAsked,
    APPROVE: _ApproveAsked,
}
# Every kind of request there is: a reconnect, the questions (none changes anything), and a
# call or an approval the app runs for a command or a gateway.
Kind = Literal[
    "reconnect", "tools", "health", "resources", "prompts", "read", "prompt", "call", "approve"
]
assert set(_ASKED) == set(get_args(Kind)) == {RECONNECT, *QUERIES, *CALLS}
_OF_ONE_SERVER = ("read", "prompt")  # kinds that name a server
_OF_NO_SERVER = ("tools", "health", *CALLS)  # kinds that are about every agent


class RequestRow(_Row):
    """A request as the app takes it up from live_requests."""

    kind: Kind
    server: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME)] | None
    params: Annotated[StrictStr, Field(max_length=MAX_PARAMS)] | None = None

    @model_validator(mode="after")
    def _server_as_the_kind_needs(self) -> RequestRow:
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
    the answer to a question (core/shared/queries.py, as JSON)."""

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


def row_problem(exc: Exception) -> str:
    """A validation failure in one line, naming the column or field."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    said = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        said.append(f"{where}: {message}" if where else message)
    return "; ".join(said[:3]) + (f" (and {len(said) - 3} more)" if len(said) > 3 else "")


def row_values(row: Any) -> dict[str, Any]:
    return {key: row[key] for key in row.keys()}


async def read_table(db: Database, table: str, sql: str, params: Iterable[Any] = ()) -> list[Any]:
    try:
        return await db.read(sql, params)
    except sqlite3.Error as exc:  # a table changed by hand
        raise StorageError(f"cannot read {table} in {db.path}: {exc}") from None
