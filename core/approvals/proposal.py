"""A proposal: a call held for a person to decide, as a row of the proposals table reads.

What it holds (its call intact, its status, how it ended), how it is shown (secrets as ***),
the exceptions a decision raises, and the words that say what became of it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import aiosqlite
from pydantic import BaseModel, ConfigDict, PlainSerializer

from ..calls.sampling_call import asks_sampling, sampling_summary
from ..storage.call_record import one_line
from ..storage.stored import loaded_json, loaded_time, time_text
from ..system.telemetry import redact


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    # Settled without running, by diana: it cannot be checked, no one waits for its answer
    # any more, or the process that approved it stopped first. ``error`` says which.
    WITHDRAWN = "withdrawn"
    # Never stored: how a row whose status cannot be read is shown.
    DAMAGED = "damaged"


OPEN = (ProposalStatus.PENDING,)
SETTLED = (
    ProposalStatus.SUCCEEDED,
    ProposalStatus.FAILED,
    ProposalStatus.REJECTED,
    ProposalStatus.INTERRUPTED,
    ProposalStatus.WITHDRAWN,
)


class UnknownProposal(LookupError):
    """No proposal has this id."""


class DamagedProposal(Exception):
    """The proposal's row cannot be read whole, so it cannot be approved."""

    def __init__(self, proposal: Proposal) -> None:
        super().__init__(
            f"proposal {proposal.id} is damaged ({proposal.damaged}): it cannot run; "
            f"reject it to clear it"
        )
        self.proposal = proposal


class ProposalChanged(Exception):
    """The stored call is not the one proposed, or not the one the person was shown."""

    def __init__(self, proposal: Proposal, why: str) -> None:
        super().__init__(f"proposal {proposal.id} was not approved: {why}")
        self.proposal = proposal


class AlreadyDecided(Exception):
    """The proposal was decided before this decision: says what it is now."""

    def __init__(self, proposal: Proposal) -> None:
        if proposal.status is ProposalStatus.WITHDRAWN:  # why, and what to do instead
            said = f"proposal {proposal.id} was withdrawn without running: {proposal.error}"
        else:
            now = SETTLED_WORDS.get(proposal.status.value, f"it is {proposal.status.value}")
            said = f"proposal {proposal.id} was already decided: {now}"
        super().__init__(said)
        self.proposal = proposal


class ProposalWithdrawn(AlreadyDecided):
    """Found unable to run when it was to be approved (its key is gone, or no one waits for
    its answer any more): it is withdrawn now, and the message says why and what to do."""


# What became of a decided proposal, as a sentence ends.
SETTLED_WORDS = {
    "approved": "it was approved and is about to run",
    "executing": "it was approved and is running",
    "succeeded": "it was approved and ran",
    "failed": "it was approved, ran and failed",
    "rejected": "it was rejected",
    "interrupted": "it was interrupted while it ran",
    "withdrawn": "it was withdrawn without running",
}


# When something happened to a proposal; in JSON, ISO text as it was stored (+00:00, not Z).
ProposalTime = Annotated[datetime, PlainSerializer(time_text, when_used="json")]


class Proposal(BaseModel):
    """A call held for a person to decide, and what became of it. Read from a row without
    checking (``proposal_from_row``: what cannot be read is named in ``damaged``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    tool: str
    agent: str | None
    arguments: dict[str, Any]  # intact: this is what runs when approved
    risk: str
    reason: str
    confidence: float | None
    correlation_id: str
    origin: str
    status: ProposalStatus
    created_at: ProposalTime | None  # None only in a row whose time was changed by hand
    decided_at: ProposalTime | None = None
    decided_by: str | None = None
    reject_reason: str | None = None
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    finished_at: ProposalTime | None = None
    note: str | None = None  # what had to change to store the result
    damaged: str | None = None  # what in its row cannot be read
    digest: str | None = None  # the signed digest of (tool, agent, arguments) when proposed
    waiter: str | None = None  # the process its answer goes to, if only that one can use it
    # Units its call is likely to cost: the median of its tool's recent calls that ran, when
    # it was made (None: the tool had never run).
    estimated_cost: float | None = None
    # Its call's own run, once approved and run: how long it ran (the wait for the person
    # apart) and what it cost, as the execution log has them. None: it did not run.
    ran_ms: float | None = None
    cost_units: float | None = None
    # The launch identity of the program the call's MCP server ran when it was proposed
    # (None: one of diana's own tools, or proposed before diana recorded it).
    server_identity: str | None = None

    @property
    def shown_arguments(self) -> dict[str, Any]:
        """The arguments as a person may see them: secrets replaced by ***."""
        shown = redact(self.arguments)
        return shown if isinstance(shown, dict) else {}

    @property
    def summary(self) -> str:
        """The arguments in one line, as a list shows them (a sampling request as what it
        asks the model)."""
        if asks_sampling(self.tool, self.arguments) is not None:
            return sampling_summary(self.shown_arguments)
        return one_line(self.shown_arguments)

    def public(self) -> dict[str, Any]:
        """The proposal as `diana proposals --json` and `diana show` give it."""
        times = self.model_dump(mode="json", include={"created_at", "decided_at", "finished_at"})
        return {
            "id": self.id,
            "tool": self.tool,
            "agent": self.agent,
            "arguments": self.shown_arguments,
            "risk": self.risk,
            "reason": self.reason,
            "confidence": self.confidence,
            "estimated_cost": self.estimated_cost,
            "cost_units": self.cost_units,
            "ran_ms": self.ran_ms,
            "correlation_id": self.correlation_id,
            "origin": self.origin,
            "status": self.status.value,
            "created_at": times["created_at"],
            "decided_at": times["decided_at"],
            "decided_by": self.decided_by,
            "reject_reason": self.reject_reason,
            "result": redact(self.result),
            "error": self.error,
            "error_code": self.error_code,
            "finished_at": times["finished_at"],
            "note": self.note,
            "damaged": self.damaged,
        }


def proposal_from_row(row: aiosqlite.Row) -> Proposal:
    """A row as a Proposal; what cannot be read is named in ``damaged``, never raised."""
    damage: list[str] = []
    arguments = loaded_json(row["arguments"], "arguments", damage)
    if not isinstance(arguments, dict):
        if not damage:
            damage.append("arguments are not a JSON object")
        arguments = {}
    try:
        status = ProposalStatus(row["status"])
    except ValueError:
        damage.append(f"status {row['status']!r} is not one diana knows")
        status = ProposalStatus.DAMAGED
    # Not validated: a row changed by hand is shown as it is, never refused.
    return Proposal.model_construct(
        id=row["id"],
        tool=row["tool"],
        agent=row["agent"],
        arguments=arguments,
        risk=row["risk"],
        reason=row["reason"],
        confidence=row["confidence"],
        correlation_id=row["correlation_id"],
        origin=row["origin"],
        status=status,
        created_at=loaded_time(row["created_at"]),
        decided_at=loaded_time(row["decided_at"]),
        decided_by=row["decided_by"],
        reject_reason=row["reject_reason"],
        result=loaded_json(row["result"], "result", damage),
        error=row["error"],
        error_code=row["error_code"],
        finished_at=loaded_time(row["finished_at"]),
        note=row["note"],
        damaged="; ".join(damage) or None,
        digest=row["digest"],
        waiter=row["waiter"],
        estimated_cost=stored_units(row["estimated_cost"]),
        ran_ms=stored_units(row["ran_ms"]),
        cost_units=stored_units(row["cost_units"]),
        server_identity=row["server_identity"],
    )


def stored_units(value: Any) -> float | None:
    """A stored number of units, or None for what is not one (a damaged row)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def make_again(proposal: Proposal) -> str:
    """How a person gets a withdrawn proposal's call made again."""
    server = asks_sampling(proposal.tool, proposal.arguments)
    if server is not None:
        return f"MCP server {server} must ask again"
    return (
        f"to run it, make the call again (ask again in the chat, or `diana call "
        f"{proposal.tool} --args JSON` with the arguments shown): it is proposed anew"
    )


def waiter_gone(proposal: Proposal) -> str:
    """Why a proposal whose waiting process ended is withdrawn."""
    pid = (proposal.waiter or "").partition(":")[0]
    server = asks_sampling(proposal.tool, proposal.arguments)
    who = f"MCP server {server}'s request" if server is not None else "it"
    return (
        f"the diana process that {who} came through (pid {pid}) has ended, so no one waits "
        "for the answer"
    )
