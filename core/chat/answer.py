"""A turn's structured answer: the reply, the tool calls it made and what came of them,
the facts and web pages it rests on, and how far it can be trusted."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..approvals.service import result_of
from ..memory import Fact
from ..system.telemetry import redact
from .sources import Source, SourceBook

if TYPE_CHECKING:
    from ..approvals.proposal import Proposal


class ToolCallRecord(BaseModel):
    """One tool call the model made in a turn, and what came of it."""

    name: str
    arguments: dict[str, Any]
    status: str  # as call_status says, or rejected
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    proposal_id: str | None = None
    latency_ms: float = 0.0  # the call's own time: for one that waited, its run alone
    confidence: float | None = None  # as the model stated it, clamped to 0..1; None: not given
    waited_ms: float | None = None  # how long it waited for a person's decision; None: never

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def ran(self) -> bool:
        """Whether the call reached its tool (one rejected or still waiting did not)."""
        return self.status not in NEVER_RAN

    @property
    def timing(self) -> str:
        """How long it took, as one says it: the run's own time, and the wait for the
        person apart ("41 ms · waited 3.7 s"); a call that never ran, only the wait."""
        ran = (
            ""
            if self.status in NEVER_RAN and self.waited_ms is not None
            else (f"{self.latency_ms:.0f} ms")
        )
        if self.waited_ms is None:
            return ran
        waited = f"waited {duration_text(self.waited_ms)}"
        return f"{ran} · {waited}" if ran else waited


NEVER_RAN = ("rejected", "denied", "pending_approval")  # statuses of a call that did not run


def duration_text(ms: float) -> str:
    """A wait, as one says it: 250 ms, 3.7 s, 4.2 min."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def decided_record(
    waiting: ToolCallRecord, proposal: Proposal, number: Callable[[Any], Any] = lambda d: d
) -> ToolCallRecord:
    """A call that waited for a person, once its proposal is decided (in the chat, the
    Approvals pane, or another process): how it ended, with its result or why not, its run's
    own time and the wait apart. ``number``: the result's web pages numbered for citing."""
    result, status = result_of(proposal)
    waited = None
    if proposal.created_at is not None and proposal.decided_at is not None:
        waited = max(0.0, (proposal.decided_at - proposal.created_at).total_seconds() * 1000)
    return waiting.model_copy(
        update={
            "status": status,
            "result": redact(number(result.data)) if result.success else None,
            "error": redact(result.error),
            "error_code": result.error_code.value if result.error_code else None,
            "proposal_id": proposal.id,
            "latency_ms": round(proposal.ran_ms or 0.0, 1),
            "waited_ms": None if waited is None else round(waited, 1),
        }
    )


class FactUsed(BaseModel):
    """A fact from memory the answer cites."""

    id: int
    content: str
    created_at: str


class AgentResponse(BaseModel):
    """A turn's structured answer: the reply, the calls it made, the facts from memory and
    the web pages it rests on, and what waits."""

    answer: str
    reasoning: str
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    facts_used: list[FactUsed] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)  # web pages, cited as [N]


# How the model cites a fact it was given: [fact 12] (or [fact #12], [Fact 12]).
CITATION = re.compile(r"\[\s*fact\s*#?\s*(\d+)\s*\]", re.IGNORECASE)


def score_confidence(records: list[ToolCallRecord]) -> float:
    """How far the answer rests on results actually obtained, not on the model's say-so:
    an answer with no tool behind it is a plausible 0.6, tool results lift it to 0.9, and each
    call that failed, was rejected or still waits pulls it down — to 0.0 when none worked."""
    if not records:
        return 0.6
    worked = sum(1 for r in records if r.succeeded)
    return round(0.9 * worked / len(records), 2)


def build_response(
    answers: list[str],
    thoughts: list[str],
    records: list[ToolCallRecord],
    cited: list[Fact] | None = None,
    book: SourceBook | None = None,
) -> AgentResponse:
    final = next((a.strip() for a in reversed(answers) if a.strip()), "")
    sources = book.cited_in(final) if book is not None else []
    reasoning: list[str] = [t.strip() for t in thoughts if t.strip()]
    if cited:
        used = "; ".join(f"fact {f.id} (saved {f.created_at[:10]})" for f in cited)
        reasoning.append(f"From memory: {used}.")
    if records:
        used = "; ".join(
            f"{r.name} {r.status}" + (f" (proposal {r.proposal_id})" if r.proposal_id else "")
            for r in records
        )
        reasoning.append(f"Tools called: {used}.")
    else:
        reasoning.append("Answered without calling a tool.")
    return AgentResponse(
        answer=final,
        reasoning="\n\n".join(reasoning),
        tool_calls=records,
        confidence=score_confidence(records),
        facts_used=[
            FactUsed(id=f.id, content=f.content, created_at=f.created_at) for f in cited or []
        ],
        sources=sources,
    )
