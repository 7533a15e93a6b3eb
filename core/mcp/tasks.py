"""Tool calls a server runs as tasks (protocol 2025-11-25): the call made, the task watched
with tasks/get at the pace the server asks (within bounds), its result fetched with
tasks/result, and the task cancelled on the server (tasks/cancel) when the call ends first.

The SDK has no client side for tasks, so the requests whose answers describe a task go out
through its dispatcher and are read here, leniently."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp import Client, MCPError
from mcp.shared.dispatcher import ProgressFnT

from .stdio import shown_line

TASKS_PROTOCOL = "2025-11-25"  # the protocol with task-augmented requests
# Seconds between two tasks/get of a task: the server's pollInterval, kept within these bounds
# whatever it says (none, zero, negative, not a number: the default).
TASK_POLL_DEFAULT = 0.5
TASK_POLL_MIN = 0.1
TASK_POLL_MAX = 30.0
TASK_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
TASK_ENDED = ("completed", "failed", "cancelled")


class TaskCall:
    """One tool call a server runs as a task, on a live client; ``timeout`` bounds each
    request about the task, ``on_cancelled`` is told the id of a task cancelled on the server."""

    def __init__(
        self,
        server: str,
        client: Client,
        timeout: float,
        on_cancelled: Callable[[str], None],
    ) -> None:
        self.server = server
        self.session = client.session
        self.timeout = timeout
        self.on_cancelled = on_cancelled

    async def run(
        self,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        progress: ProgressFnT | None,
    ) -> types.CallToolResult:
        """A call the server runs as a task: made, watched until it ends (tasks/get, at the
        pace the server asks, within bounds), then its result fetched (tasks/result). A call
        that fails before the task ended, whatever the reason (out of time, cancelled, an
        error, the server gone, an answer that is not a task), cancels the task on the server
        too (tasks/cancel)."""
        session = self.session
        params = types.CallToolRequestParams(
            name=name, arguments=arguments, task=types.TaskMetadata(ttl=int(time_limit * 1000))
        )
        task_id: str | None = None
        status = "working"
        # Its own task: a call ended while the server is still making the task learns the
        # task's id all the same, to cancel it.
        creating = asyncio.ensure_future(
            send_raw(session, types.CallToolRequest(params=params), time_limit, progress)
        )
        try:
            async with asyncio.timeout(time_limit):
                created = await asyncio.shield(creating)
                task_id, status, wait = self._task_of(
                    "tools/call", created.get("task") if isinstance(created, dict) else None
                )
                while status == "working":
                    await asyncio.sleep(wait)
                    got = await send_raw(
                        session,
                        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                        self.timeout,
                    )
                    _, status, wait = self._task_of("tasks/get", got, task_id)
                # Finished, or waiting on the person (its questions come while this waits).
                return await session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=task_id)
                    ),
                    types.CallToolResult,
                )
        except BaseException as failed:
            if task_id is None:
                task_id = await asyncio.shield(self._task_made_anyway(creating))
            if task_id is not None and status not in TASK_ENDED:
                await asyncio.shield(self._cancel(task_id))
            if isinstance(failed, TimeoutError):
                raise MCPError(types.REQUEST_TIMEOUT, f"task {task_id} ran out of time") from None
            raise

    def _task_of(
        self, method: str, answer: Any, task_id: str | None = None
    ) -> tuple[str, str, float]:
        """(task id, status, seconds to wait before asking again) of the task a server's
        answer describes; MCPError naming what is wrong with an answer that is not one. The
        id is checked first: a task that was made is cancelled even if the rest is wrong."""
        found = answer.get("taskId") if isinstance(answer, dict) else None
        if task_id is None and isinstance(found, str) and found:
            task_id = found
        if task_id is None or found != task_id:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"MCP server {self.server} answered {method} with no task"
                + (f" {task_id!r}" if task_id else "")
                + f" (got {shown_line(json.dumps(answer, default=str), 120)})",
            )
        status = answer.get("status") if isinstance(answer, dict) else None
        if status not in TASK_STATUSES:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"MCP server {self.server} answered {method} with task status {status!r}, "
                f"not one of {', '.join(TASK_STATUSES)}",
            )
        return task_id, str(status), poll_seconds(answer.get("pollInterval"))

    async def _task_made_anyway(self, creating: asyncio.Future[Any]) -> str | None:
        """The id of the task a tools/call made though the call ended before its answer
        (waited for a moment), or None."""
        try:
            async with asyncio.timeout(self.timeout):
                created = await asyncio.shield(creating)
        except BaseException:
            creating.cancel()
            return None
        task = created.get("task") if isinstance(created, dict) else None
        found = task.get("taskId") if isinstance(task, dict) else None
        return found if isinstance(found, str) else None

    async def _cancel(self, task_id: str) -> None:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.timeout):
                await self.session.send_request(request, types.CancelTaskResult)
        self.on_cancelled(task_id)


def poll_seconds(interval: Any) -> float:
    """A task's pollInterval (milliseconds, as the server sent it: a number, a numeric string,
    or anything at all) as the seconds to wait before asking again, between TASK_POLL_MIN and
    TASK_POLL_MAX; TASK_POLL_DEFAULT for no interval or one that is not a number."""
    if isinstance(interval, str):
        with contextlib.suppress(ValueError):
            interval = float(interval.strip())
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        return TASK_POLL_DEFAULT
    if math.isnan(interval):
        return TASK_POLL_DEFAULT
    return min(max(interval / 1000, TASK_POLL_MIN), TASK_POLL_MAX)


async def send_raw(
    session: Any,
    request: types.CallToolRequest | types.GetTaskRequest,
    time_limit: float,
    progress: ProgressFnT | None = None,
) -> Any:
    """A request whose answer is checked here, not by the SDK: a tools/call answered with a
    task (the SDK checks every tools/call result as a CallToolResult and has no client side
    for tasks), and tasks/get (whose answer is read leniently: a pollInterval of any shape is
    bounded, not refused). It goes out through the SDK's dispatcher as its own send_request
    sends it (headers stamped)."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {"timeout": time_limit}
    if progress is not None:
        options["on_progress"] = progress
    from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

    session._stamp(data, options)
    if isinstance(request, types.CallToolRequest):
        headers = options.setdefault("headers", {})
        headers.setdefault(MCP_NAME_HEADER, encode_header_value(request.params.name))
    return await session._dispatcher.send_raw_request(data["method"], data.get("params"), options)
