"""A host's call held for a person as an MCP task (protocol 2025-11-25), driven by the
official SDK client declaring the ``tasks`` capability: the call answers at once with a task
whose id is the proposal's, `diana approve` runs it once and ``tasks/result`` gives its
result, ``tasks/cancel`` withdraws it for good, and one client cannot read another's task.
No held request: ``serve.wait`` does not end a task."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, MCPError, types

from .commands import run_diana
from .serving import configure, http_gateway, http_host, lines, new_token, pending_proposals

pytestmark = pytest.mark.processes  # every test here starts diana serve and an MCP server


class TaskHost(ClientSession):
    """The SDK's client session, declaring tasks; a task-augmented tools/call and the
    tasks/* requests (the SDK client offers no call of its own for them)."""

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        found = super()._build_capabilities(version)
        found.tasks = types.ClientTasksCapability(
            list=types.TasksListCapability(), cancel=types.TasksCancelCapability()
        )
        return found

    async def raw(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # A task's answer to tools/call is not the CallToolResult the SDK's typed call expects.
        return dict(await self._dispatcher.send_raw_request(method, params, {"timeout": 60}))

    async def call_as_task(self, name: str, arguments: dict[str, Any]) -> types.Task:
        answer = await self.raw(
            "tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 600000}}
        )
        return types.CreateTaskResult.model_validate(answer).task

    async def task(self, task_id: str) -> types.GetTaskResult:
        return types.GetTaskResult.model_validate(await self.raw("tasks/get", {"taskId": task_id}))

    async def task_result(self, task_id: str) -> types.CallToolResult:
        answer = await self.raw("tasks/result", {"taskId": task_id})
        return types.CallToolResult.model_validate(answer)

    async def cancel_task(self, task_id: str) -> types.CancelTaskResult:
        answer = await self.raw("tasks/cancel", {"taskId": task_id})
        return types.CancelTaskResult.model_validate(answer)

    async def tasks(self) -> list[types.Task]:
        return types.ListTasksResult.model_validate(await self.raw("tasks/list", {})).tasks


def text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


async def approve(config_dir: Path, data_dir: Path, proposal_id: str) -> int:
    # `diana` itself (in-process, main() needs the main thread, which the host's loop holds).
    return (await run_diana(config_dir, data_dir, "approve", proposal_id)).returncode


async def test_a_held_call_as_a_task_answers_at_once_and_completes_once_approved(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks, wait=0.5)  # a held request would end long before the approval
    laptop = new_token(config_dir, data_dir, "laptop")
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, laptop, TaskHost) as session:
            assert session.server_capabilities.tasks is not None
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            execution = listed["append_append"].execution
            assert execution is not None and execution.task_support == "optional"

            task = await session.call_as_task("append_append", {"mark": "t1"})
            assert task.status == "working" and lines(marks) == []
            (held,) = pending_proposals(config_dir, data_dir)
            assert (held["id"], held["origin"]) == (task.task_id, "host:laptop")
            assert (await session.task(task.task_id)).status == "working"
            assert [t.task_id for t in await session.tasks()] == [task.task_id]

            result = asyncio.ensure_future(session.task_result(task.task_id))
            assert await approve(config_dir, data_dir, task.task_id) == 0
            done = await asyncio.wait_for(result, 60)
            assert not done.is_error and text(done) == "appended t1"
            assert (done.meta or {})["io.modelcontextprotocol/related-task"] == {
                "taskId": task.task_id
            }
            assert (await session.task(task.task_id)).status == "completed"
            # The gate let this one run: a task completed at once, its result kept.
            counted = await session.call_as_task("append_count", {})
            assert counted.status == "completed"
            assert text(await session.task_result(counted.task_id)) == "1"
            # Rejected: failed, its result the tool error carrying the reason.
            refused = await session.call_as_task("append_append", {"mark": "no"})
            said = await run_diana(
                config_dir, data_dir, "reject", refused.task_id, "--reason", "not on a Friday"
            )
            assert said.returncode == 0, said.stderr
            rejected = await session.task_result(refused.task_id)
            assert rejected.is_error and "not on a Friday" in text(rejected)
            assert (await session.task(refused.task_id)).status == "failed"
    assert lines(marks) == ["t1"]  # ran once, by the approval


async def test_a_cancelled_task_withdraws_its_proposal_which_never_runs(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    laptop = new_token(config_dir, data_dir, "laptop")
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, laptop, TaskHost) as session:
            task = await session.call_as_task("append_append", {"mark": "never"})
            cancelled = await session.cancel_task(task.task_id)
            assert cancelled.status == "cancelled"
            assert (await session.task(task.task_id)).status == "cancelled"
            withdrawn = await session.task_result(task.task_id)
            assert withdrawn.is_error and "cancelled its task" in text(withdrawn)
            with pytest.raises(MCPError, match="cannot be cancelled"):
                await session.cancel_task(task.task_id)
            assert await approve(config_dir, data_dir, task.task_id) != 0
    assert pending_proposals(config_dir, data_dir) == []
    assert lines(marks) == []


async def test_another_client_cannot_read_or_cancel_a_task_nor_an_unknown_one(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    laptop = new_token(config_dir, data_dir, "laptop")
    ci = new_token(config_dir, data_dir, "ci")
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, laptop, TaskHost) as session:
            task = await session.call_as_task("append_append", {"mark": "mine"})
        async with http_host(url, ci, TaskHost) as other:
            for ask in (other.task, other.task_result, other.cancel_task):
                with pytest.raises(MCPError, match="no task"):
                    await ask(task.task_id)
                with pytest.raises(MCPError, match="no task"):
                    await ask("no-such-task")
            assert await other.tasks() == []
        async with http_host(url, laptop, TaskHost) as session:  # its own, again
            assert (await session.task(task.task_id)).status == "working"
    (held,) = pending_proposals(config_dir, data_dir)
    assert held["id"] == task.task_id and lines(marks) == []


async def test_a_host_without_tasks_that_sends_task_gets_todays_answer(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, tmp_path / "marks")
    laptop = new_token(config_dir, data_dir, "laptop")
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, laptop) as session:
            assert session.server_capabilities.tasks is not None
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert listed["append_count"].execution is None
            answer = await session._dispatcher.send_raw_request(
                "tools/call", {"name": "append_count", "arguments": {}, "task": {}}, {}
            )
            assert json.loads(json.dumps(answer))["content"][0]["text"] == "0"
            assert "task" not in answer
