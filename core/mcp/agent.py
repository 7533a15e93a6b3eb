"""MCPAgent: one MCP server seen by the orchestrator as an agent with `{server}_{tool}` tools."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
from mcp import MCPError
from pydantic import ValidationError

from ..clock import Clock, SystemClock
from ..models import (
    AgentHealth,
    AgentManifest,
    AgentState,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    ToolResult,
)
from .config import agent_id_for, normalise_tool_name, tool_prefix
from .connection import ServerConnection, ServerDown


def risk_from_annotations(annotations: types.ToolAnnotations | None) -> RiskLevel:
    """What a server says of its tool, read cautiously: no word means irreversible."""
    if annotations is None:
        return RiskLevel.IRREVERSIBLE
    if annotations.read_only_hint:
        return RiskLevel.REVERSIBLE
    if annotations.destructive_hint is False:
        return RiskLevel.REVERSIBLE_WITH_DELAY
    return RiskLevel.IRREVERSIBLE


def definition_for(server: str, tool: types.Tool, timeout: float | None) -> ToolDefinition:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    hints = tool.annotations
    return ToolDefinition(
        name=f"{tool_prefix(server)}_{normalise_tool_name(tool.name)}",
        description=(tool.description or "").strip() or f"{tool.name} (MCP server {server})",
        parameters=schema,
        category=f"mcp:{server}",
        annotations=ToolAnnotations(
            readOnlyHint=hints.read_only_hint if hints else None,
            destructiveHint=hints.destructive_hint if hints else None,
            idempotentHint=hints.idempotent_hint if hints else None,
            openWorldHint=hints.open_world_hint if hints else None,
        ),
        risk=risk_from_annotations(hints),
        timeout=timeout,
    )


def map_result(result: types.CallToolResult) -> ToolResult:
    """An MCP result as a ToolResult: text joined, images and resources as placeholders."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            size = len(base64.b64decode(block.data, validate=False)) if block.data else 0
            parts.append(f"[{kind} {block.mime_type}, {size:,} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            parts.append(f"[resource {block.resource.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    text = "\n".join(parts)
    if result.is_error:
        return ToolResult.fail(
            ErrorCode.TOOL_EXECUTION_FAILED,
            text or "the server reported an error without a message",
        )
    structured = result.structured_content
    if isinstance(structured, dict) and set(structured) == {"result"}:
        return ToolResult.ok(structured["result"])  # the SDK's wrapping of a plain return
    return ToolResult.ok(structured if structured is not None else text)


class MCPAgent:
    """The orchestrator's view of one server. The MCP manager owns the connection."""

    def __init__(self, connection: ServerConnection, clock: Clock | None = None) -> None:
        self.connection = connection
        self.agent_id = agent_id_for(connection.name)
        self._clock = clock or SystemClock()
        self._originals: dict[str, str] = {}
        self.by_server_tool: dict[str, ToolDefinition] = {}
        self.rejected: list[str] = []
        self.state = AgentState.STOPPED

    async def initialize(self) -> None:
        self.state = AgentState.INITIALIZED

    async def shutdown(self) -> None:
        self.state = AgentState.STOPPED

    def get_manifest(self) -> AgentManifest:
        config = self.connection.config
        by_name: dict[str, list[tuple[str, ToolDefinition]]] = {}
        rejected: list[str] = []
        for tool in self.connection.state.tools:
            try:
                definition = definition_for(config.name, tool, config.tool_timeout)
            except ValidationError as exc:
                rejected.append(f"{tool.name}: {exc.errors()[0]['msg']}")
                continue
            by_name.setdefault(definition.name, []).append((tool.name, definition))
        definitions: list[ToolDefinition] = []
        originals: dict[str, str] = {}
        for name, tools in by_name.items():
            if len(tools) > 1:
                # Which one would run is not the one whose risk was judged: neither is kept.
                listed = " and ".join(repr(original) for original, _ in tools)
                rejected.append(f"{listed} were both rejected: they are both named {name}")
                continue
            ((original, definition),) = tools
            originals[name] = original
            definitions.append(definition)
        self._originals, self.rejected = originals, rejected
        self.by_server_tool = {originals[d.name]: d for d in definitions}
        return AgentManifest(
            id=self.agent_id,
            name=f"MCP server {config.name}",
            tools=definitions,
            capabilities=["mcp"],
            requires_approval=any(d.risk is not RiskLevel.REVERSIBLE for d in definitions),
        )

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult:
        original = self._originals.get(tool_name)
        if original is None:
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND, f"server {self.connection.name} has no tool {tool_name}"
            )
        timeout = self.connection.config.tool_timeout or 30.0
        try:
            result = await self.connection.call_tool(original, params, timeout)
        except ServerDown as exc:
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE, f"MCP server {self.connection.name} is down: {exc}"
            )
        except MCPError as exc:
            code = exc.error.code
            if code == types.REQUEST_TIMEOUT:
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_TIMEOUT,
                    f"{tool_name} got no answer within {timeout:g} s",
                )
            if code == types.CONNECTION_CLOSED:
                return ToolResult.fail(
                    ErrorCode.AGENT_UNAVAILABLE,
                    f"MCP server {self.connection.name} went down during the call: "
                    f"{self.connection.unavailable_reason()}",
                )
            return ToolResult.fail(
                ErrorCode.TOOL_EXECUTION_FAILED, f"MCP error {code}: {exc.error.message}"
            )
        self.state = AgentState.RUNNING
        return map_result(result)

    async def health(self) -> AgentHealth:
        ready = self.connection.ready
        return AgentHealth(
            agent_id=self.agent_id,
            status="healthy" if ready else "unhealthy",
            state=self.state,
            message=None if ready else self.connection.unavailable_reason(),
            last_checked=self._clock.now(),
            tool_count=len(self.connection.state.tools),
        )
