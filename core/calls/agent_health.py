"""Agents' health: each agent's check, bounded by a timeout, and the changes and rounds that
are logged and published."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from ..events import AgentHealthChanged, EventBus
from ..models import AgentError, AgentHealth, AgentState, HealthStatus
from ..system.clock import Clock
from .tool_names import AgentSlot

HEALTH_TIMEOUT = 1.0
HEALTH_LOG_EVERY = 60.0  # seconds between logged health rounds when nothing changed


class HealthChecks:
    """Checks the health of the agents the orchestrator holds, and says what changed."""

    def __init__(
        self, *, bus: EventBus, clock: Clock, emit: Callable[..., None], timeout: float
    ) -> None:
        self._bus = bus
        self._clock = clock
        self._emit = emit
        self._timeout = timeout
        self._logged_at = -math.inf  # time.monotonic() of the last logged health round

    async def check(self, slots: list[AgentSlot]) -> list[AgentHealth]:
        """Every agent's health, checked concurrently, each bounded by the health timeout.
        Logged: each agent whose health changed, and the round with its metric (the slowest
        check's milliseconds), a round where nothing changed at most once a minute."""
        checks = await asyncio.gather(*(self._timed_check(slot) for slot in slots))
        changed = False
        for slot, (report, seconds) in zip(slots, checks, strict=True):
            previous = slot.health
            slot.health = report
            if previous is None or (previous.status, previous.message) != (
                report.status,
                report.message,
            ):
                changed = True
                self._emit(
                    "agent.health_changed",
                    "info" if report.status != "unhealthy" else "warning",
                    agent=slot.name,
                    status=report.status,
                    was=previous.status if previous else None,
                    message=report.message,
                    check_ms=round(seconds * 1000, 3),
                )
                self._bus.publish(AgentHealthChanged(slot.name, report.status, report.message))
        now = time.monotonic()
        if changed or now - self._logged_at >= HEALTH_LOG_EVERY:
            self._logged_at = now
            self._emit(
                "agents.health_checked",
                agents=len(checks),
                healthy=sum(report.status == "healthy" for report, _ in checks),
                unhealthy=[r.agent_id for r, _ in checks if r.status == "unhealthy"],
                slowest_check_ms=round(max((s for _, s in checks), default=0.0) * 1000, 3),
            )
        return [report for report, _ in checks]

    async def _timed_check(self, slot: AgentSlot) -> tuple[AgentHealth, float]:
        """An agent's health and the seconds its check took."""
        started = time.perf_counter()
        report = await self._check_one(slot)
        return report, time.perf_counter() - started

    async def _check_one(self, slot: AgentSlot) -> AgentHealth:
        now = self._clock.now()
        agent = slot.agent
        if agent is None:
            status: HealthStatus = "unhealthy" if slot.state is AgentState.FAILED else "unknown"
            return AgentHealth(
                agent_id=slot.name,
                status=status,
                state=slot.state,
                message=slot.stopped_note or slot.error,
                last_checked=now,
                tool_count=0,
            )
        try:
            async with asyncio.timeout(self._timeout):
                report = await agent.health()
            return report.model_copy(update={"state": slot.state, "tool_count": len(slot.tools)})
        except Exception as exc:
            message = describe_failure(
                exc, f"health check did not answer within {self._timeout:g} s"
            )
            return AgentHealth(
                agent_id=slot.name,
                status="unhealthy",
                state=slot.state,
                message=message,
                last_checked=now,
                tool_count=len(slot.tools),
            )


def describe_failure(exc: BaseException, timeout_message: str) -> str:
    """What went wrong with an agent, in one line; ``timeout_message`` when it took too long."""
    if isinstance(exc, TimeoutError):
        return timeout_message
    if isinstance(exc, AgentError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
