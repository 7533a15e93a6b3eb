"""The Agent protocol, and FunctionAgent: an agent made of plain functions, one per tool."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..models import (
    AgentError,
    AgentHealth,
    AgentManifest,
    AgentState,
    ErrorCode,
    ToolDefinition,
    ToolResult,
)
from ..system.clock import Clock, SystemClock


@runtime_checkable
class Agent(Protocol):
    """A capability provider. Only the orchestrator talks to agents."""

    async def initialize(self) -> None: ...

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult: ...

    async def shutdown(self) -> None: ...

    def get_manifest(self) -> AgentManifest: ...

    async def health(self) -> AgentHealth: ...


@runtime_checkable
class PlansCalls(Protocol):
    """An agent some of whose calls carry a plan built before a person is asked: the
    orchestrator hands it a call's arguments before the gate, and the arguments it returns
    are the ones proposed, approved and run (so the approval covers the plan)."""

    async def planned(self, tool_name: str, params: dict[str, Any]) -> dict[str, Any]: ...


@runtime_checkable
class ChecksCalls(Protocol):
    """An agent that may refuse a call of one of its tools before the gate (an MCP server's
    tool held because its definition changed): nobody is asked about a call that cannot run."""

    @property
    def checks_definitions(self) -> bool:
        """Whether a change of one of its tools' definitions may make it refuse the tool."""
        ...

    async def refusal(self, tool_name: str) -> ToolResult | None: ...

    async def withheld(self) -> set[str]:
        """Its tools not to offer the model now (each would be refused)."""
        ...


AgentFactory = Callable[[], Agent]
ToolHandler = Callable[[dict[str, Any]], Any] | Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class FunctionTool:
    """One tool: what the model is told about it, and the function that carries it out."""

    definition: ToolDefinition
    handler: ToolHandler
    # Builds what the call will do into its arguments before a person is asked (PlansCalls);
    # AgentError if it cannot be planned. None: the arguments are proposed as given.
    plan: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None


class FunctionAgent:
    """Wraps sync or async callables ``(params) -> result`` as one agent.

    A handler's return value becomes ``ToolResult.ok(value)``; a returned ToolResult is passed
    through; ``AgentError`` keeps its code; other exceptions reach the orchestrator, which
    reports them as TOOL_EXECUTION_FAILED.
    Sync handlers run in a worker thread so they never block the event loop.
    """

    def __init__(
        self,
        agent_id: str,
        name: str,
        tools: list[FunctionTool],
        *,
        capabilities: list[str] | None = None,
        clock: Clock | None = None,
        fixed_schemas: bool = False,
    ) -> None:
        """``fixed_schemas``: the tools' schemas are diana's own (see AgentManifest)."""
        self._id, self._name, self._capabilities = agent_id, name, capabilities or []
        self._fixed_schemas = fixed_schemas
        self.set_tools(tools)
        self._clock = clock or SystemClock()
        self.state = AgentState.STOPPED

    def set_tools(self, tools: list[FunctionTool]) -> None:
        """Offer a new set of tools (a registry re-read); the orchestrator's refresh_tools
        then registers them."""
        self._tools = {tool.definition.name: tool for tool in tools}
        self._manifest = AgentManifest(
            id=self._id,
            name=self._name,
            tools=[tool.definition for tool in tools],
            capabilities=self._capabilities,
            requires_approval=any(t.definition.risk != "reversible" for t in tools),
            fixed_schemas=self._fixed_schemas,
        )

    async def initialize(self) -> None:
        self.state = AgentState.INITIALIZED

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult:
        tool = self._tools.get(tool_name)
        if tool is None:
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND, f"agent {self._manifest.id} has no tool {tool_name}"
            )
        try:
            if _is_async(tool.handler):
                value = await tool.handler(params)
            else:
                value = await asyncio.to_thread(tool.handler, params)
            if inspect.isawaitable(value):  # a plain function that returned a coroutine
                value = await value
        except AgentError as exc:
            return ToolResult.fail(exc.code, exc.message)
        if isinstance(value, ToolResult):
            return value
        return ToolResult.ok(value)

    async def planned(self, tool_name: str, params: dict[str, Any]) -> dict[str, Any]:
        tool = self._tools.get(tool_name)
        if tool is None or tool.plan is None:
            return params
        return await tool.plan(params)

    async def shutdown(self) -> None:
        self.state = AgentState.STOPPED

    def get_manifest(self) -> AgentManifest:
        return self._manifest

    async def health(self) -> AgentHealth:
        running = self.state in (AgentState.INITIALIZED, AgentState.RUNNING)
        return AgentHealth(
            agent_id=self._manifest.id,
            status="healthy" if running else "unknown",
            state=self.state,
            last_checked=self._clock.now(),
            tool_count=len(self._tools),
        )


def _is_async(handler: Any) -> bool:
    call_method = type(handler).__call__
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call_method)
