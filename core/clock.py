"""Time sources. The runtime takes a clock so tests and screenshots are deterministic."""

from __future__ import annotations

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
