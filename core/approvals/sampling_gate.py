"""A server's sampling request decided through the gate: made a proposal of ``mcp_sampling``,
waited for within the server's time, and taken back when no one decides or the server stops
waiting.

Everything a request writes to the database (its proposal, and taking it back when the
server stops waiting) runs in a task ``Sampling`` keeps, and ``close`` waits for them before
the database closes: none outlives it, and a failure is logged, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..llm.sampling import (
    SAMPLING_TOOL,
    WAITING_PER_SERVER,
    SamplingRefused,
    SamplingRequest,
    kept_arguments,
)
from ..models import ErrorCode, ToolResult
from ..system.telemetry import StructuredLog
from .proposal import SETTLED, AlreadyDecided, ProposalStatus
from .service import result_of

if TYPE_CHECKING:
    from ..calls.orchestrator import Orchestrator
    from .service import Approvals

# How long closing waits for what requests are still writing (seconds).
CLOSE_TIME = 1.0


def told(proposal: Any, server: str, rejected: str | None = None) -> ToolResult:
    """What the server is told of its request once decided: the reply, or why there is none,
    naming the request and its proposal (never as a call of its own being rejected)."""
    if proposal.status is not ProposalStatus.REJECTED:
        return result_of(proposal)[0]
    if rejected is None or proposal.decided_by != "diana":
        reason = f": {proposal.reject_reason}" if proposal.reject_reason else ""
        rejected = (
            f"MCP server {server}'s request to the local model was rejected "
            f"(proposal {proposal.id}){reason}"
        )
    return ToolResult.fail(ErrorCode.REJECTED, rejected)


class Sampling:
    """The one place a server's sampling request is decided and run: through the gate as a
    call of ``mcp_sampling``; a proposal is waited for (decided here or in any process)
    within the server's time, and rejected if no one decides in it, or when the server stops
    waiting for it.

    Each request's own work (making the proposal, waiting for the decision, taking the
    proposal back) runs in a task of its own, never interrupted halfway by its server going
    away: the server's going is told to it, and it takes the proposal back."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        approvals: Approvals,
        log: StructuredLog | None = None,
        *,
        on_waiting: Callable[[str, str], None] | None = None,
    ) -> None:
        self._orchestrator = orchestrator
        self._approvals = approvals
        self._log = log
        # Told of each request that waits for a person: (proposal id, server). A command
        # prints it; the app shows it in Approvals.
        self.on_waiting = on_waiting
        self._in_hand: Counter[str] = Counter()  # per server
        # Each request's task, and what tells it why no one waits for its answer any more.
        self._requests: dict[asyncio.Task[ToolResult], asyncio.Future[str]] = {}
        self._closed = False

    async def ask(self, request: SamplingRequest, time_limit: float) -> ToolResult:
        """The reply, or a failed result saying why there is none."""
        server = request.server
        refused = self._refusal(server)
        if refused is not None:
            self._emit("sampling.refused", "warning", server=server, reason=refused)
            return ToolResult.fail(ErrorCode.REJECTED, refused)
        try:
            arguments = kept_arguments(request.arguments)
        except SamplingRefused as exc:
            self._emit("sampling.refused", "warning", server=server, reason=str(exc))
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS, f"diana cannot ask the local model: {exc}"
            )
        gone: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._decide(server, arguments, time_limit, gone), name=f"sampling-{server}"
        )
        self._requests[task] = gone
        task.add_done_callback(self._finished)
        self._in_hand[server] += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not gone.done():
                gone.set_result(f"MCP server {server} stopped waiting for the reply")
            with contextlib.suppress(Exception):  # a failure is logged by _finished
                await asyncio.shield(task)  # taken back before the call is told, if it may wait
            raise
        finally:
            self._in_hand[server] -= 1

    def _refusal(self, server: str) -> str | None:
        if self._closed:
            return "diana is stopping"
        if self._in_hand[server] >= WAITING_PER_SERVER:
            return (
                f"MCP server {server} already has {self._in_hand[server]} requests to the "
                f"local model in hand (at most {WAITING_PER_SERVER}); this one is refused"
            )
        return None

    async def _decide(
        self, server: str, arguments: dict[str, Any], time_limit: float, gone: asyncio.Future[str]
    ) -> ToolResult:
        """Make the proposal, wait for a decision, and take it back if none comes in time
        or no one waits for it any more (``gone`` says why)."""
        self._emit("sampling.asked", server=server, reply_limit=arguments["reply_limit"])
        result = await self._orchestrator.execute(
            SAMPLING_TOOL, arguments, origin=f"MCP server {server}", internal=True
        )
        if result.error_code is not ErrorCode.PENDING_APPROVAL:
            return result
        proposal_id = str((result.data or {})["proposal_id"])
        if self.on_waiting is not None and not gone.done():
            self.on_waiting(proposal_id, server)
        decided = asyncio.ensure_future(self._approvals.wait(proposal_id))
        try:
            either: set[asyncio.Future[Any]] = {decided, gone}
            await asyncio.wait(either, timeout=time_limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not decided.done():
                decided.cancel()
                await asyncio.wait({decided})
        if not decided.cancelled():
            proposal = decided.result()
            self._emit(
                "sampling.decided", server=server, proposal=proposal_id, status=proposal.status
            )
            return told(proposal, server)
        why = (
            gone.result()
            if gone.done()
            else f"no one decided on MCP server {server}'s request to the local model "
            f"(proposal {proposal_id}) within {time_limit:g} s, so it was told no"
        )
        return await self._withdraw(proposal_id, why, server)

    async def _withdraw(self, proposal_id: str, why: str, server: str) -> ToolResult:
        """Reject a proposal no one decided in time; one decided meanwhile stands."""
        with contextlib.suppress(AlreadyDecided):
            await self._approvals.reject(proposal_id, by="diana", reason=why)
        proposal = await self._approvals.store.get(proposal_id)
        if proposal.status in SETTLED:
            return told(proposal, server, rejected=why)
        return ToolResult.fail(ErrorCode.REJECTED, why)

    def _finished(self, task: asyncio.Task[ToolResult]) -> None:
        """A request's task ended: a failure is logged here, whoever else hears of it."""
        self._requests.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self._emit("sampling.failed", "error", error=f"{type(error).__name__}: {error}")

    async def close(self) -> None:
        """Take no more requests; take back what still waits for a decision, and let each
        request's task finish (within ``CLOSE_TIME``; what is left then is cancelled), all
        before the database closes."""
        self._closed = True
        for gone in self._requests.values():
            if not gone.done():
                gone.set_result("diana stopped before anyone decided")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_TIME
        while self._requests and loop.time() < deadline:
            await asyncio.wait(set(self._requests), timeout=deadline - loop.time())
        left = set(self._requests)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)
