"""A call while it runs: as the orchestrator carries it out, as its agent can see it, and
the time its agent's calls wait on a person (waiting, not work, so not charged)."""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..system.clock import Clock

if TYPE_CHECKING:
    from ..storage.call_record import CallRecord


class PersonWaits:
    """How long each agent's calls have waited on a person (a question, a form, an approval
    asked on their behalf): waiting, not work, so a call is not charged for it. Per agent,
    a reading that grows by one per second while anything is being asked for that agent."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._open: Counter[str] = Counter()
        self._since: dict[str, float] = {}
        self._waited: defaultdict[str, float] = defaultdict(float)

    def reading(self, agent: str) -> float:
        """Seconds the agent's calls have waited on a person so far."""
        waited = self._waited[agent]
        if self._open[agent]:
            waited += self._clock.monotonic() - self._since[agent]
        return waited

    @contextlib.contextmanager
    def waiting(self, agent: str) -> Iterator[None]:
        """While a person is asked something for ``agent`` (asked at once counts once)."""
        if not self._open[agent]:
            self._since[agent] = self._clock.monotonic()
        self._open[agent] += 1
        try:
            yield
        finally:
            self._open[agent] -= 1
            if not self._open[agent]:
                self._waited[agent] += self._clock.monotonic() - self._since.pop(agent)
                del self._open[agent]


@dataclass(frozen=True)
class RunningCall:
    """The call an agent is running, as its agent can see it (``RUNNING_CALL``)."""

    call_id: int
    correlation_id: str
    tool: str
    agent: str = ""
    waits: PersonWaits | None = None


RUNNING_CALL: contextvars.ContextVar[RunningCall | None] = contextvars.ContextVar(
    "running_call", default=None
)


@contextlib.contextmanager
def waiting_for_person() -> Iterator[None]:
    """Around what a running call waits for a person to do: that time is not charged."""
    call = RUNNING_CALL.get()
    if call is None or call.waits is None:
        yield
        return
    with call.waits.waiting(call.agent):
        yield


@dataclass
class CallInProgress:
    """One call while the orchestrator carries it out: what was asked, and how far it got."""

    call_id: int
    correlation_id: str
    tool: str
    params: Any
    shown: dict[str, Any]  # the arguments redacted, as every record of the call has them
    origin: str
    confidence: float | None
    approved: str | None  # the proposal a person approved for it
    approved_agent: str | None  # the agent whose tool that proposal was made for
    started_at: datetime
    start: float  # the clock's monotonic reading at the start
    agent: str | None = None
    ran: bool = False  # handed to its agent (only then does it cost anything)
    waited_from: float = 0.0  # its agent's PersonWaits reading when it was handed over
    record: CallRecord | None = None  # how it ended, once recorded
