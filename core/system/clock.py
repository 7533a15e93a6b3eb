"""Time sources. The runtime takes a clock so tests and screenshots are deterministic."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, for durations."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.perf_counter()


class SteppingClock:
    """A clock for tests and screenshots: wall time starts at a fixed instant and moves by
    ``wall_step`` per reading; monotonic time moves by ``step`` per reading."""

    def __init__(
        self,
        start: datetime,
        step: timedelta = timedelta(milliseconds=5),
        wall_step: timedelta | None = None,
    ) -> None:
        self._now = start
        self._wall_step = step if wall_step is None else wall_step
        self._step = step.total_seconds()
        self._mono = 0.0

    def now(self) -> datetime:
        current = self._now
        self._now += self._wall_step
        return current

    def monotonic(self) -> float:
        current = self._mono
        self._mono += self._step
        return current

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass at once (a person who took that long to answer)."""
        self._now += timedelta(seconds=seconds)
        self._mono += seconds


_AGO = re.compile(r"(\d{1,9})\s*([smhdw])", re.IGNORECASE)
_AGO_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime) -> datetime:
    """The moment ``text`` names: a time before ``now`` (``30m``, ``2h``, ``7d``, ``2w``) or
    an ISO date or date-time (local time unless it names a zone). ValueError otherwise."""
    value = text.strip()
    ago = _AGO.fullmatch(value)
    try:
        if ago is not None:
            amount, unit = ago.groups()
            return now - timedelta(**{_AGO_UNITS[unit.lower()]: int(amount)})
        moment = datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        raise ValueError(
            f"{text!r} is neither a time ago (30m, 2h, 7d) nor an ISO date or time "
            "(2026-03-14, 2026-03-14T09:30)"
        ) from None
    try:  # in UTC, as calls are stored: the last minutes of year 9999 may lie past it
        return (moment if moment.tzinfo is not None else moment.astimezone()).astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"{text!r} is past the last date a time can have") from None
