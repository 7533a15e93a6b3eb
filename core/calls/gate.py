"""The approval gate as the orchestrator sees it: what a valid call about to run shows it,
and a call it holds (waiting for a person, or denied), or one it failed to judge."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..models import ErrorCode, ToolDefinition, ToolResult


@dataclass(frozen=True)
class GateRequest:
    """A valid call about to run, as the approval gate sees it."""

    definition: ToolDefinition
    agent: str
    arguments: dict[str, Any]
    confidence: float | None
    correlation_id: str
    origin: str
    approved: bool = False  # a person approved this exact call; only a deny still stops it


Gate = Callable[[GateRequest], Awaitable[ToolResult | None]]


async def held_by(gate: Gate, request: GateRequest) -> ToolResult | None:
    """What the gate holds the call with, or None to let it run. A gate that fails holds it:
    a call whose proposal could not be stored must not run."""
    try:
        return await gate(request)
    except Exception as exc:
        return ToolResult.fail(
            ErrorCode.TOOL_EXECUTION_FAILED,
            f"{request.definition.name} did not run: the approval check failed "
            f"({type(exc).__name__}: {exc})",
        )
