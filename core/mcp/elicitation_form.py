"""A server asks the person something (MCP elicitation): what it asks, as fields a form can
show, and the answer checked against them before it goes back.

The form mode asks for a flat object whose properties are text (with a format), numbers,
integers, booleans, a choice among values or several of them (with titles). Anything else
cannot be shown as a form and is refused, naming the property. The URL mode asks the person
to open a URL.

Who answers is the program's: the app shows a dialog, `diana` asks on its terminal; with
nobody to ask the request is declined (``Elicitations.ask`` says so in the log).

What a server sends is bounded before anyone sees it: its message is cut (and says where), a
form with too many fields or choices, or too large a schema, is refused naming the limit, a
URL that is not http or https is declined naming its scheme, and a server may have only a few
requests waiting for a person at once: past them, a request is declined at once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..content.text import cut_text, size_text
from ..system.browser import UnsafeURL, web_url
from ..system.telemetry import StructuredLog, is_secret_name, redact

Action = Literal["accept", "decline", "cancel"]
KINDS = ("string", "number", "integer", "boolean")
FORMATS = ("email", "uri", "date", "date-time")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")

# What a server's request may hold. Past these a form is refused, naming the limit.
SCHEMA_LIMIT = 256 * 1024  # bytes of the requested schema, as JSON
FIELDS_LIMIT = 100
CHOICES_LIMIT = 1_000  # choices of one field
# What is shown of it (bytes of UTF-8): longer is cut, saying where.
MESSAGE_SHOWN = 16 * 1024
TEXT_SHOWN = 1024  # a field's title or description, a choice's title
CHOICES_LISTED = 20  # titles listed in a prompt's description of a choice
# Requests of one server waiting for a person at once (the one asked included); past
# them a request is declined at once, so a server cannot stack up questions.
WAITING_PER_SERVER = 8


class UnshowableRequest(Exception):
    """The request cannot be shown as a form; the message names what and why."""


@dataclass(frozen=True)
class Field:
    name: str
    title: str
    description: str | None
    kind: str  # string, number, integer, boolean, choice (one value) or choices (several)
    required: bool
    default: Any = None
    format: str | None = None
    choices: list[tuple[str, str]] = field(default_factory=list)  # (value, title)
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None  # choices: how many may be chosen
    max_items: int | None = None

    @property
    def secret(self) -> bool:
        return is_secret_name(self.name)

    def describe(self) -> str:
        """What the field takes, for a prompt: `integer, 1 to 10`, `one of: a, b`."""
        if self.kind in ("choice", "choices"):
            titles = self._titles()
            if self.kind == "choice":
                return f"one of: {titles}"
            fewest, most = self.min_items or 0, self.max_items or len(self.choices)
            return f"any of: {titles}; {fewest} to {most}, with commas"
        parts = [self.format or self.kind]
        if self.minimum is not None or self.maximum is not None:
            low = "…" if self.minimum is None else f"{self.minimum:g}"
            high = "…" if self.maximum is None else f"{self.maximum:g}"
            parts.append(f"{low} to {high}")
        return ", ".join(parts)

    def titled(self, value: Any) -> Any:
        """A value as the person reads it: a choice by its title."""
        titles = dict(self.choices)
        if isinstance(value, list):
            return [titles.get(v, v) for v in value]
        return titles.get(value, value) if isinstance(value, str) else value

    def _chosen(self, typed: str) -> str:
        """The value of one choice, typed as its value, its title or its number."""
        text = typed.strip()
        for value, title in self.choices:
            if text in (value, title):
                return value
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1][0]
        raise ValueError("choose from " + self._titles())

    def _titles(self) -> str:
        """The choices' titles in one line; past ``CHOICES_LISTED``, how many more."""
        titles = ", ".join(title for _value, title in self.choices[:CHOICES_LISTED])
        more = len(self.choices) - CHOICES_LISTED
        return titles if more <= 0 else f"{titles} … and {more:,} more (or type a number)"

    def read(self, typed: str) -> Any:
        """The value of what a person typed (or chose); ValueError says what is wrong."""
        text = typed.strip()
        if self.kind == "boolean":
            if text.lower() in ("y", "yes", "true", "1", "on"):
                return True
            if text.lower() in ("n", "no", "false", "0", "off"):
                return False
            raise ValueError("answer yes or no")
        if self.kind == "choice":
            return self._chosen(text)
        if self.kind == "choices":
            chosen = list(dict.fromkeys(self._chosen(t) for t in text.split(",") if t.strip()))
            if self.min_items is not None and len(chosen) < self.min_items:
                raise ValueError(f"choose at least {self.min_items}")
            if self.max_items is not None and len(chosen) > self.max_items:
                raise ValueError(f"choose at most {self.max_items}")
            return chosen
        if self.kind in ("number", "integer"):
            try:
                number: float | int = int(text) if self.kind == "integer" else float(text)
            except ValueError:
                wanted = "a whole number" if self.kind == "integer" else "a number"
                raise ValueError(f"must be {wanted}") from None
            if self.minimum is not None and number < self.minimum:
                raise ValueError(f"must be at least {self.minimum:g}")
            if self.maximum is not None and number > self.maximum:
                raise ValueError(f"must be at most {self.maximum:g}")
            return number
        if self.min_length is not None and len(text) < self.min_length:
            raise ValueError(f"must be at least {self.min_length} characters")
        if self.max_length is not None and len(text) > self.max_length:
            raise ValueError(f"must be at most {self.max_length} characters")
        checks = {"email": _EMAIL, "date": _DATE, "date-time": _DATE_TIME}
        if self.format in checks and not checks[self.format].match(text):
            raise ValueError(f"must be a{'n' if self.format == 'email' else ''} {self.format}")
        if self.format == "uri" and ":" not in text:
            raise ValueError("must be a URI")
        return text


@dataclass(frozen=True)
class Elicitation:
    """What a server asks: a form of fields, or a URL to open."""

    server: str
    message: str
    mode: Literal["form", "url"]
    fields: list[Field] = field(default_factory=list)
    url: str | None = None


@dataclass(frozen=True)
class Answer:
    action: Action
    content: dict[str, Any] | None = None


def fields_of(schema: Any) -> list[Field]:
    """The form for a requested schema; UnshowableRequest for one no form can show, or
    past the limits (``FIELDS_LIMIT``, ``CHOICES_LIMIT``, ``SCHEMA_LIMIT``), naming them.
    Titles and descriptions are cut at ``TEXT_SHOWN``."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise UnshowableRequest("the requested schema is not an object")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        raise UnshowableRequest("the requested schema's properties are not an object")
    if len(properties) > FIELDS_LIMIT:
        raise UnshowableRequest(
            f"the form has {len(properties):,} fields; diana shows at most {FIELDS_LIMIT:,}"
        )
    required = schema.get("required") or []
    fields = [_field(name, spec, name in required) for name, spec in properties.items()]
    size = len(json.dumps(schema, ensure_ascii=False, default=str).encode("utf-8", "replace"))
    if size > SCHEMA_LIMIT:
        raise UnshowableRequest(
            f"the requested schema is {size_text(size)}; diana shows forms of at most "
            f"{size_text(SCHEMA_LIMIT)}"
        )
    return fields


def _field(name: str, spec: Any, required: bool) -> Field:
    if not isinstance(spec, dict):
        raise UnshowableRequest(f"property {name!r} is not a schema")
    kind = spec.get("type")
    title = cut_text(str(spec.get("title") or name), TEXT_SHOWN)
    description = spec.get("description")
    if description is not None:
        description = cut_text(str(description), TEXT_SHOWN)
    default = spec.get("default")
    choices = _choices(name, spec)
    if choices:
        return Field(name, title, description, "choice", required, default, choices=choices)
    if kind == "array" and isinstance(spec.get("items"), dict):
        several = _choices(name, spec["items"])
        if not several:
            raise UnshowableRequest(f"property {name!r} is a list a form cannot show")
        return Field(
            name,
            title,
            description,
            "choices",
            required,
            default,
            choices=several,
            min_items=spec.get("minItems"),
            max_items=spec.get("maxItems"),
        )
    if kind not in KINDS:
        raise UnshowableRequest(f"property {name!r} is of type {kind!r}, which a form cannot show")
    fmt = spec.get("format")
    if fmt is not None and fmt not in FORMATS:
        fmt = None  # an unknown format is shown as plain text
    return Field(
        name,
        title,
        description,
        kind,
        required,
        default,
        format=fmt,
        minimum=spec.get("minimum"),
        maximum=spec.get("maximum"),
        min_length=spec.get("minLength"),
        max_length=spec.get("maxLength"),
    )


def _choices(name: str, spec: dict[str, Any]) -> list[tuple[str, str]]:
    """enum (with enumNames), or oneOf/anyOf of {const, title}: (value, title) pairs."""
    if "enum" in spec:
        values = spec["enum"]
        titles = spec.get("enumNames") or values
        if not isinstance(values, list) or len(titles) != len(values):
            raise UnshowableRequest(f"property {name!r} has an enum a form cannot show")
        _count_choices(name, values)
        return [(str(v), _title(t)) for v, t in zip(values, titles, strict=True)]
    options = spec.get("oneOf") or spec.get("anyOf")
    if options is None:
        return []
    if not isinstance(options, list) or not all(
        isinstance(o, dict) and "const" in o for o in options
    ):
        raise UnshowableRequest(f"property {name!r} has choices a form cannot show")
    _count_choices(name, options)
    return [(str(o["const"]), _title(o.get("title") or o["const"])) for o in options]


def _count_choices(name: str, choices: list[Any]) -> None:
    if len(choices) > CHOICES_LIMIT:
        raise UnshowableRequest(
            f"property {name!r} has {len(choices):,} choices; diana shows at most {CHOICES_LIMIT:,}"
        )


def _title(title: Any) -> str:
    return cut_text(str(title), TEXT_SHOWN)


def check_answer(fields: list[Field], content: dict[str, Any]) -> dict[str, Any]:
    """The content to send, every value read and every required field present; ValueError
    naming the field otherwise. Values may be typed text or already of the field's kind."""
    checked: dict[str, Any] = {}
    for spec in fields:
        value = content.get(spec.name)
        if value is None or value == "":
            if spec.required:
                raise ValueError(f"{spec.title}: required")
            continue
        try:
            checked[spec.name] = spec.read(_typed(value))
        except ValueError as exc:
            raise ValueError(f"{spec.title}: {exc}") from None
    return checked


def _typed(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


Asker = Callable[[Elicitation], Awaitable[Answer]]


def as_shown(request: Elicitation) -> Elicitation:
    """The request as a person is shown it: its message cut at ``MESSAGE_SHOWN``."""
    message = cut_text(request.message, MESSAGE_SHOWN)
    return request if message is request.message else replace(request, message=message)


@dataclass(eq=False)
class _Turn:
    """One request in the queue: told when it is its turn; then asked."""

    request: Elicitation
    ready: asyncio.Future[None]
    asking: asyncio.Future[Answer] | None = None


class Elicitations:
    """The one place a server's request reaches a person: who answers (``asker``, lent by the
    app or the command line), one request at a time, in the order they came, within what
    time, and the log of what was asked and answered (values of secret-looking fields never).

    A server may have ``WAITING_PER_SERVER`` requests waiting at once; past that, and for a
    URL diana will not open, the request is declined at once and the log says why. Closing
    answers every request still waiting: cancelled."""

    def __init__(
        self,
        log: StructuredLog | None = None,
        *,
        asker: Asker | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.asker = asker
        # Told whenever the number of requests waiting changes (the app shows it).
        self.on_change = on_change
        self._log = log
        self._queue: list[_Turn] = []  # the first is the one being asked
        self._per_server: Counter[str] = Counter()
        self._closed = False

    @property
    def waiting(self) -> int:
        """Requests waiting behind the one being asked."""
        return max(0, len(self._queue) - 1)

    async def ask(self, request: Elicitation, time_limit: float) -> Answer:
        """The person's answer, once the requests before this one are answered; ``cancel``
        if no answer came within ``time_limit`` seconds of the request (waiting included)."""
        request = as_shown(request)
        self._emit("elicitation.asked", request, mode=request.mode, message=request.message)
        refusal = self._refusal(request)
        if isinstance(refusal, str):
            self._emit("elicitation.declined", request, reason=refusal)
            return Answer("decline")
        request = refusal
        turn = _Turn(request, asyncio.get_running_loop().create_future())
        self._queue.append(turn)
        self._per_server[request.server] += 1
        self._next()
        try:
            async with asyncio.timeout(time_limit):
                answer = await self._asked(turn)
        except TimeoutError:
            self._emit("elicitation.timed_out", request, seconds=time_limit)
            return Answer("cancel")
        finally:
            self._queue.remove(turn)
            self._per_server[request.server] -= 1
            self._next()
        if answer is None:
            self._emit("elicitation.cancelled", request, reason="diana is stopping")
            return Answer("cancel")
        if answer.action == "accept" and request.mode == "form":
            answer = Answer("accept", check_answer(request.fields, answer.content or {}))
        content = redact(answer.content or {})
        self._emit("elicitation.answered", request, action=answer.action, content=content)
        return answer

    async def _asked(self, turn: _Turn) -> Answer | None:
        """Wait for the turn, then ask; None when diana closes first."""
        await turn.ready
        if self._closed or self.asker is None:
            return None
        turn.asking = asyncio.ensure_future(self.asker(turn.request))
        try:
            return await turn.asking
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._closed and not (current and current.cancelling()):
                return None  # closing cancelled the asking, not the server's request
            raise

    def _refusal(self, request: Elicitation) -> str | Elicitation:
        """Why the request is declined at once, or the request to ask (its URL checked)."""
        if self.asker is None:
            return "nobody to ask"
        if self._closed:
            return "diana is stopping"
        if request.mode == "url":
            try:
                request = replace(request, url=web_url(request.url or ""))
            except UnsafeURL as exc:
                return str(exc)
        waiting = self._per_server[request.server]
        if waiting >= WAITING_PER_SERVER:
            return (
                f"{waiting} requests of MCP server {request.server} already wait for a person "
                f"(at most {WAITING_PER_SERVER})"
            )
        return request

    def _next(self) -> None:
        """Tell the first request that it is its turn; tell whoever shows the count."""
        if self._queue and not self._queue[0].ready.done():
            self._queue[0].ready.set_result(None)
        if self.on_change is not None:
            self.on_change()

    def close(self) -> None:
        """Answer every request waiting (cancel) and take no more: diana is stopping."""
        self._closed = True
        for turn in self._queue:
            if turn.asking is not None:
                turn.asking.cancel()
            elif not turn.ready.done():
                turn.ready.set_result(None)

    def _emit(self, event: str, request: Elicitation, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, "info", server=request.server, **fields)
