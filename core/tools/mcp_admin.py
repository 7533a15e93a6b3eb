"""The model's tools for the MCP sub-agent, as the built-in agent "mcp-admin".

Asking for a server to be added writes mcp-servers.json and runs a program, so that tool is
irreversible: the approvals gate turns the model's call into a proposal and the request is only
queued once a person approves. The server is given as a config, or by its name in the MCP
Registry (the entry is then built as `diana servers install` builds it, pinned to a version).
Searching the registry, asking how requests are going, cancelling one and listing the tools of
the servers change nothing lasting and run at once. None of them waits for the sub-agent's
work: they return a request id or a snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..config.mcp_servers import SERVER_NAME_PATTERN
from ..config.settings import ConfigError
from ..mcp.manager import MCPManager
from ..mcp.servers_document import check_server
from ..mcp.subagent import ADMIN_AGENT_ID, MCPSubagent
from ..mcp.subagent_request import (
    OPEN_STATES,
    NotCancellable,
    RequestKind,
    RequestPriority,
    SubagentRequest,
    UnknownRequest,
)
from ..mcp.tool_cache import ToolCache, age_text
from ..mcp.venv_install import RegistryEntryError, VenvInstall
from ..models import (
    AgentError,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    parameters_of,
)
from ..system.clock import Clock

if TYPE_CHECKING:
    from ..mcp.registry import RegistryClient

STATUS_LIMIT = 10
# Seconds mcp_list_available_tools keeps of its call's time limit for answering once the
# servers it starts are waited for.
ANSWER_RESERVE = 1.0


class ServerConfigArgument(BaseModel):
    """How to reach the server: a local program or a remote URL. Only what is given is
    checked here; the sub-agent checks the whole entry before it is queued."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(default=None, min_length=1, description="Program to run.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables; ${VAR} takes one from DIANA's environment.",
    )
    cwd: str | None = Field(default=None, description="Working directory.")
    url: str | None = Field(default=None, pattern="^https?://", description="A remote server.")
    transport: Literal["stdio", "streamable-http", "sse"] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=30,
        description="Seconds to connect and to list tools (default 10).",
    )


REGISTRY_NAME_PATTERN = r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"  # server.json's name


class RequestServerAdditionParameters(BaseModel):
    # A server given one way or the other, never both: checked before a person is asked.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [{"required": ["config"]}, {"required": ["registry_name"]}],
        },
    )

    name: str | None = Field(
        default=None,
        pattern=SERVER_NAME_PATTERN,
        max_length=64,
        description=(
            "The server's name; its tools are called {name}_{tool}. Needed with config; with "
            "registry_name it defaults to the last part of that name."
        ),
    )
    config: ServerConfigArgument | None = Field(
        default=None,
        description=(
            'How to reach the server: "command" (with "args", "env") for a local program, or '
            '"url" (with "transport", "headers") for a remote one. Give this or registry_name.'
        ),
    )
    registry_name: str | None = Field(
        default=None,
        pattern=REGISTRY_NAME_PATTERN,
        max_length=200,
        description="The server's name in the MCP Registry, as mcp_search_servers gives it.",
    )
    version: str | None = Field(
        default=None, min_length=1, max_length=100, description="Registry version (latest)."
    )
    settings: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Values for the registry entry's settings (environment variables, headers, "
            "arguments) by name; ${VAR} takes one from DIANA's environment."
        ),
    )
    purpose: str | None = Field(default=None, max_length=500, description="Why it is needed.")
    priority: Literal["high", "normal", "low"] = Field(
        default="normal", description="Queued high requests run before normal, then low."
    )
    plan: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Filled in by DIANA with a registry_name, before a person is asked: the exact "
            "program, arguments, environment names or URL approved. Anything given is replaced."
        ),
    )


class SearchServersParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1, max_length=100, description="A word of the server's name, e.g. weather."
    )
    limit: int = Field(default=5, ge=1, le=10)


class CheckSubagentStatusParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str | None = Field(default=None, min_length=1, description="e.g. req-1")


class ServerRequestParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(
        min_length=1, max_length=64, description="The configured server's name, e.g. time."
    )
    priority: Literal["high", "normal", "low"] = Field(
        default="normal", description="Queued high requests run before normal, then low."
    )


class RequestServerChangeParameters(ServerRequestParameters):
    config: ServerConfigArgument = Field(
        description="The server's whole new entry (it replaces the one there, once it works)."
    )


class CancelSubagentWorkParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1)
    reason: str | None = Field(default=None, max_length=500)


class ListAvailableToolsParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str | None = Field(default=None, min_length=1, description="One server's name.")


REQUEST_SERVER_ADDITION = ToolDefinition(
    name="mcp_request_server_addition",
    description=(
        "Ask the MCP sub-agent to add a server, given by its MCP Registry name (from "
        "mcp_search_servers) or by a config: it tests a real connection and, if the server "
        "works, adds it to mcp-servers.json so its tools become available. Needs a person's "
        "approval. Returns a request id at once; follow it with mcp_check_subagent_status."
    ),
    parameters=parameters_of(RequestServerAdditionParameters),
    examples=[
        '{"registry_name": "io.github.modelcontextprotocol/time"}',
        '{"name": "time", "config": {"command": "uvx", "args": ["mcp-server-time"]}}',
    ],
    category="mcp-admin",
    # It writes the config and runs a program the model chose: a person decides.
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
    ),
)

SEARCH_SERVERS = ToolDefinition(
    name="mcp_search_servers",
    description=(
        "Search the MCP Registry for servers by a word of their name: each with its registry "
        "name, title, description, version, status, how it would run here and the settings "
        "it needs. Changes nothing; mcp_request_server_addition adds one."
    ),
    parameters=parameters_of(SearchServersParameters),
    examples=['{"query": "calendar"}', '{"query": "filesystem", "limit": 3}'],
    category="mcp-admin",
    # It reads a public catalogue; the query is the only thing that leaves the machine.
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True),
)

CHECK_SUBAGENT_STATUS = ToolDefinition(
    name="mcp_check_subagent_status",
    description=(
        "The state (queued, in_progress, completed, failed, cancelled), progress (0-100) and "
        "message of one MCP sub-agent request, or of the recent ones when no id is given."
    ),
    parameters=parameters_of(CheckSubagentStatusParameters),
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
    parameters=parameters_of(CancelSubagentWorkParameters),
    examples=['{"request_id": "req-1", "reason": "not needed any more"}'],
    category="mcp-admin",
    # It only stops work that has not changed anything yet.
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
    ),
)

REQUEST_SERVER_REMOVAL = ToolDefinition(
    name="mcp_request_server_removal",
    description=(
        "Ask the MCP sub-agent to remove a configured server from mcp-servers.json (it is "
        "stopped and its tools go). Needs a person's approval. Returns a request id at once."
    ),
    parameters=parameters_of(ServerRequestParameters),
    examples=['{"server": "time"}'],
    category="mcp-admin",
    # It takes a server (and what it gave) away: a person decides.
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False
    ),
)

REQUEST_SERVER_CHANGE = ToolDefinition(
    name="mcp_request_server_change",
    description=(
        "Ask the MCP sub-agent to change a configured server's entry: the new entry is tested "
        "for real and written only if it works. Needs a person's approval. Returns a request "
        "id at once."
    ),
    parameters=parameters_of(RequestServerChangeParameters),
    examples=['{"server": "time", "config": {"command": "mcp-server-time", "args": []}}'],
    category="mcp-admin",
    # It writes the config and runs a program the model chose: a person decides.
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
    ),
)

TEST_SERVER = ToolDefinition(
    name="mcp_test_server",
    description=(
        "Ask the MCP sub-agent to test a configured server: a connection of its own, its tools "
        "listed, then closed. Changes nothing. Returns a request id at once; the result (tools, "
        "or why it failed with the server's last stderr lines) with mcp_check_subagent_status."
    ),
    parameters=parameters_of(ServerRequestParameters),
    examples=['{"server": "time"}'],
    category="mcp-admin",
    # It starts the program a person configured, as diana does anyway, and writes nothing.
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False
    ),
)

LIST_AVAILABLE_TOOLS = ToolDefinition(
    name="mcp_list_available_tools",
    description=(
        "The tools each configured MCP server offers, with descriptions and the server's "
        "state (from its live connection, else from the tool cache: when it was listed); "
        "optionally for one server."
    ),
    parameters=parameters_of(ListAvailableToolsParameters),
    examples=["{}", '{"server": "time"}'],
    category="mcp-admin",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
)


class MCPAdminTools:
    """The handlers, over the runtime's sub-agent and MCP manager."""

    def __init__(
        self,
        subagent: MCPSubagent,
        manager: MCPManager,
        clock: Clock,
        *,
        registry: Callable[[], RegistryClient] | None = None,
        cache: ToolCache | None = None,
    ) -> None:
        self.clock = clock
        self.subagent = subagent
        self.manager = manager
        self.registry = registry
        self.cache = cache

    async def search_servers(self, params: dict[str, Any]) -> dict[str, Any]:
        from ..mcp.registry import RegistryError

        registry = self._registry()
        try:
            answer = await registry.search(params["query"], limit=params.get("limit", 5))
        except RegistryError as exc:
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, str(exc)) from None
        return {
            "registry": registry.url,
            **answer.public(servers_dir=registry.servers_dir, rule=registry.address_rule),
        }

    def _registry(self) -> RegistryClient:
        if self.registry is None:
            raise AgentError(ErrorCode.AGENT_UNAVAILABLE, "no MCP Registry is configured")
        return self.registry()  # made when first used: a call of another tool never imports it

    async def _from_registry(
        self, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any], VenvInstall | None, dict[str, Any]]:
        """The name and entry a registry name stands for, pinned to its version, what must
        be installed first, and the plan a person is shown (``InstallPlan.shown``)."""
        from ..mcp.registry import RegistryError
        from ..mcp.registry_entry import check_remote, plan_install, suggested_name

        registry_name = params["registry_name"]
        registry = self._registry()
        try:
            found = await registry.server(registry_name, params.get("version"))
            if found.deprecated:
                raise RegistryEntryError(
                    f"{registry_name} is {found.status} in the registry; choose another"
                )
            plan = plan_install(found, servers_dir=registry.servers_dir, rule=registry.address_rule)
            values = params.get("settings") or {}
            entry = plan.entry(values)
            await check_remote(plan, values, registry.address_rule)
            shown = plan.shown(values)
        except RegistryError as exc:
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, str(exc)) from None
        except RegistryEntryError as exc:
            hint = f"; `diana servers install {registry_name}` asks a person for settings"
            raise AgentError(
                ErrorCode.INVALID_ARGUMENTS, f'argument "registry_name": {exc}{hint}'
            ) from None
        name = params.get("name") or suggested_name(registry_name)
        return name, entry, plan.prepare, {"server": name, **shown}

    async def plan_server_addition(self, params: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments with the install plan built in (a registry name's), before
        a person is asked: what they approve is what runs."""
        planned = {k: v for k, v in params.items() if k != "plan"}
        if planned.get("registry_name") is None or planned.get("config") is not None:
            return planned
        *_, planned["plan"] = await self._from_registry(planned)
        return planned

    async def request_server_addition(self, params: dict[str, Any]) -> dict[str, Any]:
        if (params.get("config") is None) == (params.get("registry_name") is None):
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, 'give either "config" or "registry_name"')
        prepare = None
        if params.get("registry_name") is not None:
            name, config, prepare, plan = await self._from_registry(params)
            if params.get("plan") is None:
                raise AgentError(
                    ErrorCode.INVALID_ARGUMENTS,
                    'argument "plan": no install plan was approved for '
                    f"{params['registry_name']}; ask again to be shown one",
                )
            if params["plan"] != plan:
                raise AgentError(
                    ErrorCode.TOOL_EXECUTION_FAILED,
                    f"{params['registry_name']} would now install differently from the plan "
                    f"that was approved ({_difference(params['plan'], plan)}); nothing was "
                    "installed: ask again to be shown the new plan",
                )
        elif params.get("name") is None:
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, 'argument "name": needed with config')
        else:
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
        request = self.subagent.add_server(
            name,
            config,
            origin="model",
            priority=RequestPriority(params.get("priority", "normal")),
            prepare=prepare,
        )
        shown = {
            "request_id": request.id,
            "state": request.state.value,
            "server": name,
            "message": "queued; follow it with mcp_check_subagent_status",
        }
        if params.get("registry_name") is not None:
            shown["registry_name"] = params["registry_name"]
        return shown

    async def check_subagent_status(self, params: dict[str, Any]) -> dict[str, Any]:
        """This process's requests as they are now; another process's (or one from before
        a restart) as it last wrote them."""
        records = self.subagent.records
        request_id = params.get("request_id")
        if request_id is None:
            if records is None:
                recent = [r.public() for r in self.subagent.recent(STATUS_LIMIT)]
            else:
                recent = await records.recent(STATUS_LIMIT)
                here = {r.id: r.public() for r in self.subagent.recent(STATUS_LIMIT)}
                recent = [here.get(r["request_id"], r) for r in recent]
            busy = self.subagent.busy or any(r["state"] in OPEN_STATES for r in recent)
            return {"requests": recent, "busy": busy}
        try:
            return self.subagent.get(request_id).public()
        except UnknownRequest as exc:
            stored = await records.get(request_id.strip()) if records is not None else None
            if stored is None:
                raise AgentError(
                    ErrorCode.INVALID_ARGUMENTS, f'argument "request_id": {exc}'
                ) from None
            return stored

    def _configured(self, params: dict[str, Any]) -> str:
        name = str(params["server"])
        names = [*self.manager.configs, *self.manager.disabled]
        if name not in names:
            known = ", ".join(names) or "none"
            raise AgentError(
                ErrorCode.INVALID_ARGUMENTS,
                f'argument "server": no MCP server "{name}" (configured: {known})',
            )
        return name

    @staticmethod
    def _queued(request: SubagentRequest) -> dict[str, Any]:
        return {
            "request_id": request.id,
            "state": request.state.value,
            "server": request.server,
            "message": "queued; follow it with mcp_check_subagent_status",
        }

    async def request_server_removal(self, params: dict[str, Any]) -> dict[str, Any]:
        name = self._configured(params)
        priority = RequestPriority(params.get("priority", "normal"))
        return self._queued(
            self.subagent.submit(RequestKind.REMOVE_SERVER, name, origin="model", priority=priority)
        )

    async def request_server_change(self, params: dict[str, Any]) -> dict[str, Any]:
        name, config = self._configured(params), params["config"]
        try:
            check_server(name, config, self.subagent.config_file)
        except ConfigError as exc:
            detail = exc.message.removeprefix(f'server "{name}": ')
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, f'argument "config": {detail}') from None
        priority = RequestPriority(params.get("priority", "normal"))
        return self._queued(
            self.subagent.submit(
                RequestKind.MODIFY_SERVER, name, config, origin="model", priority=priority
            )
        )

    async def test_server(self, params: dict[str, Any]) -> dict[str, Any]:
        name = self._configured(params)
        priority = RequestPriority(params.get("priority", "normal"))
        return self._queued(
            self.subagent.submit(RequestKind.TEST_SERVER, name, origin="model", priority=priority)
        )

    async def cancel_subagent_work(self, params: dict[str, Any]) -> dict[str, Any]:
        request = self._find(params["request_id"])
        try:
            self.subagent.cancel(request.id, params.get("reason"))
        except NotCancellable as exc:
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, str(exc)) from None
        return request.public()

    async def list_available_tools(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every configured server, from its live connection in this process, else from
        the tool cache (what any process last listed), else started now and listed, so the
        app and a `diana` command answer alike."""
        wanted = params.get("server")
        names = [*self.manager.configs, *self.manager.disabled]
        if wanted is not None:
            if wanted not in names:
                known = ", ".join(names) or "none"
                raise AgentError(
                    ErrorCode.INVALID_ARGUMENTS,
                    f'argument "server": no MCP server "{wanted}" (configured: {known})',
                )
            names = [wanted]
        cached = await self.cache.entries() if self.cache is not None else {}
        # A server neither started nor cached (a command that starts servers on demand) is
        # started now and listed, as `diana tools` does.
        unlisted = [
            n
            for n in names
            if n not in self.manager.disabled
            and n not in self.manager.connections
            and n not in cached
        ]
        waited = await self._started(unlisted) if unlisted else 0.0
        now = self.clock.now()
        servers: list[dict[str, Any]] = []
        for name in names:
            connection = self.manager.connections.get(name)
            entry = cached.get(name)
            if name in self.manager.disabled:
                servers.append({"server": name, "status": "disabled", "tools": []})
            elif connection is not None:  # connected (or trying to) in this process
                servers.append(self._live(name))
            elif entry is not None:
                servers.append(
                    {
                        "server": name,
                        "status": "not connected in this process",
                        "tools": [
                            {"name": tool_name, "description": d.description or ""}
                            for tool_name, d in entry.definitions.items()
                        ],
                        "listed": "from the tool cache, listed "
                        + age_text(now - entry.refreshed_at),
                    }
                )
            else:
                never = (
                    f"starting: not ready within {waited:g} s"
                    if name in unlisted
                    else "never listed: not connected, not in the tool cache"
                )
                servers.append({"server": name, "status": never, "tools": []})
        return {"servers": servers}

    async def _started(self, names: list[str]) -> float:
        """Start these servers and wait for their first attempts, within the call's time
        limit (less ANSWER_RESERVE): one still connecting then is listed as such. The
        seconds it waited at most."""
        limit = self.manager.orchestrator.time_limit(LIST_AVAILABLE_TOOLS.name) or 30.0
        wait = max(0.5, limit - ANSWER_RESERVE)
        starting = asyncio.ensure_future(self.manager.wait_ready(names))
        starting.add_done_callback(lambda done: done.cancelled() or done.exception())
        await asyncio.wait([starting], timeout=wait)
        return wait

    def _live(self, name: str) -> dict[str, Any]:
        info = self.manager.diagnostics(name)
        shown: dict[str, Any] = {
            "server": name,
            "status": info.status,
            "tools": [
                {"name": t.name, "description": t.description or ""}
                for t in info.tools
                if t.name  # a tool the orchestrator rejected cannot be called
            ],
        }
        if info.status != "ready" and info.last_error:
            shown["error"] = info.last_error
        return shown

    def _find(self, request_id: str) -> SubagentRequest:
        try:
            return self.subagent.get(request_id)
        except UnknownRequest as exc:
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, f'argument "request_id": {exc}') from None


def mcp_admin_agent(
    subagent: MCPSubagent,
    manager: MCPManager,
    clock: Clock,
    *,
    registry: Callable[[], RegistryClient] | None = None,
    cache: ToolCache | None = None,
) -> Agent:
    tools = MCPAdminTools(subagent, manager, clock, registry=registry, cache=cache)
    return FunctionAgent(
        ADMIN_AGENT_ID,
        "MCP sub-agent",
        [
            FunctionTool(SEARCH_SERVERS, tools.search_servers),
            FunctionTool(
                REQUEST_SERVER_ADDITION, tools.request_server_addition, tools.plan_server_addition
            ),
            FunctionTool(REQUEST_SERVER_CHANGE, tools.request_server_change),
            FunctionTool(REQUEST_SERVER_REMOVAL, tools.request_server_removal),
            FunctionTool(TEST_SERVER, tools.test_server),
            FunctionTool(CHECK_SUBAGENT_STATUS, tools.check_subagent_status),
            FunctionTool(CANCEL_SUBAGENT_WORK, tools.cancel_subagent_work),
            FunctionTool(LIST_AVAILABLE_TOOLS, tools.list_available_tools),
        ],
        capabilities=["mcp-admin"],
        clock=clock,
        fixed_schemas=True,
    )


def _difference(approved: Any, now: dict[str, Any]) -> str:
    """What changed between two plans, in one line: the first key that differs."""
    if not isinstance(approved, dict):
        return "the approved plan is not one diana made"
    for key in sorted(set(approved) | set(now)):
        if approved.get(key) != now.get(key):
            return f"{key}: approved {approved.get(key)!r}, now {now.get(key)!r}"
    return "no difference"
