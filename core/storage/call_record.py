"""A finished call's record, and the short texts a call is shown by.

A call's record is made once, when the call ends, with its arguments, result and error
redacted at that moment. It is what the CallFinished event carries (the event is the record),
what the execution log stores as a row, what `diana log --json` prints and what the Execution
Log pane shows; a row read back from the log is the same record, with its row id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from ..content.text import json_printable
from ..models import ErrorCode, ToolResult
from ..system.telemetry import redact

SUMMARY_LENGTH = 160
# Every status a call ends with (see call_status); "running" is shown while it runs. A call
# held for approval ends "pending_approval", and its row then follows the decision (see
# held_outcome): "approved" (it ran as a call of its own), "rejected" or "withdrawn".
CALL_STATUSES = (
    "succeeded",
    "failed",
    "refused",
    "timed_out",
    "cancelled",
    "pending_approval",
    "approved",
    "rejected",
    "withdrawn",
    "denied",
)
# The statuses of calls that reached their agent (and so cost what they ran).
RAN = ("succeeded", "failed", "cancelled", "timed_out")
# How a held call's row reads once its proposal is decided, by the proposal's status (any
# other decided status: it was approved). The database keeps the rows in step with the
# proposals by a trigger written from these (core/storage/schema.py); the app applies them to the
# rows it shows.
HELD_DECIDED = {"rejected": "rejected", "withdrawn": "withdrawn"}
APPROVED_NOTE = "approved: it ran as a call of its own"


def held_outcome(
    proposal_status: str, reject_reason: str | None, error: str | None
) -> tuple[str, str] | None:
    """The status and error a held call's row takes once its proposal has this status, or
    None while it still waits."""
    if proposal_status == "pending":
        return None
    status = HELD_DECIDED.get(proposal_status, "approved")
    if status == "rejected":
        return status, "rejected" + (f": {reject_reason}" if reject_reason else "")
    if status == "withdrawn":
        return status, "withdrawn" + (f": {error}" if error else "")
    return status, APPROVED_NOTE


@dataclass(frozen=True)
class CallRecord:
    """One finished call. ``proposal`` names the proposal the call ran by (an approved
    call) or made (a call held for approval); ``call_id`` is this process's number for the
    call (None for a row another process wrote); ``row_id``, ``note`` and ``damaged`` are
    known once it is read back from the execution log."""

    correlation_id: str
    tool: str
    agent: str | None
    arguments: dict[str, Any]
    status: str
    error_code: str | None
    result: Any
    error: str | None
    origin: str
    started_at: datetime
    finished_at: datetime
    latency_ms: float
    cost_units: float = 0.0  # seconds the tool ran; 0 if it never reached its agent
    proposal: str | None = None
    call_id: int | None = None
    row_id: int | None = None
    note: str | None = None  # what had to change to store it
    damaged: str | None = None  # what in its stored row cannot be read

    @cached_property
    def summary(self) -> str:
        """One bounded line: the error of a call that failed, else its result."""
        if self.error:
            return one_line(self.error)
        if self.status != "succeeded" and self.result is None:
            return one_line(self.error_code or "failed")
        return one_line(self.result)

    def public(self) -> dict[str, Any]:
        """As `diana log --json` prints it: the execution log's columns."""
        shown = {
            "id": self.row_id,
            "correlation_id": self.correlation_id,
            "tool": self.tool,
            "agent": self.agent,
            "arguments": self.arguments,
            "status": self.status,
            "error_code": self.error_code,
            "result": self.result,
            "error": self.error,
            "origin": self.origin,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "latency_ms": self.latency_ms,
            "cost_units": self.cost_units,
            "note": self.note,
            "proposal": self.proposal,
        }
        if self.damaged:
            shown["damaged"] = self.damaged
        return shown


def shown_arguments(params: Any) -> dict[str, Any]:
    """A call's arguments as they may be shown, stored and traced: secrets redacted, and
    anything that is not an object (refused as such) as one line."""
    shown = redact(params)
    return shown if isinstance(shown, dict) else {"_": one_line(shown)}


def one_line(value: Any) -> str:
    """Any result value as one bounded line of text."""
    if isinstance(value, str):
        text = value
    else:
        try:
            # Control characters as \\uXXXX escapes: shown, never dropped or obeyed.
            text = json_printable(json.dumps(value, default=str, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
    # Only the start can be shown: a huge result is cut before it is split into words.
    text = " ".join(text[: SUMMARY_LENGTH * 8].split())
    return text if len(text) <= SUMMARY_LENGTH else text[: SUMMARY_LENGTH - 1] + "…"


def brief_arguments(arguments: dict[str, Any]) -> str:
    """A call's arguments as one short line: a lone text argument by its value in quotes
    (``web_search "capital of France"``), others as JSON."""
    if len(arguments) == 1:
        [value] = arguments.values()
        if isinstance(value, str):
            return one_line(json.dumps(value, ensure_ascii=False))
    return one_line(arguments)


def brief_result(value: Any) -> str:
    """A result as one short line: a list of results by its count and first titles, a page
    by its title and length; anything else as it is."""
    if isinstance(value, dict):
        found = value.get("results")
        if isinstance(found, list):
            titles = [str(r["title"]) for r in found[:3] if isinstance(r, dict) and r.get("title")]
            count = f"{len(found)} result{'s' if len(found) != 1 else ''}"
            return one_line(f"{count}: {', '.join(titles)}" if titles else count)
        if isinstance(value.get("content"), str) and "title" in value and "url" in value:
            title = value.get("title") or value["url"]
            return one_line(
                f"{json.dumps(title, ensure_ascii=False)} ({len(value['content']):,} characters)"
            )
    return one_line(value)


def summarize(result: ToolResult) -> str:
    """A one-line, bounded description of a result for lists and events."""
    if not result.success:
        return one_line(result.error or (result.error_code or "failed"))
    return one_line(redact(result.data))


def call_status(result: ToolResult, *, ran: bool = False) -> str:
    """succeeded, timed_out, cancelled, pending_approval, denied, refused (never reached an
    agent) or failed. A call that ``ran`` (was handed to its agent) is never refused: an
    agent that went away or turned it down while it ran failed it."""
    if result.success:
        return "succeeded"
    if result.error_code == ErrorCode.TOOL_EXECUTION_TIMEOUT:
        return "timed_out"
    if result.error_code == ErrorCode.CANCELLED:
        return "cancelled"
    if result.error_code == ErrorCode.PENDING_APPROVAL:
        return "pending_approval"
    if result.error_code == ErrorCode.DENIED_BY_POLICY:
        return "denied"
    if not ran and result.error_code in (
        ErrorCode.TOOL_NOT_FOUND,
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.AGENT_UNAVAILABLE,
        ErrorCode.TOOL_HELD,
    ):
        return "refused"
    return "failed"
