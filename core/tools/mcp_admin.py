"""The model's tools for the MCP sub-agent, as the built-in agent "mcp-admin".

Asking for a server to be added writes mcp-servers.json and runs a program, so that tool is
irreversible: the approvals gate turns the model's call into a proposal and the request is only
queued once a person approves. Asking how requests are going, cancelling one and listing the
tools of the connected servers change nothing lasting and run at once. None of them waits for
the sub-agent's work: they return a request id or a snapshot.
"""

from __future__ import annotations

from typing import Any

from ..agents import Agent, FunctionAgent, FunctionTool
from ..clock import Clock
from ..config import ConfigError
from ..mcp.config import SERVER_NAME_PATTERN
from ..mcp.manager import MCPManager
from ..mcp.subagent import (
    ADMIN_AGENT_ID,
    MCPSubagent,
    NotCancellable,
    SubagentRequest,
    UnknownRequest,
    check_server,
)
from ..models import AgentError, ErrorCode, RiskLevel, ToolAnnotations, ToolDefinition

STATUS_LIMIT = 10

SERVER_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        'How to reach the server: "command" (with "args", "env") for a local program, or '
        '"url" (with "transport", "headers") for a remote one.'
    ),
    "properties": {
        "command": {"type": "string", "minLength": 1, "description": "Program to run."},
        "args": {"type": "array", "items": {"type": "string"}, "description": "Its arguments."},
        "env": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Environment variables; ${VAR} takes one from DIANA's environment.",
        },
        "cwd": {"type": "string", "description": "Working directory."},
        "url": {"type": "string", "pattern": "^https?://", "description": "A remote server."},
        "transport": {"type": "string", "enum": ["stdio", "streamable-http", "sse"]},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 30,
            "description": "Seconds to connect and to list tools (default 10).",
        },
    },
    "additionalProperties": False,
}

REQUEST_SERVER_ADDITION = ToolDefinition(
    name="mcp_request_server_addition",
    description=(
        "Ask the MCP sub-agent to add a server: it tests a real connection and, if the server "
        "works, adds it to mcp-servers.json so its tools become available. Needs a person's "
        "approval. Returns a request id at once; follow it with mcp_check_subagent_status."
    ),
    parameters={
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "pattern": SERVER_NAME_PATTERN,
                "maxLength": 64,
                "description": "The server's name; its tools are called {name}_{tool}.",
            },
            "config": SERVER_CONFIG_SCHEMA,
            "purpose": {"type": "string", "maxLength": 500, "description": "Why it is needed."},
        },
        "required": ["name", "config"],
        "additionalProperties": False,
    },
    examples=[
        '{"name": "time", "config": {"command": "uvx", "args": ["mcp-server-time"]}}',
    ],
    category="mcp-admin",
    # It writes the config and runs a program the model chose: a person decides.
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
    ),
)

CHECK_SUBAGENT_STATUS = ToolDefinition(
    name="mcp_check_subagent_status",
    description=(
        "The state (queued, in_progress, completed, failed, cancelled), progress (0-100) and "
        "message of one MCP sub-agent request, or of the recent ones when no id is given."
    ),
    parameters={
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "minLength": 1, "description": "e.g. req-1"},
        },
        "additionalProperties": False,
    },
    examples=['{"request_id": "req-1"}', "{}"],
    category="mcp-admin",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
)

CANCEL_SUBAGENT_WORK = ToolDefinition(
    name="mcp_cancel_subagent_work",
    description=(
        "Cancel an MCP sub-agent request: a queued one is dropped, one in progress is "
        "interrupted. mcp-servers.json is left as it was."
    ),
    parameters={
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "minLength": 1},
            "reason": {"type": "string", "maxLength": 500},
        },
        "required": ["request_id"],
        "additionalProperties": False,
    },
    examples=['{"request_id": "req-1", "reason": "not needed any more"}'],
    category="mcp-admin",
    # It only stops work that has not changed anything yet.
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
    ),
)

LIST_AVAILABLE_TOOLS = ToolDefinition(
    name="mcp_list_available_tools",
    description=(
        "The tools each configured MCP server offers now, with descriptions and the server's "
        "state; optionally for one server."
    ),
    parameters={
        "type": "object",
        "properties": {
            "server": {"type": "string", "minLength": 1, "description": "One server's name."},
        },
        "additionalProperties": False,
    },
    examples=["{}", '{"server": "time"}'],
    category="mcp-admin",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
)


class MCPAdminTools:
    """The handlers, over the runtime's sub-agent and MCP manager."""

    def __init__(self, subagent: MCPSubagent, manager: MCPManager) -> None:
        self.subagent = subagent
        self.manager = manager

    async def request_server_addition(self, params: dict[str, Any]) -> dict[str, Any]:
        name, config = params["name"], params["config"]
        try:
            check_server(name, config, self.subagent.config_file)
        except ConfigError as exc:
            detail = exc.message.removeprefix(f'server "{name}": ')
            argument = "name" if detail.startswith("name: ") else "config"
            detail = detail.removeprefix("name: ")
            raise AgentError(
                ErrorCode.INVALID_ARGUMENTS, f'argument "{argument}": {detail}'
            ) from None
        request = self.subagent.add_server(name, config, origin="model")
        return {
            "request_id": request.id,
            "state": request.state.value,
            "server": name,
            "message": "queued; follow it with mcp_check_subagent_status",
        }

    async def check_subagent_status(self, params: dict[str, Any]) -> dict[str, Any]:
        request_id = params.get("request_id")
        if request_id is None:
            recent = self.subagent.recent(STATUS_LIMIT)
            return {"requests": [r.public() for r in recent], "busy": self.subagent.busy}
        return self._find(request_id).public()

    async def cancel_subagent_work(self, params: dict[str, Any]) -> dict[str, Any]:
        request = self._find(params["request_id"])
        try:
            self.subagent.cancel(request.id, params.get("reason"))
        except NotCancellable as exc:
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, str(exc)) from None
        return request.public()

    async def list_available_tools(self, params: dict[str, Any]) -> dict[str, Any]:
        wanted = params.get("server")
        names = list(self.manager.connections)
        if wanted is not None:
            if wanted not in names:
                known = ", ".join(names) or "none"
                raise AgentError(
                    ErrorCode.INVALID_ARGUMENTS,
                    f'argument "server": no MCP server "{wanted}" (configured: {known})',
                )
            names = [wanted]
        servers = []
        for name in names:
            info = self.manager.diagnostics(name)
            shown: dict[str, Any] = {
                "server": name,
                "status": info["status"],
                "tools": [
                    {"name": t["name"], "description": t["description"] or ""}
                    for t in info["tools"]
                    if t["name"]  # a tool the orchestrator rejected cannot be called
                ],
            }
            if info["status"] != "ready" and info["last_error"]:
                shown["error"] = info["last_error"]
            servers.append(shown)
        return {"servers": servers}

    def _find(self, request_id: str) -> SubagentRequest:
        try:
            return self.subagent.get(request_id)
        except UnknownRequest as exc:
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, f'argument "request_id": {exc}') from None


def mcp_admin_agent(subagent: MCPSubagent, manager: MCPManager, clock: Clock) -> Agent:
    tools = MCPAdminTools(subagent, manager)
    return FunctionAgent(
        ADMIN_AGENT_ID,
        "MCP sub-agent",
        [
            FunctionTool(REQUEST_SERVER_ADDITION, tools.request_server_addition),
            FunctionTool(CHECK_SUBAGENT_STATUS, tools.check_subagent_status),
            FunctionTool(CANCEL_SUBAGENT_WORK, tools.cancel_subagent_work),
            FunctionTool(LIST_AVAILABLE_TOOLS, tools.list_available_tools),
        ],
        capabilities=["mcp-admin"],
        clock=clock,
    )
