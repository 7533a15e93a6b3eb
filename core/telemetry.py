"""Correlation ids, secret redaction, per-tool metrics and the JSON-lines structured log."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import secrets
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .clock import Clock

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


SECRET_KEY = re.compile(
    r"(token|passw|passphrase|pwd|secret|credential|cookie|session|auth(?!ors?(_?name|_?id)?$)|"
    r"api[_\-.]?key|access[_\-.]?key|private[_\-.]?key|signature|key$)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return bool(SECRET_KEY.search(name))


REDACTED = "***"


def redact(value: Any) -> Any:
    """A copy of ``value`` with every mapping entry whose key looks secret replaced by ***."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
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
    """Appends one JSON object per line to ``path``. Each line is a single write to a file
    opened for appending, so lines from several processes never interleave."""

    def __init__(self, path: Path, clock: Clock) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._clock = clock
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._fd is None:
            return
        record: dict[str, Any] = {
            "ts": self._clock.now().isoformat(),
            "level": level,
            "event": event,
        }
        cid = fields.pop("correlation_id", None) or current_correlation_id()
        if cid:
            record["correlation_id"] = cid
        record.update(redact(fields))
        try:
            line = json.dumps(record, default=str, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            line = json.dumps({**record, **{k: repr(v) for k, v in fields.items()}}, default=str)
        with contextlib.suppress(OSError):  # a full disk must not stop a tool call
            os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
