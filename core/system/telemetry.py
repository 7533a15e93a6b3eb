"""Correlation ids, secret redaction, per-tool metrics and the JSON-lines structured log."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import secrets
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dt_time
from pathlib import Path
from typing import Any

from ..content.text import without_surrogates
from .clock import Clock
from .files import open_private, private_dir

_correlation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "diana_correlation_id", default=None
)


def new_correlation_id() -> str:
    return secrets.token_hex(6)


def current_correlation_id() -> str | None:
    return _correlation_id.get()


def set_correlation_id(value: str) -> contextvars.Token[str | None]:
    return _correlation_id.set(value)


def reset_correlation_id(token: contextvars.Token[str | None]) -> None:
    _correlation_id.reset(token)


# Masking by name: a name is split into its words (camelCase, snake_case, kebab-case,
# dotted), and names a secret when one of them is a secret word (``token``, not ``tokens``:
# ``maxTokens`` is a count) or a key of a secret kind (``api_key``, not ``sort_key``), unless a
# later word says it names something about the secret (``token_count``, ``secret_name``).
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "token",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "bearer",
        "jwt",
        "otp",
        "apikey",
        "privatekey",
        "secretkey",
        "accesskey",
    }
)
# Words run together in one lowercase word that end like this are secret words too
# (``accesstoken``, ``clientsecret``); ``maxtokens`` does not end so.
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "privatekey")
# ``key`` is a secret only after one of these (``sort_key``, ``key`` alone are ordinary).
SECRET_KEY_KINDS = frozenset(
    {"api", "access", "private", "secret", "signing", "encryption", "master", "session"}
    | {"client", "ssh", "auth"}
)
# A word after the secret one that makes the name about the secret, not the secret itself.
ABOUT_A_SECRET = frozenset(
    {
        "count",
        "counts",
        "number",
        "num",
        "length",
        "len",
        "size",
        "limit",
        "limits",
        "max",
        "min",
        "budget",
        "usage",
        "used",
        "remaining",
        "total",
        "type",
        "kind",
        "id",
        "ids",
        "name",
        "names",
        "label",
        "hint",
        "policy",
        "format",
        "method",
        "methods",
        "scheme",
        "url",
        "uri",
        "endpoint",
        "path",
        "file",
        "env",
        "var",
        "expiry",
        "expires",
        "expiration",
        "ttl",
        "required",
        "enabled",
    }
)
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> list[str]:
    """The words of a name, lowercased: ``maxTokens`` → max, tokens; ``X-API-Key`` → x, api,
    key; ``client_secret`` → client, secret."""
    return [word.lower() for word in _NAME_WORDS.findall(name)]


def _is_secret_word(words: list[str], index: int) -> bool:
    word = words[index]
    if word in SECRET_WORDS or word.endswith(SECRET_ENDINGS):
        return True
    return word == "key" and index > 0 and words[index - 1] in SECRET_KEY_KINDS


def is_secret_name(name: str) -> bool:
    """Whether a value under this name (an argument, a field, a header) is a secret: the one
    rule for masking by name. ``token``, ``api_token``, ``apiKey``, ``password``,
    ``client_secret`` are; ``maxTokens``, ``token_count``, ``tokens``, ``sort_key`` are not."""
    words = name_words(name)
    secret_at = [i for i in range(len(words)) if _is_secret_word(words, i)]
    if not secret_at:
        return False
    return not any(word in ABOUT_A_SECRET for word in words[secret_at[-1] + 1 :])


def names_a_secret(text: str) -> bool:
    """Whether free text (a command line that could not be read) names a secret anywhere."""
    return any(is_secret_name(part) for part in re.findall(r"[A-Za-z0-9_.\-]+", text))


REDACTED = "***"


# Configured secret values shorter than this are not masked: they would hide ordinary words.
MIN_SECRET_LENGTH = 4


class SecretValues:
    """The values configured as secret (MCP servers' env and header values, credentials in
    URLs): whatever would show or store one of them shows *** instead. One set for the whole
    process, so every log, store and screen masks the same values; values are only added."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def remember(self, values: Iterable[str]) -> None:
        fresh = {v for v in values if len(v) >= MIN_SECRET_LENGTH} - self._values
        if fresh:
            self._values |= fresh
            # Longest first, so a secret containing another is masked whole.
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def mask(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)


SECRET_VALUES = SecretValues()


# Deeper than this, redact() stops copying and puts a marker instead (recursion is bounded;
# what is shown or stored never needs that depth).
REDACT_DEPTH = 100
TOO_DEEP_SHOWN = "[nested too deeply to show]"


def redact(value: Any, _depth: int = 0, *, _secret: bool = False) -> Any:
    """A copy of ``value`` as it may be shown or logged: configured and obtained secret values
    as ***, and text under a secret name (``is_secret_name``) as *** (only text: a number or
    a flag under any name is shown, and a mapping under one is shown by its own keys); text
    that is not UTF-8 as U+FFFD, nesting cut at REDACT_DEPTH."""
    if isinstance(value, str):
        return REDACTED if _secret else SECRET_VALUES.mask(without_surrogates(value))
    if isinstance(value, dict | list | tuple) and _depth >= REDACT_DEPTH:
        return TOO_DEEP_SHOWN
    if isinstance(value, dict):
        return {
            (without_surrogates(k) if isinstance(k, str) else k): redact(
                v, _depth + 1, _secret=isinstance(k, str) and is_secret_name(k)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):  # a list of secrets is secrets
        return [redact(v, _depth + 1, _secret=_secret) for v in value]
    return value


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


@dataclass
class ToolMetrics:
    """Counts and latency samples for one tool; percentiles over the last 1,000 calls."""

    count: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=1000))
    max_latency: float = 0.0

    def record(self, latency: float, error_code: str | None) -> None:
        self.count += 1
        self.latencies.append(latency)
        if latency > self.max_latency:
            self.max_latency = latency
        if error_code is not None:
            self.errors[error_code] += 1

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        return {
            "count": self.count,
            "errors": dict(self.errors),
            "p50_ms": round(_percentile(ordered, 0.50) * 1000, 3),
            "p95_ms": round(_percentile(ordered, 0.95) * 1000, 3),
            "max_ms": round(self.max_latency * 1000, 3),
        }


class StructuredLog:
    """Appends one JSON object per line. Each line is a single write to a file opened for
    appending, so lines from several processes never interleave.

    With ``retention_days``, lines go to one file per local day named by the line's own date
    (``diana.jsonl`` becomes ``diana-2026-03-14.jsonl`` beside it). No file is ever renamed,
    so processes writing at once need no coordination; files older than the window are
    deleted when the log opens and whenever a line starts a new day."""

    def __init__(self, path: Path, clock: Clock, *, retention_days: int | None = None) -> None:
        private_dir(path.parent)
        self._clock = clock
        self._retention_days = retention_days
        self._dated = re.compile(
            re.escape(path.stem) + r"-(\d{4}-\d{2}-\d{2})" + re.escape(path.suffix) + "$"
        )
        self._base = path
        # The local day the open file covers, as an instant range: one comparison per line.
        self._day_start: datetime | None = None
        self._day_end: datetime | None = None
        self._closed = False
        self.path = path  # the file lines go to now
        if retention_days is None:
            self._fd: int | None = _open_append(path)
        else:
            self._fd = None
            self._open_day(_aware(clock.now()))
            self.remove_expired()

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._closed:
            return
        now = _aware(self._clock.now())
        record: dict[str, Any] = {
            "ts": now.isoformat(),
            "level": level,
            "event": event,
        }
        cid = fields.pop("correlation_id", None) or current_correlation_id()
        if cid:
            record["correlation_id"] = cid
        record.update(redact(fields))
        line = _log_line(record, fields)
        removed: list[Path] = []
        if self._starts_new_day(now):
            with contextlib.suppress(OSError):  # the old file stays; the next line tries again
                self._open_day(now)
                removed = self.remove_expired()
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # a full disk must not stop a tool call
            # backslashreplace: a lone surrogate becomes its JSON escape, never an error
            os.write(self._fd, (line + "\n").encode("utf-8", "backslashreplace"))
        if removed:
            self.emit("log.expired_removed", files=[p.name for p in removed])

    def log_files(self) -> list[Path]:
        """The dated files of this log, oldest first."""
        try:
            entries = list(self._base.parent.iterdir())
        except OSError:
            return []
        return sorted(p for p in entries if self._dated.match(p.name))

    def remove_expired(self) -> list[Path]:
        """Delete the dated files whose day ended more than ``retention_days`` ago."""
        if self._retention_days is None or self._day_start is None:
            return []
        cutoff = self._day_start.date() - timedelta(days=self._retention_days)
        removed = []
        for path in self.log_files():
            match = self._dated.match(path.name)
            assert match is not None
            try:
                day = date.fromisoformat(match.group(1))
            except ValueError:
                continue
            if day < cutoff:
                with contextlib.suppress(FileNotFoundError):  # another process was first
                    path.unlink()
                    removed.append(path)
        return removed

    def _starts_new_day(self, now: datetime) -> bool:
        start, end = self._day_start, self._day_end
        return start is not None and end is not None and not start <= now < end

    def _open_day(self, now: datetime) -> None:
        day = now.astimezone().date()
        path = self._base.with_name(f"{self._base.stem}-{day.isoformat()}{self._base.suffix}")
        fd = _open_append(path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self.path = fd, path
        # Naive local midnights made aware in the local zone (DST-safe day lengths).
        self._day_start = datetime.combine(day, dt_time.min).astimezone()
        self._day_end = datetime.combine(day + timedelta(days=1), dt_time.min).astimezone()

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LibraryLogHandler(logging.Handler):
    """Warnings and errors the libraries log (the MCP SDK, httpx, ...) go to the structured
    log as ``library.log`` lines, never to the terminal: a person sees what diana says about
    a failure, not a library's traceback over the screen or a script's stderr."""

    def __init__(self, log: StructuredLog) -> None:
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        fields: dict[str, Any] = {"logger": record.name}
        try:
            fields["message"] = record.getMessage()
        except Exception:  # a malformed format string in a library's call
            fields["message"] = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            fields["exception"] = f"{type(error).__name__}: {error}"
        self._log.emit("library.log", record.levelname.lower(), **fields)


def _log_line(record: dict[str, Any], fields: dict[str, Any]) -> str:
    """One JSON line for any record: values JSON cannot hold are given as their repr, and a
    value even repr cannot print is named only."""
    try:
        return json.dumps(record, default=str, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        pass
    shown: dict[str, Any] = {}
    for key, value in fields.items():
        try:
            shown[key] = repr(value)
        except RecursionError:
            shown[key] = TOO_DEEP_SHOWN
    base = {k: record[k] for k in ("ts", "level", "event", "correlation_id") if k in record}
    return json.dumps({**base, **shown}, default=str, ensure_ascii=False)


def _open_append(path: Path) -> int:
    return open_private(path, os.O_WRONLY | os.O_APPEND)


def _aware(moment: datetime) -> datetime:
    """A clock's reading with a time zone (a naive one is taken as local time)."""
    return moment if moment.tzinfo is not None else moment.astimezone()
