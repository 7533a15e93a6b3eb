"""What a turn reports while it runs, to whoever is watching (the sink), and what it gave
in the end."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..approvals.proposal import Proposal
from ..llm.ollama import LLMProblem
from ..memory import Fact
from .answer import AgentResponse, ToolCallRecord
from .gaps import ToolGapReport


@dataclass(frozen=True)
class TurnStarted:
    correlation_id: str
    text: str


@dataclass(frozen=True)
class MemoryRecalled:
    """The facts from memory given to the model with the message (before it answers)."""

    facts: list[Fact]
    mode: str  # "hybrid", or "lexical" when they were found by words alone
    why: str | None = None


@dataclass(frozen=True)
class Progress:
    text: str
    retry: bool = False  # Ollama failed and is being tried again
    notice: bool = False  # worth a line in the conversation (a model without tools)


@dataclass(frozen=True)
class Delta:
    kind: str  # "content" or "thinking"
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    index: int
    name: str
    arguments: dict[str, Any]  # secrets hidden


@dataclass(frozen=True)
class ApprovalPending:
    index: int
    proposal: Proposal


@dataclass(frozen=True)
class ToolCallFinished:
    index: int
    record: ToolCallRecord


@dataclass(frozen=True)
class GapFound:
    report: ToolGapReport


@dataclass(frozen=True)
class TurnFailed:
    problem: LLMProblem


@dataclass(frozen=True)
class TurnCancelled:
    pass


@dataclass(frozen=True)
class TurnFinished:
    response: AgentResponse
    notice: str | None = None  # why the turn ended short of a full answer


TurnEvent = (
    TurnStarted
    | MemoryRecalled
    | Progress
    | Delta
    | ToolCallStarted
    | ApprovalPending
    | ToolCallFinished
    | GapFound
    | TurnFailed
    | TurnCancelled
    | TurnFinished
)
# Called with each event as it happens; a front end that must await its drawing may return
# an awaitable, and the turn waits for it (so a stream is never ahead of its display).
Sink = Callable[[TurnEvent], Awaitable[None] | None]


async def tell(sink: Sink, event: TurnEvent) -> None:
    shown = sink(event)
    if inspect.isawaitable(shown):
        await shown


@dataclass
class TurnOutcome:
    correlation_id: str
    response: AgentResponse | None = None
    gap: ToolGapReport | None = None
    problem: LLMProblem | None = None
    pending: list[str] = field(default_factory=list)  # proposals left for the person


def result_type(outcome: TurnOutcome) -> str:
    """What a turn gave, by its type's name (as a trace's ``result_type`` says it)."""
    for given in (outcome.response, outcome.gap, outcome.problem):
        if given is not None:
            return type(given).__name__
    return "none"


def problem_of(problem: LLMProblem) -> tuple[str, str]:
    """A failed turn's error type and message."""
    return problem.code.value, problem.message
