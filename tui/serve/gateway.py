"""The gateway's MCP server: the tools diana exposes, and each host's call through the gate.

A call the gate holds for a person (a proposal) keeps the host's request open until someone
decides, in the app, with `diana approve` / `diana reject`, or in any other process on the
same data dir; meanwhile the host hears a progress notification every ``keep_alive``
seconds when it asked for progress. The host cancelling the request, or going away, takes the
proposal back (withdrawn, never run). A wait longer than settings.json ``serve.wait`` ends
the request with the proposal's id; the proposal stays for a person to decide. A host that
has MCP tasks may ask for its call as a task instead: then nothing is held (tasks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import warnings
from typing import Any

import anyio
from diana.core.api import Core, MessageSplitter, Oversized, agent_id_for
from diana.core.api.errors import AlreadyDecided
from diana.core.api.shown import without_surrogates
from diana.core.api.types import (
    HOST_ORIGIN,
    MCP_SERVERS_FILE,
    PROMPT,
    PROMPTS,
    READ,
    RESOURCES,
    SETTINGS_FILE,
    Exposure,
)
from diana.core.events import ConfigChecked, ServerStatusChanged, ToolsChanged
from diana.core.models import ErrorCode, ToolDefinition, ToolResult
from mcp import MCPError, types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged

from .results import tool_result
from .tasks import TASK_PROTOCOLS, HostTasks, host_has_tasks
from .tasks import capability as task_capability

# Seconds between two progress notifications while a host's call waits for a person.
KEEP_ALIVE = 5.0
# The longest client name kept in a proposal's origin (a host names itself; it is a label).
NAME_LIMIT = 64
# Hosts told of list changes at once (their sessions); past this, the oldest is forgotten.
SESSIONS_KEPT = 256
# The longest message a host may send, on stdin or as an HTTP body (the SDK's own bound for
# HTTP): a longer one is never held whole; its request is answered with an error saying so.
MESSAGE_LIMIT = 4 << 20
READ_CHUNK = 64 * 1024
HOST_GONE = "the host that made the call stopped waiting for it (cancelled or disconnected)"
SERVE_STOPPED = "diana serve, which the call came through, was stopped before anyone decided"


# What the HTTP front (http.py) puts in a request's scope: the client its token names, and an
# event set once the host has closed the request's connection.
CLIENT_KEY = "diana.client"
GONE_KEY = "diana.gone"


def client_of_request(request: Any) -> str | None:
    """The client a request's token named (HTTP), or None (stdio: the host names itself)."""
    scope = getattr(request, "scope", None)
    return scope.get(CLIENT_KEY) if isinstance(scope, dict) else None


def host_gone(request: Any) -> asyncio.Event | None:
    """Set once the host closed the connection of the request (HTTP); None over stdio, where
    the host leaving ends the whole session instead."""
    scope = getattr(request, "scope", None)
    gone = scope.get(GONE_KEY) if isinstance(scope, dict) else None
    return gone if isinstance(gone, asyncio.Event) else None


def host_origin(client_name: str | None) -> str:
    """The origin a host's calls carry: ``host:`` and the name it gave in clientInfo, kept to
    plain characters, so no host can pass for diana, a person or another origin."""
    name = re.sub(r"[^A-Za-z0-9._@+/-]+", "-", without_surrogates(client_name or "")).strip("-")
    return f"{HOST_ORIGIN}{name[:NAME_LIMIT] or 'unknown'}"


def exposed_tool(definition: ToolDefinition) -> types.Tool:
    """A tool as a host sees it: diana's exposed name, its schema and its hints."""
    hints = definition.annotations
    return types.Tool(
        name=definition.name,
        description=definition.description,
        input_schema=definition.parameters,
        annotations=types.ToolAnnotations(
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )


def exposed_name(server: str, name: str) -> str:
    """A server's resource or prompt as a host sees it among every server's: its name after
    the server's tool prefix (as a tool's), so two servers' ``greeting`` stay apart."""
    return f"{server_prefix(server)}_{name}"


def server_prefix(server: str) -> str:
    from diana.core.api import tool_prefix

    return tool_prefix(server)


def template_pattern(template: str) -> re.Pattern[str]:
    """The URIs an RFC 6570 template (its simple ``{name}`` form) stands for."""
    parts = re.split(r"\{[^{}]*\}", template)
    return re.compile("[^/]*".join(re.escape(part) for part in parts) + r"\Z")


def shaped(items: list[dict[str, Any]], shape: Any) -> list[Any]:
    """Each listed item as MCP shows it; one MCP cannot carry (a URI it refuses, a field
    missing) is left out, not the whole list."""
    shown = []
    for item in items:
        try:
            shown.append(shape(item))
        except (KeyError, TypeError, ValueError):
            continue
    return shown


def mcp_error(message: str, code: int = types.INVALID_PARAMS) -> MCPError:
    return MCPError(code=code, message=message)


def still_waiting(tool: str, proposal_id: str, waited: float) -> types.CallToolResult:
    text = (
        f"{tool} is still waiting for a person's decision after {waited:g} s: proposal "
        f"{proposal_id} (diana-tui's Approvals pane, `diana approve {proposal_id}` or "
        f"`diana reject {proposal_id}`). Once approved it runs once, there; `diana show "
        f"{proposal_id}` gives its result. Calling again makes a new proposal."
    )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def unknown_choices(core: Core) -> list[str]:
    """A warning for each name settings.json ``serve`` chooses that names no configured MCP
    server (``servers``) or none of diana's own agents (``agents``): it shows nothing."""
    from diana.core.api import load_servers
    from diana.core.api.errors import ConfigError

    where = core.paths.config_file(SETTINGS_FILE)
    serve = core.settings.serve
    servers = set(core.server_configs)
    with contextlib.suppress(ConfigError, OSError):  # every one configured, disabled too
        servers |= {s.name for s in load_servers(core.paths.config_file(MCP_SERVERS_FILE))}
    known = {"servers": servers, "agents": set(core.own_agents())}
    choices = [("serve", serve)] + [
        (f"serve.clients.{name}", client) for name, client in serve.clients.items()
    ]
    warned = []
    for field, chosen in choices:
        for key, names in known.items():
            for name in getattr(chosen, key) or []:
                if name not in names:
                    kind = "MCP server" if key == "servers" else "agent of diana's"
                    warned.append(
                        f"diana: {where}: {field}.{key}: no {kind} is named {name!r} "
                        f"(known: {', '.join(sorted(names)) or 'none'})"
                    )
    return warned


class ChangingServer(Server[Any]):
    """The SDK's server, declaring ``listChanged`` for tools, resources and prompts on every
    transport: the gateway tells its hosts when they change (``Gateway.follow_changes``)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> Any:
        changes = notification_options or NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(changes, experimental_capabilities, extensions)

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        """The SDK's, and tasks (tui/serve/tasks.py) where the protocol has them."""
        found = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        if protocol_version is None or protocol_version in TASK_PROTOCOLS:
            found.tasks = task_capability()
        return found


class Gateway:
    """The MCP server other hosts talk to, over an opened core (``Profile.GATEWAY``)."""

    def __init__(
        self, core: Core, *, keep_alive: float = KEEP_ALIVE, only: str | None = None
    ) -> None:
        self.core = core
        self.keep_alive = keep_alive
        # `diana serve --only SERVER`: that server's tools, resources and prompts under its
        # own names (the core opened no other server); None: every server's, under diana's.
        self.only = only
        # The task serving the host: cancelled, it is diana serve that stops (a signal).
        self.serving: asyncio.Task[Any] | None = None
        # Hosts told of list changes: sessions of the handshake protocols, by arrival, and
        # the listen streams of 2026-07-28 (subscriptions/listen).
        self.sessions: dict[int, Any] = {}
        self.listeners = InMemorySubscriptionBus()
        self.level: types.LoggingLevel | None = None
        described = f"MCP server {only}'s" if only is not None else "diana's"
        with warnings.catch_warnings():  # logging/setLevel: older hosts still send it
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server: Server[Any] = ChangingServer(
                "diana",
                version=_version(),
                instructions=(
                    f"{described} tools, resources and prompts. A call that could do harm waits "
                    "for a person to approve it in diana; the request stays open meanwhile, "
                    "with progress."
                ),
                on_list_tools=self.list_tools,
                on_call_tool=self.call_tool,
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
                on_list_prompts=self.list_prompts,
                on_get_prompt=self.get_prompt,
                on_set_logging_level=self.set_logging_level,
                on_subscriptions_listen=ListenHandler(self.listeners),
            )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self.host_initialized
        )
        # A held call as an MCP task, for hosts that have tasks.
        self.tasks = HostTasks(self)

    def origin_of(self, ctx: ServerRequestContext[Any]) -> str:
        named = client_of_request(ctx.request)  # over HTTP, the client its token names
        client = ctx.session.client_params
        given = client.client_info.name if client is not None else None
        return host_origin(named if named is not None else given)

    def exposure_of(self, ctx: ServerRequestContext[Any]) -> Exposure:
        """What settings.json ``serve`` lets this client see, as in force now."""
        return self.core.settings.serve.exposure_for(self.origin_of(ctx).removeprefix(HOST_ORIGIN))

    def owner_of(self, agent: str) -> tuple[str | None, str]:
        """The MCP server whose agent ``agent`` is (None for one of diana's own), and the
        name settings.json chooses it by (the server's, or the agent's)."""
        if agent in self.core.own_agents():
            return None, agent
        for server in self.core.server_configs:
            if agent_id_for(server) == agent:
                return server, server
        server = agent.removeprefix("mcp-")  # a server this process has no config of
        return server, server

    def shows(self, exposure: Exposure, agent: str, *names: str) -> bool:
        """Whether a tool of ``agent`` (under ``names``: diana's, its server's) is shown."""
        server, chosen = self.owner_of(agent)
        shown = exposure.shows_agent(chosen) if server is None else exposure.shows_server(server)
        return shown and not exposure.hides(*names)

    # -- tools ------------------------------------------------------------------------------

    async def exposed_tools(self, exposure: Exposure) -> list[tuple[types.Tool, str]]:
        """Each tool as a host whose choice is ``exposure`` sees it, with the name diana
        calls it by."""
        # Every server has had its first attempt to connect, so a host's first list is whole.
        await self.core.wait_servers_ready()
        definitions = self.core.tool_definitions()
        if self.only is None:
            return [
                (exposed_tool(d), d.name)
                for d, agent in definitions
                if self.shows(exposure, agent, d.name)
            ]
        upstream = self.core.upstream_names(self.only)
        shown = []
        for definition, agent in definitions:
            own = upstream.get(definition.name)
            # The server's tool; diana's own agents are not served.
            if own is not None and self.shows(exposure, agent, definition.name, own):
                said = definition.description.removesuffix(f" (MCP server {self.only})")
                tool = exposed_tool(definition).model_copy(
                    update={"name": own, "description": said}
                )
                shown.append((tool, definition.name))
        return shown

    async def list_tools(
        self, ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        shown = [tool for tool, _name in await self.exposed_tools(self.exposure_of(ctx))]
        if host_has_tasks(ctx):  # any call may wait for a person: it may be a task
            execution = types.ToolExecution(task_support="optional")
            shown = [tool.model_copy(update={"execution": execution}) for tool in shown]
        return types.ListToolsResult(tools=shown)

    async def refuse_unexposed(self, exposure: Exposure, name: str, asked: str) -> None:
        """An MCP error unless the tool diana calls ``name`` (``asked`` by the host) is
        shown to this client: a host may call a name it was not offered, and it never runs."""
        if exposure.hides(name, asked):
            raise self._not_exposed(asked)
        if exposure.servers is None and exposure.agents is None:
            return  # every agent's tool is shown: one diana does not know answers so itself
        agents = dict((d.name, agent) for d, agent in self.core.tool_definitions())
        if name not in agents:  # not listed yet (a gateway beside the app): list them now
            await self.core.wait_servers_ready()
            agents = dict((d.name, agent) for d, agent in self.core.tool_definitions())
        agent = agents.get(name)
        if agent is None or not self.shows(exposure, agent, name, asked):
            raise self._not_exposed(asked)

    def _not_exposed(self, asked: str) -> MCPError:
        self.core.log_event("serve.not_exposed", "warning", tool=asked[:200])
        return mcp_error(f"unknown tool {asked[:200]!r}: diana does not expose it to this client")

    async def start_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> tuple[str, ToolResult] | types.CallToolResult:
        """A host's call through the gate: the name diana ran it by and its result (or the
        proposal it became), or the answer to a name this gateway does not serve."""
        origin = self.origin_of(ctx)
        arguments = dict(params.arguments or {})
        name = params.name
        if self.only is not None:  # the server's own name for it; any other is not served
            by_own = {own: diana for diana, own in self.core.upstream_names(self.only).items()}
            if params.name not in by_own:
                text = f"MCP server {self.only} has no tool {params.name[:200]!r}"
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=text)], is_error=True
                )
            name = by_own[params.name]
        await self.refuse_unexposed(self.exposure_of(ctx), name, params.name)
        return name, await self.core.call_tool(name, arguments, origin=origin)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = await self.start_call(ctx, params)
        if isinstance(started, types.CallToolResult):
            return started
        name, result = started
        if result.error_code is not ErrorCode.PENDING_APPROVAL:
            return tool_result(result)
        origin = self.origin_of(ctx)
        proposal_id = str((result.data or {}).get("proposal_id", ""))
        self.core.log_event("serve.waiting", tool=name, proposal=proposal_id, host=origin)
        return await self._wait(ctx, name, proposal_id, origin)

    # -- resources and prompts: read, never run, so never gated; logged with the host ------

    async def _answer(
        self, kind: str, server: str | None, params: dict[str, Any] | None = None
    ) -> Any:
        def warn(message: str) -> None:
            self.core.log_event("serve.answer_warning", "warning", kind=kind, message=message)

        await self.core.wait_servers_ready()
        found, _app = await self.core.answer(kind, server, params, warn=warn)
        return found

    def _shown_name(self, server: str, name: str) -> str:
        return name if self.only is not None else exposed_name(server, name)

    async def _listed(self, kind: str, exposure: Exposure) -> list[dict[str, Any]]:
        """Every server's resources (RESOURCES) or prompts (PROMPTS), as the core lists them,
        of the servers ``exposure`` shows; a server that could not list them is logged and
        left out."""
        if self.only is not None and not exposure.shows_server(self.only):
            return []
        listing = await self._answer(kind, self.only)
        for problem in listing.problems:
            self.core.log_event("serve.list_failed", "warning", kind=kind, problem=problem)
        return [
            item
            for item in listing.items
            if isinstance(item, dict) and exposure.shows_server(str(item.get("server")))
        ]

    async def list_resources(
        self, ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        listed = await self._listed(RESOURCES, self.exposure_of(ctx))
        shown = shaped(
            [item for item in listed if not item.get("template")],
            lambda item: types.Resource(
                uri=item["uri"],
                name=self._shown_name(item["server"], item["name"]),
                description=item.get("description"),
                mime_type=item.get("mimeType"),
                size=item.get("size"),
            ),
        )
        return types.ListResourcesResult(resources=shown)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        listed = await self._listed(RESOURCES, self.exposure_of(ctx))
        shown = shaped(
            [item for item in listed if item.get("template")],
            lambda item: types.ResourceTemplate(
                uri_template=item["uri"],
                name=self._shown_name(item["server"], item["name"]),
                description=item.get("description"),
                mime_type=item.get("mimeType"),
            ),
        )
        return types.ListResourceTemplatesResult(resource_templates=shown)

    async def _server_of(self, uri: str, exposure: Exposure) -> str:
        """The server that lists ``uri``, or a template it matches (the first that lists it),
        among those ``exposure`` shows."""
        if self.only is not None and exposure.shows_server(self.only):
            return self.only
        listed = await self._listed(RESOURCES, exposure)
        for item in listed:
            if not item.get("template") and item["uri"] == uri:
                return str(item["server"])
        for item in listed:
            if item.get("template") and template_pattern(item["uri"]).match(uri):
                return str(item["server"])
        raise mcp_error(f"no MCP server diana serves lists the resource {uri[:200]!r}")

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        server = await self._server_of(uri, self.exposure_of(ctx))
        origin = self.origin_of(ctx)
        found = await self._answer(READ, server, {"uri": uri})
        self.core.log_event(
            "serve.read", server=server, uri=uri, host=origin, ok=found.contents is not None
        )
        if found.contents is None:
            raise mcp_error(str(found.problem), types.INTERNAL_ERROR)
        contents: list[types.TextResourceContents | types.BlobResourceContents] = []
        for part in found.contents:
            if part.get("blob") is not None:
                contents.append(
                    types.BlobResourceContents(
                        uri=part["uri"], mime_type=part.get("mimeType"), blob=part["blob"]
                    )
                )
            else:
                contents.append(
                    types.TextResourceContents(
                        uri=part["uri"], mime_type=part.get("mimeType"), text=part.get("text", "")
                    )
                )
        return types.ReadResourceResult(contents=contents)

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        shown = shaped(
            await self._listed(PROMPTS, self.exposure_of(ctx)),
            lambda item: types.Prompt(
                name=self._shown_name(item["server"], item["name"]),
                title=item.get("title"),
                description=item.get("description"),
                arguments=[
                    types.PromptArgument(
                        name=a["name"], description=a.get("description"), required=a.get("required")
                    )
                    for a in item.get("arguments") or []
                ],
            ),
        )
        return types.ListPromptsResult(prompts=shown)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        listed = await self._listed(PROMPTS, self.exposure_of(ctx))
        named = {self._shown_name(p["server"], p["name"]): p for p in listed}
        prompt = named.get(params.name)
        if prompt is None:
            raise mcp_error(f"no prompt named {params.name[:200]!r} is served here")
        server, own = str(prompt["server"]), str(prompt["name"])
        origin = self.origin_of(ctx)
        arguments = {"name": own, "arguments": dict(params.arguments or {})}
        found = await self._answer(PROMPT, server, arguments)
        self.core.log_event(
            "serve.prompt", server=server, prompt=own, host=origin, ok=found.messages is not None
        )
        if found.messages is None:
            code = types.INVALID_PARAMS if found.bad_input else types.INTERNAL_ERROR
            raise mcp_error(str(found.problem), code)
        messages = [
            types.PromptMessage(
                role="assistant" if m.get("role") == "assistant" else "user",
                content=types.TextContent(type="text", text=str(m.get("text", ""))),
            )
            for m in found.messages
        ]
        return types.GetPromptResult(description=found.description, messages=messages)

    async def set_logging_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self.level = params.level
        self.core.log_event("serve.log_level", level=params.level, host=self.origin_of(ctx))
        return types.EmptyResult()

    # -- list changes reach every connected host ----------------------------------------

    async def host_initialized(
        self, ctx: ServerRequestContext[Any], _params: types.NotificationParams
    ) -> None:
        self.sessions[id(ctx.session)] = ctx.session
        while len(self.sessions) > SESSIONS_KEPT:
            self.sessions.pop(next(iter(self.sessions)))

    async def follow_changes(self) -> None:
        """Tell every connected host when the tools (or a server's resources and prompts)
        it would list change: a server added, removed, reconnected, or re-listing its tools."""
        subscription = self.core.subscribe()
        try:
            shown: list[dict[str, Any]] = []
            with contextlib.suppress(Exception):  # then the first change is told
                shown = await self._tool_list()
            # The servers whose resources and prompts a host would list: those ready now
            # (an event may be older than what was listed: the state decides, not the event).
            offering = self._offering()
            chosen = self._chosen()
            async for event in subscription:
                if isinstance(event, ConfigChecked) and event.file == SETTINGS_FILE:
                    if self._chosen() != chosen:  # what a client sees may differ: tell all
                        chosen = self._chosen()
                        for what in ("tools", "resources", "prompts"):
                            await self._tell(what)
                    continue
                if not isinstance(event, ToolsChanged | ServerStatusChanged):
                    continue
                try:
                    if isinstance(event, ServerStatusChanged) and self._offering() != offering:
                        offering = self._offering()
                        await self._tell("resources")
                        await self._tell("prompts")
                    now = await self._tool_list()
                    if now != shown:
                        shown = now
                        await self._tell("tools")
                except Exception as exc:  # noted; the next change is told again
                    self.core.log_event("serve.list_changed_failed", "error", error=str(exc))
        finally:
            self.core.unsubscribe(subscription)

    def _chosen(self) -> dict[str, Any]:
        """What settings.json ``serve`` chooses to show, every client's (not how long calls
        wait)."""
        return self.core.settings.serve.model_dump(exclude={"wait"})

    def _offering(self) -> set[str]:
        return {
            name
            for name, connection in self.core.started_connections()
            if connection.ready and self.only in (None, name)
        }

    async def _tool_list(self) -> list[dict[str, Any]]:
        return [
            tool.model_dump(mode="json", exclude_none=True)
            for tool, _name in await self.exposed_tools(Exposure())
        ]

    async def _tell(self, what: str) -> None:
        event: ToolsListChanged | ResourcesListChanged | PromptsListChanged = (
            ToolsListChanged()
            if what == "tools"
            else ResourcesListChanged()
            if what == "resources"
            else PromptsListChanged()
        )
        await self.listeners.publish(event)
        for key, session in list(self.sessions.items()):
            try:
                if what == "tools":
                    await session.send_tool_list_changed()
                elif what == "resources":
                    await session.send_resource_list_changed()
                else:
                    await session.send_prompt_list_changed()
            except Exception:  # a host gone: not told again
                self.sessions.pop(key, None)
        self.core.log_event("serve.list_changed", list=what, hosts=len(self.sessions))

    async def _wait(
        self, ctx: ServerRequestContext[Any], tool: str, proposal_id: str, origin: str
    ) -> types.CallToolResult:
        """Until a person decides ``proposal_id``, ``serve.wait`` passes, or the host stops
        waiting (this task cancelled): then the proposal is withdrawn, and never runs."""
        limit = self.core.settings.serve.wait_for(origin.removeprefix(HOST_ORIGIN))
        loop = asyncio.get_running_loop()
        started = loop.time()
        decided = asyncio.ensure_future(self.core.decided(proposal_id))
        gone = host_gone(ctx.request)
        leaving = asyncio.ensure_future(gone.wait()) if gone is not None else None
        try:
            while not decided.done():
                left = limit - (loop.time() - started)
                if left <= 0:
                    break
                waits = {decided} if leaving is None else {decided, leaving}
                await asyncio.wait(waits, timeout=min(self.keep_alive, left))
                if leaving is not None and leaving.done() and not decided.done():
                    # Over HTTP the host closed its connection: nobody waits for this call.
                    await self._withdraw(proposal_id, HOST_GONE)
                    return types.CallToolResult(
                        content=[types.TextContent(type="text", text=HOST_GONE)], is_error=True
                    )
                if not decided.done():
                    waited = loop.time() - started
                    await ctx.session.report_progress(
                        waited, None, f"waiting for a person to decide proposal {proposal_id}"
                    )
        except BaseException:
            # Cancelled by the host, or the host went away: take the proposal back first.
            stopped = self.serving is not None and self.serving.cancelling() > 0
            with anyio.CancelScope(shield=True):
                await self._withdraw(proposal_id, SERVE_STOPPED if stopped else HOST_GONE)
            raise
        finally:
            if not decided.done():
                decided.cancel()
            if leaving is not None:
                leaving.cancel()
        if not decided.done() or decided.cancelled():
            self.core.log_event("serve.still_waiting", proposal=proposal_id, waited=limit)
            return still_waiting(tool, proposal_id, limit)
        return tool_result(self.core.outcome(decided.result()))

    async def _withdraw(self, proposal_id: str, why: str) -> None:
        try:
            await self.core.withdraw(proposal_id, reason=why)
        except AlreadyDecided:  # a person decided first: their decision stands
            return
        except Exception as exc:  # noted; the proposal is still for a person to decide
            self.core.log_event(
                "serve.withdraw_failed", "error", proposal=proposal_id, error=str(exc)
            )
            return
        self.core.log_event("serve.withdrawn", proposal=proposal_id)

    async def run(
        self, read_stream: Any, write_stream: Any, too_long: dict[str, int] | None = None
    ) -> None:
        await self.server.run(
            AnsweringUnreadable(read_stream, write_stream, too_long),
            write_stream,
            self.server.create_initialization_options(),
        )


# The request id near the start of a line the SDK could not read (nested too deep, ...).
REQUEST_ID = re.compile(rb'^\s*\{[^{}]{0,200}?"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,200}")')


class AnsweringUnreadable:
    """The host's messages as the server reads them, but a line that cannot be read as
    JSON-RPC (the SDK hands it over as an exception, and answers nothing) is answered here
    with a parse error, carrying the request's id when it can be found, so the host is not
    left waiting for an answer that never comes."""

    def __init__(
        self, inner: Any, write_stream: Any, too_long: dict[str, int] | None = None
    ) -> None:
        self._inner = inner
        self._write = write_stream
        # Lines stdin put in place of messages past MESSAGE_LIMIT: their full sizes.
        self._too_long = too_long if too_long is not None else {}

    def __getattr__(self, name: str) -> Any:  # last_context, close, aclose, ...
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    def __aiter__(self) -> AnsweringUnreadable:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def _answer(self, error: Exception) -> None:
        from mcp.shared.message import SessionMessage
        from pydantic import ValidationError

        line, why = "", str(error)
        if isinstance(error, ValidationError) and error.errors():
            first = error.errors()[0]
            line, why = str(first.get("input", "")), first.get("msg", why)
        found = REQUEST_ID.match(line[:1000].encode("utf-8", "replace"))
        request_id: int | str | None = None
        if found is not None:
            request_id = json.loads(found.group(1))
        message = f"parse error: the message could not be read: {why}"[:300]
        size = self._too_long.pop(line, None)
        if size is not None:
            message = (
                f"the message is larger than the {MESSAGE_LIMIT >> 20} MiB limit on one "
                f"message from a host (it was {size:,} bytes): it was not read"
            )
        reply = types.JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=types.ErrorData(code=types.PARSE_ERROR, message=message),
        )
        await self._write.send(SessionMessage(reply))


def _version() -> str:
    from diana.tui.cli.version import version_text

    return version_text().removeprefix("diana ")


# Lines from the host held at once before the gateway stops reading its stdin.
LINES_QUEUED = 16


class StdinLines:
    """The host's lines on stdin. A pipe (how hosts start a server) is read by the event loop
    itself, no thread hop per message; anything else (a file, a terminal) by a daemon thread
    of this gateway's own. Either way a `diana serve` told to stop (SIGTERM, Ctrl-C) is not
    held up by a read that waits for the host (the SDK's own reader cannot be cancelled),
    and a line past MESSAGE_LIMIT is never held whole. Meanwhile fd 0 points at the null
    device, so nothing diana starts reads the host's messages."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.too_long: dict[str, int] = {}  # what was sent for each line past the limit
        self._wire = os.dup(0)
        os.set_inheritable(self._wire, False)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        self._transport: asyncio.ReadTransport | None = None
        self._splitter = MessageSplitter(MESSAGE_LIMIT)
        self._ended = False  # the host's stdin ended (or the end was read)

    async def start(self) -> StdinLines:
        """Read the host's stdin from now on: on the event loop when it is a pipe."""
        if _is_pipe(self._wire):
            pipe = os.fdopen(os.dup(self._wire), "rb", buffering=0)
            try:
                self._transport, _ = await self._loop.connect_read_pipe(
                    lambda: self._Reader(self), pipe
                )
                return self
            except (OSError, ValueError):
                pipe.close()
        # A file or a terminal: a thread reads it, a bounded queue making it wait.
        self._lines = asyncio.Queue(maxsize=LINES_QUEUED)
        threading.Thread(target=self._read, name="serve-stdin", daemon=True).start()
        return self

    class _Reader(asyncio.Protocol):
        def __init__(self, owner: StdinLines) -> None:
            self.owner = owner

        def data_received(self, data: bytes) -> None:
            self.owner._received(data)

        def eof_received(self) -> bool:
            self.owner._end()
            return False

        def connection_lost(self, exc: Exception | None) -> None:
            self.owner._end()

    def _received(self, data: bytes) -> None:
        if self._ended:  # after the end: nothing more is read
            return
        for line in self._splitter.feed(data):
            self._lines.put_nowait(self._shown(line))
        if self._lines.qsize() >= LINES_QUEUED and self._transport is not None:
            self._transport.pause_reading()  # the host waits until the gateway catches up

    def _end(self) -> None:
        if self._ended:  # told already
            return
        self._ended = True
        if (last := self._splitter.rest()) is not None:
            self._lines.put_nowait(self._shown(last))
        self._lines.put_nowait(None)

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the loop closed: nobody reads any more
            while chunk := os.read(self._wire, READ_CHUNK):
                for line in self._splitter.feed(chunk):
                    self._put(self._shown(line))
            if (last := self._splitter.rest()) is not None:
                self._put(self._shown(last))
            self._put(None)

    def _put(self, line: str | None) -> None:
        asyncio.run_coroutine_threadsafe(self._lines.put(line), self._loop).result()

    def _shown(self, line: str | Oversized) -> str:
        if isinstance(line, Oversized):
            # Its start, made unreadable (a NUL after it), so the request it names is
            # answered with an error (AnsweringUnreadable), told by too_long what it was.
            start = line.head.decode("utf-8", "replace") + "\0"
            self.too_long[start] = line.size
            return start
        return line

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.get()
        if self._transport is not None and self._lines.qsize() < LINES_QUEUED // 2:
            self._transport.resume_reading()
        if line is None:
            raise StopAsyncIteration
        return line

    def restore(self) -> None:
        """fd 0 is the host's stdin again (the reading thread may still hold its copy)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        with contextlib.suppress(OSError):
            os.dup2(self._wire, 0)
            os.set_blocking(0, True)


class StdoutPipe:
    """The host's stdout, when it is a pipe: written by the event loop itself (the SDK's
    own writer takes two thread hops per message), with the pipe's back-pressure. Meanwhile
    fd 1 points at stderr, so only MCP JSON-RPC reaches the host."""

    def __init__(self, wire: int, writer: asyncio.StreamWriter) -> None:
        self._wire = wire
        self._writer = writer

    @classmethod
    async def open(cls) -> StdoutPipe | None:
        """None when stdout is not a pipe (a file, a terminal): the SDK writes it then."""
        loop = asyncio.get_running_loop()
        if not _is_pipe(1):
            return None
        wire = os.dup(1)
        os.set_inheritable(wire, False)
        pipe = os.fdopen(os.dup(wire), "wb", buffering=0)
        try:
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, pipe
            )
        except (OSError, ValueError):
            pipe.close()
            os.close(wire)
            return None
        os.dup2(2, 1)
        return cls(wire, asyncio.StreamWriter(transport, protocol, None, loop))

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()

    async def close(self) -> None:
        """What is written reaches the pipe, and fd 1 is the host's stdout again."""
        with contextlib.suppress(Exception):  # the host gone: nothing more to tell it
            async with asyncio.timeout(5):
                await self._writer.drain()
        self._writer.close()
        with contextlib.suppress(OSError):
            os.dup2(self._wire, 1)
            os.set_blocking(1, True)
        os.close(self._wire)


def _is_pipe(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket, which the event loop can wait on."""
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def serve_stdio(
    core: Core, *, keep_alive: float = KEEP_ALIVE, only: str | None = None
) -> int:
    """Serve MCP on stdin and stdout until the host closes stdin. While it serves, whatever
    else writes to stdout lands on stderr (the SDK points fd 1 there), so only MCP JSON-RPC
    reaches the host."""
    gateway = Gateway(core, keep_alive=keep_alive, only=only)
    gateway.serving = asyncio.current_task()
    core.log_event("serve.started", transport="stdio", only=only)
    stdin = await StdinLines().start()
    stdout = await StdoutPipe.open()
    following = asyncio.create_task(gateway.follow_changes(), name="serve-list-changes")
    try:
        async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
            await gateway.run(read_stream, write_stream, stdin.too_long)
    finally:
        following.cancel()
        with contextlib.suppress(BaseException):
            await following
        if stdout is not None:
            await stdout.close()
        stdin.restore()
    core.log_event("serve.stopped", transport="stdio")
    return 0
