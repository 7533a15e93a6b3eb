"""`diana proposals`, `show`, `approve` and `reject`: calls waiting for a person."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from diana.core.api.errors import AlreadyDecided, DamagedProposal, ProposalChanged, UnknownProposal
from diana.core.api.shown import estimate_words, ran_words
from diana.core.api.types import OPEN, Proposal, ProposalStatus

from .common import (
    EXIT_OK,
    EXIT_TOOL_FAILED,
    BadInput,
    _dump,
    _line,
    _problem,
    _table,
    _warn,
)

if TYPE_CHECKING:
    from diana.core.api import Core


def _proposal_line(p: Proposal) -> tuple[str, ...]:
    arguments = f"DAMAGED: {p.damaged}" if p.damaged else p.summary
    return (
        p.id,
        p.status.value,
        p.risk,
        p.tool,
        arguments[:50],
        "" if p.created_at is None else p.created_at.strftime("%Y-%m-%d %H:%M:%S"),
    )


async def cmd_proposals(core: Core, args: argparse.Namespace) -> int:
    statuses = None if args.all else OPEN
    proposals = await core.proposals(statuses)
    if args.json:
        print(_dump([p.public() for p in proposals]))
    elif proposals:
        print(
            _table(
                [_proposal_line(p) for p in proposals],
                ("ID", "STATUS", "RISK", "TOOL", "ARGUMENTS", "CREATED"),
                # As the Approvals pane: the arguments give way first, the id never.
                {"ARGUMENTS": 8, "RISK": 13, "TOOL": 16, "CREATED": 19},
            )
        )
    else:
        print("No pending proposals." if not args.all else "No proposals.")
    return EXIT_OK


async def _find(core: Core, proposal_id: str) -> Proposal:
    try:
        return await core.proposal(proposal_id)
    except UnknownProposal:
        raise BadInput(f"no proposal {proposal_id} (`diana proposals --all` lists them)") from None


async def cmd_show(core: Core, args: argparse.Namespace) -> int:
    proposal = await _find(core, args.id)
    info = proposal.public()
    if args.json:
        print(_dump(info))
        return EXIT_OK
    for key in (
        "id",
        "status",
        "tool",
        "agent",
        "risk",
        "reason",
        "confidence",
        "estimated_cost",
        "origin",
        "correlation_id",
        "created_at",
        "decided_at",
        "decided_by",
        "reject_reason",
        "error",
        "note",
        "damaged",
    ):
        if key == "estimated_cost":
            print(f"{key:>15}  {estimate_words(info[key])}")
            if info["cost_units"] is not None:  # it ran: what it cost
                print(f"{'cost':>15}  {ran_words(info['cost_units'], info['ran_ms'])}")
        elif info[key] is not None:
            print(f"{key:>15}  {_line(str(info[key]))}")
    print(f"{'arguments':>15}  {_dump(info['arguments'])}")
    if info["result"] is not None:
        print(f"{'result':>15}  {_dump(info['result'])}")
    return EXIT_OK


async def cmd_approve(core: Core, args: argparse.Namespace) -> int:
    await _find(core, args.id)  # it exists (its server is waited for where the call runs)
    try:
        decision = await core.approve(args.id, by="cli", warn=_warn)
    except (AlreadyDecided, DamagedProposal, ProposalChanged) as exc:
        raise BadInput(str(exc)) from None
    result = decision.result
    assert result is not None
    if args.json:
        print(
            _dump(
                {"proposal": decision.proposal.public(), "result": result.model_dump(mode="json")}
            )
        )
    elif result.success:
        print(result.data if isinstance(result.data, str) else _dump(result.data))
    elif decision.proposal.status is ProposalStatus.REJECTED:
        print(f"diana: not run, {decision.proposal.id} rejected: {result.error}", file=sys.stderr)
    else:
        _problem(f"approved, but the call failed: {result.error}")
    return EXIT_OK if result.success else EXIT_TOOL_FAILED


async def cmd_reject(core: Core, args: argparse.Namespace) -> int:
    await _find(core, args.id)
    try:
        decision = await core.reject(args.id, by="cli", reason=args.reason)
    except AlreadyDecided as exc:
        raise BadInput(str(exc)) from None
    print(f"{decision.proposal.id} rejected")
    return EXIT_OK


def proposals_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="decided ones too")
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="proposal id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def approve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="proposal id")
    parser.add_argument("--json", action="store_true", help="print the proposal and result")


def reject_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="proposal id")
    parser.add_argument("--reason", help="why, for the record")
