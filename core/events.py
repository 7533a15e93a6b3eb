"""The typed in-process event bus.

Policy for a slow subscriber: ``publish`` never blocks and never fails. Each subscription has
a bounded queue; when it is full the *oldest* event is dropped to make room and the
subscription's ``dropped`` count goes up, so a consumer can tell it missed events (and, for
example, reload from the database) while the orchestrator keeps its pace.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from .models import AgentState, HealthStatus
from .storage.call_record import CallRecord
from .system.telemetry import SECRET_VALUES


@dataclass(frozen=True)
class CallStarted:
    """A tool call passed validation and was handed to its agent."""

    call_id: int
    correlation_id: str
    tool: str
    agent: str
    arguments: dict[str, Any]
    started_at: datetime
    origin: str
    proposal: str | None = None  # the proposal a person approved for it


BAR_CELLS = 10  # the width of a progress bar


@dataclass(frozen=True)
class CallProgress:
    """How far a running call has got, as its agent says (an MCP server's progress)."""

    call_id: int
    correlation_id: str
    tool: str
    progress: float
    total: float | None
    message: str | None

    def describe(self) -> str:
        """A bar and `40%` or `3 of 8 (38%)` when the total is known, else the count; then
        the message: one short line."""
        if self.total:
            share = min(max(self.progress / self.total, 0.0), 1.0)
            filled = round(share * BAR_CELLS)
            bar = "█" * filled + "░" * (BAR_CELLS - filled)
            amount = (
                f"{share:.0%}"
                if self.total == 100 or self.total <= 1
                else f"{self.progress:g} of {self.total:g} ({share:.0%})"
            )
            amount = f"{bar} {amount}"
        else:
            amount = f"{self.progress:g}"
        return f"{amount} · {self.message}" if self.message else amount


# A call that ended, as its record: the event is what the execution log stores.
CallFinished = CallRecord


@dataclass(frozen=True)
class AgentStateChanged:
    """An agent started, stopped or failed to start."""

    agent: str
    state: AgentState
    message: str | None = None


@dataclass(frozen=True)
class AgentHealthChanged:
    """A health check found an agent in a different health than before."""

    agent: str
    status: HealthStatus
    message: str | None = None


@dataclass(frozen=True)
class ToolsChanged:
    """An agent's set of tools changed while it ran (an MCP server re-listed its tools)."""

    agent: str
    tools: list[str]


@dataclass(frozen=True)
class ServerStatusChanged:
    """An MCP server connected, became ready, went down or is being retried."""

    server: str
    status: str
    message: str | None
    tool_count: int


@dataclass(frozen=True)
class ProposalsChanged:
    """A proposal was created or decided, here or (proposal None) in another process.
    ``written``: the proposal as this process wrote it (core/approvals/proposal.py's
    Proposal), for a pane to show without reading it again; None when another process
    changed the proposals, which are then read again."""

    proposal: str | None
    status: str | None
    written: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SubagentChanged:
    """An MCP sub-agent request was queued, made progress, or ended (completed, failed,
    cancelled); ``state`` and ``progress`` (0-100) are as of this change."""

    request: str
    kind: str
    server: str
    state: str
    progress: int
    message: str


@dataclass(frozen=True)
class Notice:
    """Something a person should know that is not tied to one call (a rejected tool name)."""

    level: str
    message: str


@dataclass(frozen=True)
class ConfigChecked:
    """A config file was read again after it changed. ``problem`` says why it was not
    applied (what was in force before stays in force); None: it was applied."""

    file: str
    problem: str | None = None


Event = (
    CallStarted
    | CallProgress
    | CallFinished
    | AgentStateChanged
    | AgentHealthChanged
    | ToolsChanged
    | ServerStatusChanged
    | ProposalsChanged
    | SubagentChanged
    | Notice
    | ConfigChecked
)


@dataclass(eq=False)
class Subscription:
    """One subscriber's bounded queue of events; iterate it with ``async for``."""

    bus: EventBus
    queue: asyncio.Queue[Event]
    dropped: int = 0
    _taken: bool = field(default=False, repr=False)

    def offer(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.queue.get_nowait()
            self.queue.task_done()
            self.dropped += 1
            self.queue.put_nowait(event)

    async def get(self) -> Event:
        self._finish_previous()
        event = await self.queue.get()
        self._taken = True
        return event

    def _finish_previous(self) -> None:
        if self._taken:
            self._taken = False
            self.queue.task_done()

    async def drained(self) -> None:
        """Return once every event published so far has been taken and handled."""
        await self.queue.join()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        try:
            while True:
                yield await self.get()
        finally:
            self._finish_previous()

    def close(self) -> None:
        self.bus.unsubscribe(self)


class EventBus:
    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []

    def subscribe(self, maxsize: int = 10_000) -> Subscription:
        subscription = Subscription(self, asyncio.Queue(maxsize=maxsize))
        self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def publish(self, event: Event) -> None:
        if self._subscriptions:
            event = _masked(event)
        for subscription in self._subscriptions:
            subscription.offer(event)

    def config_checked(self, file: str, problem: str | None = None) -> None:
        """A config file was read again: a problem is told once (a notice) and stays known
        (ConfigChecked) until the file is read well."""
        if problem is not None:
            self.publish(Notice("error", f"{file} not applied: {problem}"))
        self.publish(ConfigChecked(file, problem))


def _masked(event: Event) -> Event:
    """The event with secret values in its text as ***: what a front end shows comes from
    here, and a server's message (an error, a progress line) may quote a token."""
    changed = {}
    for item in dataclasses.fields(event):
        value = getattr(event, item.name)
        if isinstance(value, str) and (shown := SECRET_VALUES.mask(value)) != value:
            changed[item.name] = shown
    return dataclasses.replace(cast(Any, event), **changed) if changed else event
