"""Small in-process agents for orchestrator tests."""

from __future__ import annotations

import asyncio
from typing import Any

from diana.core.calls.agents import FunctionAgent, FunctionTool
from diana.core.models import AgentHealth, AgentManifest, AgentState, ToolDefinition, ToolResult


def tool(name: str, parameters: dict[str, Any] | None = None, **extra: Any) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"test tool {name}",
        parameters=parameters or {"type": "object", "properties": {}},
        **extra,
    )


def echo_agent(agent_id: str, *names: str, calls: list[Any] | None = None) -> FunctionAgent:
    def make(name: str) -> FunctionTool:
        async def handler(params: dict[str, Any]) -> Any:
            if calls is not None:
                calls.append((name, params))
            return {"tool": name, "params": params}

        return FunctionTool(tool(name), handler)

    return FunctionAgent(agent_id, agent_id.title(), [make(n) for n in names])


class ScriptedAgent:
    """An agent whose lifecycle steps can hang or fail, for lifecycle tests."""

    def __init__(
        self,
        agent_id: str,
        *,
        hang_health: bool = False,
        hang_shutdown: bool = False,
        fail_init: bool = False,
    ) -> None:
        self.agent_id = agent_id
        self.hang_health = hang_health
        self.hang_shutdown = hang_shutdown
        self.fail_init = fail_init
        self.shutdown_called = False

    async def initialize(self) -> None:
        if self.fail_init:
            raise RuntimeError("database password rejected")

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult:
        return ToolResult.ok("done")

    async def shutdown(self) -> None:
        self.shutdown_called = True
        if self.hang_shutdown:
            await asyncio.Event().wait()

    def get_manifest(self) -> AgentManifest:
        return AgentManifest(
            id=self.agent_id,
            name=self.agent_id,
            tools=[tool(self.agent_id.replace("-", "_") + "_op")],
        )

    async def health(self) -> AgentHealth:
        if self.hang_health:
            await asyncio.Event().wait()
        from datetime import UTC, datetime

        return AgentHealth(
            agent_id=self.agent_id,
            status="healthy",
            state=AgentState.RUNNING,
            last_checked=datetime.now(UTC),
        )
