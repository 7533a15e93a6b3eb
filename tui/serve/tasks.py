"""A host's call as an MCP task (protocol 2025-11-25's tasks): for a host that declared the
``tasks`` capability and sent ``tools/call`` with ``task``, diana answers at once with a task
instead of holding the request open while a person decides.

A call the gate holds is a task whose id is its proposal's: ``tasks/get`` says ``working``
while it waits for a person, then ``completed`` (it ran and succeeded), ``failed`` (rejected,
or it failed; ``tasks/result`` gives the tool error with the reason) or ``cancelled``
(withdrawn). ``tasks/cancel`` withdraws the proposal: it never runs. No ``serve.wait`` applies:
nothing is held. A call the gate lets run (or refuses) is a task already completed or failed.
A client sees its own tasks only (the token's name over HTTP, the clientInfo name over stdio);
any other id is an error, as is an id no task has.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from diana.core.api.errors import AlreadyDecided
from diana.core.api.types import ProposalStatus
from diana.core.models import ErrorCode
from mcp import MCPError, types
from mcp.server.context import CallNext, ServerRequestContext

from .results import tool_result

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import Proposal
    from diana.core.models import ToolResult
    from mcp.server.lowlevel import Server


class Gateway(Protocol):
    """What the tasks need of the gateway they are served through (tui/serve/gateway.py)."""

    core: Core
    server: Server[Any]

    def origin_of(self, ctx: ServerRequestContext[Any]) -> str: ...

    async def start_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> tuple[str, ToolResult] | types.CallToolResult: ...


# What a host is told to wait between two tasks/get, in ms.
POLL_MS = 1000
# Tasks remembered by one diana serve; past this, the oldest is forgotten.
TASKS_KEPT = 256
# How long a task is kept when its host asks for no other time (ms), and the longest.
TTL_MS = 24 * 3600 * 1000
MAX_TTL_MS = 7 * 24 * 3600 * 1000
# The protocol generations that have tasks (2026-07-28 replaced them).
TASK_PROTOCOLS = frozenset({"2025-11-25"})
RELATED_TASK = "io.modelcontextprotocol/related-task"
CANCELLED_BY_HOST = "the host that made the call cancelled its task"

WORKING = (ProposalStatus.PENDING, ProposalStatus.APPROVED, ProposalStatus.EXECUTING)
STATUS_OF = {
    ProposalStatus.SUCCEEDED: "completed",
    ProposalStatus.WITHDRAWN: "cancelled",
}


def iso(moment: Any) -> str:
    return moment.isoformat() if isinstance(moment, datetime) else datetime.now(UTC).isoformat()


def capability() -> types.ServerTasksCapability:
    """What diana declares: tools/call as a task, tasks/list and tasks/cancel."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def host_has_tasks(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the host of this request declared the tasks capability, on a protocol that
    has them."""
    client = ctx.session.client_params
    version = getattr(ctx, "protocol_version", None)
    return (
        client is not None and client.capabilities.tasks is not None and (version in TASK_PROTOCOLS)
    )


def no_task(task_id: str) -> MCPError:
    return MCPError(
        code=types.INVALID_PARAMS, message=f"no task {task_id[:100]!r} of this client is known"
    )


@dataclass
class HostTask:
    """A task as diana keeps it: its client, and its proposal (held) or its result (ran)."""

    task_id: str
    origin: str
    created: str
    ttl: int  # ms it is kept from its creation
    born: float  # the loop's clock at its creation
    proposal_id: str | None = None
    result: types.CallToolResult | None = None


class HostTasks:
    """The tasks of one diana serve, served through its gateway's MCP server."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.core = gateway.core
        self.kept: dict[str, HostTask] = {}
        server = gateway.server
        server.middleware.append(self.intercept)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.result)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.cancel)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.listed)

    async def intercept(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        """A tools/call with ``task`` from a host that has tasks becomes a task (the SDK
        would shape any tools/call answer as a CallToolResult, so it is answered here)."""
        raw = ctx.params
        if (
            ctx.method != "tools/call"
            or not isinstance(raw, Mapping)
            or raw.get("task") is None
            or not host_has_tasks(ctx)
        ):
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(dict(raw), by_name=False)
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)[:300]) from None
        task = await self.create(ctx, params)
        shown = await self.shown(task)
        created = types.CreateTaskResult(task=types.Task.model_validate(shown.model_dump()))
        return created.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def create(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> HostTask:
        started = await self.gateway.start_call(ctx, params)
        origin = self.gateway.origin_of(ctx)
        asked = params.task.ttl if params.task is not None else None
        ttl = min(max(asked, 0), MAX_TTL_MS) if asked is not None else TTL_MS
        task = HostTask(uuid.uuid4().hex, origin, iso(None), ttl, self.clock())
        if isinstance(started, types.CallToolResult):
            task.result = started
        else:
            name, result = started
            if result.error_code is ErrorCode.PENDING_APPROVAL:
                # The task is its proposal: its id, and what it becomes.
                task.proposal_id = task.task_id = str((result.data or {}).get("proposal_id", ""))
                self.core.log_event("serve.task", tool=name, proposal=task.task_id, host=origin)
            else:
                task.result = tool_result(result)
        self.kept[task.task_id] = task
        while len(self.kept) > TASKS_KEPT:
            self.kept.pop(next(iter(self.kept)))
        return task

    def owned(self, ctx: ServerRequestContext[Any], task_id: str) -> HostTask:
        """This client's task ``task_id``; another client's, or none, is an error."""
        task = self.kept.get(task_id)
        if task is not None and (self.clock() - task.born) * 1000 > task.ttl:
            del self.kept[task_id]  # its time is over: forgotten (its proposal stays)
            task = None
        if task is None or task.origin != self.gateway.origin_of(ctx):
            raise no_task(task_id)
        return task

    @staticmethod
    def clock() -> float:
        return asyncio.get_running_loop().time()

    async def proposal_of(self, task: HostTask) -> Proposal | None:
        return None if task.proposal_id is None else await self.core.proposal(task.proposal_id)

    async def shown(self, task: HostTask) -> types.GetTaskResult:
        """The task as tasks/get shows it now."""
        proposal = await self.proposal_of(task)
        updated, message = task.created, None
        if proposal is None:
            assert task.result is not None
            status = "failed" if task.result.is_error else "completed"
        elif proposal.status in WORKING:
            status = "working"
            message = f"waiting for a person to decide proposal {proposal.id}"
            if proposal.status is not ProposalStatus.PENDING:
                message = f"proposal {proposal.id} was approved: it is running"
        else:
            status = STATUS_OF.get(proposal.status, "failed")
            updated = iso(proposal.finished_at or proposal.decided_at)
            message = f"proposal {proposal.id} {proposal.status.value}"
        return types.GetTaskResult(
            task_id=task.task_id,
            status=status,  # type: ignore[arg-type]
            status_message=message,
            created_at=task.created,
            last_updated_at=updated,
            ttl=task.ttl,
            poll_interval=POLL_MS,
        )

    async def get(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
    ) -> types.GetTaskResult:
        return await self.shown(self.owned(ctx, params.task_id))

    async def result(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
    ) -> types.CallToolResult:
        """The call's result once the task has ended (until then, this waits for it)."""

        task = self.owned(ctx, params.task_id)
        if task.result is not None:
            answer = task.result
        else:
            assert task.proposal_id is not None
            answer = tool_result(self.core.outcome(await self.core.decided(task.proposal_id)))
        related = {RELATED_TASK: {"taskId": task.task_id}}
        return answer.model_copy(update={"meta": {**(answer.meta or {}), **related}})

    async def cancel(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> types.CancelTaskResult:
        """Withdraw the task's proposal: it never runs. A task that ended, or whose call a
        person approved already, cannot be cancelled."""
        task = self.owned(ctx, params.task_id)
        shown = await self.shown(task)
        if shown.status != "working" or task.proposal_id is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"task {task.task_id} is {shown.status}: it cannot be cancelled",
            )
        try:
            await self.core.withdraw(task.proposal_id, reason=CANCELLED_BY_HOST)
        except AlreadyDecided:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"task {task.task_id}: a person decided its proposal already",
            ) from None
        self.core.log_event("serve.task_cancelled", proposal=task.proposal_id)
        return types.CancelTaskResult.model_validate((await self.shown(task)).model_dump())

    async def listed(
        self, ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams
    ) -> types.ListTasksResult:
        origin = self.gateway.origin_of(ctx)
        mine = [task for task in self.kept.values() if task.origin == origin]
        shown = [await self.shown(task) for task in mine]
        return types.ListTasksResult(
            tasks=[types.Task.model_validate(task.model_dump()) for task in shown]
        )
