"""The MCP manager: every configured server, as agents of the orchestrator, kept in step with
mcp-servers.json while the program runs.

The app connects every server at start. A `diana` command runs its servers on demand: a
server whose tools the tool cache holds fresh is registered with those and started by the
first call that runs on it; any other is started only when asked for (``wait_ready`` naming
it). Every tool list a connected server gives is written to the cache."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..approvals.sampling_gate import Sampling
from ..calls.orchestrator import Orchestrator
from ..config.mcp_servers import (
    BACKOFF_START,
    HEALTH_INTERVAL,
    MCP_SERVERS_FILE,
    MCPServerConfig,
    agent_id_for,
    could_serve,
    launch_identity,
    load_servers,
    unknown_server_text,
)
from ..config.settings import ConfigError
from ..config.watch import Stamp, file_stamp, stop_task
from ..events import EventBus, Notice, ServerStatusChanged
from ..llm.sampling import SamplingRequest
from ..models import ErrorCode, ToolDefinition, ToolResult
from ..system.clock import Clock, SystemClock
from ..system.files import MEDIA_DIR, MediaFiles
from ..system.telemetry import StructuredLog, redact
from ..usage.cost import CostLedger
from .elicitation_form import Answer, Elicitation, Elicitations
from .info import ServerInfo, ServerStatus, ServerTool
from .server_agent import MCPAgent
from .tool_cache import CachedTools, ToolCache, age_text

if TYPE_CHECKING:
    from .connection import ServerConnection
    from .pins import ToolPins
    from .state import ServerState

RELOAD_POLL = 1.0
LOGS_SHOWN = 100  # the server's latest log messages in its diagnostics


class MCPManager:
    def __init__(
        self,
        orchestrator: Orchestrator,
        config_file: Callable[[], Path],
        *,
        bus: EventBus | None = None,
        log: StructuredLog | None = None,
        clock: Clock | None = None,
        backoff_start: float = BACKOFF_START,
        cost: CostLedger | None = None,
        health_interval: float = HEALTH_INTERVAL,
        cache: ToolCache | None = None,
        elicitations: Elicitations | None = None,
        sampling: Sampling | None = None,
        data_dir: Path | None = None,
        pins: ToolPins | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self._pins = pins  # each tool's definition as first offered (core/mcp/pins.py)
        self._backoff_start = backoff_start
        self._cost = cost  # servers' background work is their cost
        self._health_interval = health_interval
        self._config_file = config_file  # looked up each time: the user may create it later
        self.bus = bus or orchestrator.bus
        self._log = log
        self._clock = clock or SystemClock()
        self.configs: dict[str, MCPServerConfig] = {}  # every enabled server, in order
        self.disabled: dict[str, MCPServerConfig] = {}  # switched off: listed, never started
        self._order: list[str] = []  # every server's name, as mcp-servers.json lists them
        self._reloading = asyncio.Lock()  # the watcher and a switch in the app may both ask
        self.connections: dict[str, ServerConnection] = {}  # those started, in the same order
        self._agents: dict[str, MCPAgent] = {}  # those registered with the orchestrator
        self._cache = cache
        self.elicitations = elicitations or Elicitations(log)
        self._sampling = sampling  # none: servers are not offered sampling
        self._data_dir = data_dir  # where HTTP servers' OAuth tokens are kept
        # Images and binaries in tool results, kept as files to open.
        self._media = MediaFiles(data_dir / MEDIA_DIR) if data_dir is not None else None
        self._on_demand = False
        self._only: str | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._seen_stamp: Stamp = None

    # -- start, stop, reload ----------------------------------------------------------------

    def load(self) -> list[MCPServerConfig]:
        """Read and validate the config (disabled servers too); raises ConfigError and starts
        nothing if it is bad."""
        self._seen_stamp = self._stamp()
        return load_servers(self._config_file())

    async def start(
        self,
        servers: list[MCPServerConfig],
        *,
        watch: bool = False,
        on_demand: bool = False,
        only: str | None = None,
    ) -> None:
        """Register and connect every server concurrently; connecting goes on in the
        background (``wait_ready`` waits for the first attempts). ``on_demand``: start none
        of them yet (see the module's text). ``only``: the one server this manager knows,
        whatever else the config file lists, now or after an edit."""
        self._on_demand = on_demand
        self._only = only
        self._order = [config.name for config in servers]
        for config in servers:
            if config.disabled:
                self.disabled[config.name] = config
            else:
                await self._add(config)
        if watch:
            self._watcher = asyncio.create_task(self._watch_config(), name="mcp-config-watch")

    @property
    def watching(self) -> bool:
        """Whether edits of mcp-servers.json are applied by this manager's own watcher."""
        return self._watcher is not None

    async def wait_ready(self, names: list[str] | None = None) -> None:
        """Wait until each named server (all, by default) has made its first attempt. On
        demand, a named server with no fresh cache entry is started now; one known from the
        cache is left for its first call."""
        chosen = [n for n in self.configs if names is None or n in names]
        for name in chosen:
            if name not in self._agents:
                await self._register(self.configs[name], cached=None)
        waits = [c.wait_first_attempt() for n, c in self.connections.items() if n in chosen]
        await asyncio.gather(*waits)

    async def wait_reconnected(self, names: list[str]) -> None:
        """After ``reconnect``: wait until each named server has finished its new attempt."""
        await asyncio.gather(*(self.connections[n].wait_attempt_after_reconnect() for n in names))

    def identity_of(self, name: str) -> str | None:
        """The launch identity of the program server ``name`` runs (None: not configured, or
        switched off): what policy rules and proposals for its tools are bound to."""
        config = self.configs.get(name)
        return None if config is None else launch_identity(config)

    def upstream_names(self, name: str) -> dict[str, str]:
        """The server's tools as it names them, by the name diana exposes each under."""
        agent = self._agents.get(name)
        return dict(agent.upstream_names) if agent is not None else {}

    def connection_of(self, name: str) -> ServerConnection | None:
        """The server's connection if it was started; None if not (unknown, disabled, or on
        demand and not needed yet)."""
        return self.connections.get(name)

    def started_connections(self) -> list[tuple[str, ServerConnection]]:
        """Each started server's name and connection, in the order they started."""
        return list(self.connections.items())

    def state_of(self, name: str) -> ServerState:
        """A started server's state now; KeyError for one that was not started."""
        return self.connections[name].state

    async def connected(self, name: str) -> ServerConnection:
        """The server's connection once its first attempt is made, started now if it was
        not (on demand). KeyError for a name that is not configured."""
        if name not in self.configs:
            raise KeyError(name)
        await self.wait_ready([name])
        connection = self.connections.get(name)
        if connection is None:  # known from the cache, waiting for a call
            connection = self._connect(name)
            await connection.wait_first_attempt()
        return connection

    def cached_at(self, name: str) -> datetime | None:
        """When the tools of a server not started yet were listed (from the tool cache);
        None for a started server, or one not known from the cache."""
        agent = self._agents.get(name)
        if name in self.connections or agent is None or agent.cached is None:
            return None
        return agent.cached.refreshed_at

    def servers_for_tool(self, tool_name: str, servers: Iterable[str] | None = None) -> list[str]:
        """The enabled servers (or ``servers``) whose tools could carry this name (by their
        `{server}_` prefix)."""
        names = self.configs if servers is None else servers
        return [n for n in names if could_serve(n, tool_name)]

    def not_configured(self, name: str) -> str:
        """Why a server name cannot be used: it is disabled, or not in mcp-servers.json."""
        if name in self.disabled:
            return f"MCP server {name} is disabled; `diana servers enable {name}` turns it on"
        return unknown_server_text(name, self.configs)

    def missing_tool(self, tool_name: str) -> tuple[ToolResult, str | None] | None:
        """A tool of a server that is not connected is unavailable, not unknown; one its
        cached list lacks is unknown, and the message says how old that list is. A
        disabled server's tool is unavailable, and the message says how to switch it on.
        With the result, the agent of the server it would come from."""
        for name in self.servers_for_tool(tool_name, self.disabled):
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{tool_name} would come from MCP server {name}, which is disabled "
                f"(`diana servers enable {name}`, or e in the MCP Servers pane)",
            ), agent_id_for(name)
        for name in self.servers_for_tool(tool_name):
            agent, connection = self._agents.get(name), self.connections.get(name)
            if connection is None and agent is not None and agent.cached is None:
                self._connect(name)  # autoStart false, and a call needs it: started now
                return ToolResult.fail(
                    ErrorCode.AGENT_UNAVAILABLE,
                    f"{tool_name} would come from MCP server {name}, which starts when first "
                    "needed (autoStart: false): it is starting now; its tools are offered "
                    "once it is ready",
                ), agent_id_for(name)
            if connection is None and agent is not None and agent.cached is not None:
                listed = age_text(self._clock.now() - agent.cached.refreshed_at)
                return self.orchestrator.unknown_tool(
                    tool_name, f"MCP server {name}'s tools as listed {listed}"
                ), None
            if connection is not None and not connection.ready:
                return ToolResult.fail(
                    ErrorCode.AGENT_UNAVAILABLE,
                    f"{tool_name} would come from MCP server {name}, which is not ready "
                    f"({connection.state.status.value}): {connection.unavailable_reason()}",
                ), agent_id_for(name)
        return None

    async def close(self) -> None:
        await stop_task(self._watcher)
        self._watcher = None
        await asyncio.gather(*(c.stop() for c in self.connections.values()))

    async def reload(self) -> bool:
        """Apply the config file as it is now: start added and enabled servers, stop removed
        and disabled ones, restart changed ones. A bad file changes nothing and is reported."""
        async with self._reloading:
            return await self._reload()

    async def _reload(self) -> bool:
        try:
            servers = self.load()
        except ConfigError as exc:
            self._emit("mcp.config_rejected", "error", error=str(exc))
            self.bus.config_checked(MCP_SERVERS_FILE, exc.message)
            return False
        if self._only is not None:
            servers = [server for server in servers if server.name == self._only]
        self.bus.config_checked(MCP_SERVERS_FILE)
        wanted = {s.name: s for s in servers if not s.disabled}
        was_disabled, self.disabled = self.disabled, {s.name: s for s in servers if s.disabled}
        self._order = [s.name for s in servers]
        switched_off = [n for n in self.configs if n in self.disabled]
        switched_on = [n for n in wanted if n in was_disabled]
        removed = [n for n in self.configs if n not in wanted]
        changed = [n for n, s in wanted.items() if n in self.configs and self.configs[n] != s]
        rooted = [n for n in changed if self.configs[n].same_but_roots(wanted[n])]
        changed = [n for n in changed if n not in rooted]
        added = [n for n in wanted if n not in self.configs]
        for name in rooted:  # told to the server; no restart
            await self._new_roots(wanted[name])
        for name in removed + changed:
            await self._remove(name)
        for name in changed + added:
            await self._add(wanted[name])
        # Listed in the file's order, a restarted server in its place.
        self.configs = {name: self.configs[name] for name in wanted}
        self.connections = {n: self.connections[n] for n in wanted if n in self.connections}
        if rooted:
            self._emit("mcp.roots_changed", "info", servers=rooted)
        for name in switched_off:  # no connection says so: it has none now
            self.bus.publish(ServerStatusChanged(name, ServerStatus.DISABLED, None, 0))
        if removed or changed or added:
            self._emit("mcp.config_applied", "info", added=added, removed=removed, changed=changed)
            changes = {
                "enabled": switched_on,
                "added": [n for n in added if n not in switched_on],
                "disabled": switched_off,
                "removed": [n for n in removed if n not in switched_off],
                "restarted": changed,
            }
            self.bus.publish(Notice("information", _describe_reload(changes)))
        return True

    async def reconnect(self, name: str | None = None) -> list[str]:
        """Reconnect one server, or all: backoff reset, connect now."""
        names = list(self.configs) if name is None else [name]
        for server in names:
            if server not in self.configs:
                raise KeyError(server)
        for server in names:
            self._emit("mcp.reconnect_requested", "info", server=server)
            (await self._connection(server)).reconnect()
        return names

    async def relist_tools(self) -> dict[str, str]:
        """List every ready server's tools again, now (the tool cache is written anew, changed
        or not); why each server's listing failed, by name."""
        from .failures import ServerDown

        async def relist(connection: ServerConnection) -> str | None:
            try:
                await connection.relist_tools()
            except ServerDown as exc:
                return str(exc)
            await self._save_cache(connection)
            return None

        ready = [c for c in self.connections.values() if c.ready]
        failures = await asyncio.gather(*(relist(c) for c in ready))
        return {c.name: why for c, why in zip(ready, failures, strict=True) if why is not None}

    async def sign_in(
        self, name: str, show_url: Callable[[str], None] | None = None
    ) -> ServerConnection:
        """Connect the server now, letting its OAuth open a browser for a person to sign in
        (KeyError for an unknown name). ``wait_attempt_after_reconnect`` waits for the end."""
        if name not in self.configs:
            raise KeyError(name)
        self._emit("mcp.sign_in_requested", "info", server=name)
        connection = await self._connection(name)
        connection.sign_in(show_url)
        return connection

    async def _connection(self, name: str) -> ServerConnection:
        """The server's connection; one on demand and not started is made (not started)."""
        connection = self.connections.get(name)
        if connection is None:
            if name not in self._agents:
                await self._register(self.configs[name], cached=None, connect=False)
            connection = self._connect(name, start=False)
        return connection

    # -- diagnostics --------------------------------------------------------------------------

    def diagnostics(self, name: str) -> ServerInfo:
        """One started or disabled server, as the app and `diana servers` show it."""
        from .state import ServerState  # with the SDK: a disabled server has no state

        if name in self.disabled:
            config = self.disabled[name]
            return self._described(
                config, ServerState(), ServerStatus.DISABLED, agent_id_for(name), False
            )
        if name not in self.connections:  # autoStart false, not needed yet
            return self._described(
                self.configs[name],
                ServerState(),
                ServerStatus.NOT_STARTED,
                agent_id_for(name),
                False,
            )
        connection = self.connections[name]
        agent = self._agents[name]
        agent.get_manifest()  # brings by_server_tool up to date
        answered = {
            definition.name
            for definition in agent.by_server_tool.values()
            if self.orchestrator.owner(definition.name) == agent.agent_id
        }
        tools = [
            ServerTool(
                server_tool=tool.name,
                name=definition.name if definition else None,
                description=tool.description,
                annotations=(
                    definition.annotations.model_dump(by_alias=True, exclude_none=True)
                    if definition
                    else {}
                ),
                risk=definition.risk.value if definition else None,
            )
            for tool in connection.state.tools
            # A tool refused (its name taken, or offered by another server too) is shown so.
            for listed in [agent.by_server_tool.get(tool.name)]
            for definition in [listed if listed and listed.name in answered else None]
        ]
        return self._described(
            connection.config,
            connection.state,
            connection.state.status,
            agent.agent_id,
            connection.signing_in,
            tools,
        )

    def _described(
        self,
        config: MCPServerConfig,
        state: ServerState,
        status: ServerStatus,
        agent_id: str,
        signing_in: bool,
        tools: list[ServerTool] | None = None,
    ) -> ServerInfo:
        retry_in = (
            None
            if state.next_retry_at is None
            else round(max(0.0, state.next_retry_at - time.monotonic()), 1)
        )
        return ServerInfo(
            **config.public(),
            status=status,
            agent=agent_id,
            tool_count=len(state.tools),
            last_error=redact(state.last_error),  # a server's error may quote a token
            last_error_at=state.last_error_at,
            pid=state.pid,
            exit_code=state.exit.code if state.exit else None,
            exit_signal=state.exit.describe() if state.exit and state.exit.signal else None,
            stderr_tail=list(state.stderr),
            connect_latency_ms=(
                None if state.connect_latency_ms is None else round(state.connect_latency_ms, 1)
            ),
            protocol_version=state.protocol_version,
            calls=state.calls,
            errors=state.errors,
            attempts=state.attempts,
            retry_in_s=retry_in,
            retry_delay_s=state.retry_delay,
            sign_in_needed=state.sign_in_needed,
            more_scope=state.more_scope,
            sign_in_url=state.sign_in_url,
            signing_in=signing_in,
            roots=[uri for uri, _name in config.root_uris()],
            log_level=config.log_level,
            logs=list(state.logs)[-LOGS_SHOWN:],
            tools=tools or [],
        )

    def all_diagnostics(self) -> list[ServerInfo]:
        """Every started server and every disabled one, in mcp-servers.json's order."""
        shown = [
            n
            for n in self._order
            if n in self.connections or n in self.disabled or self._waits_to_start(n)
        ]
        shown += [n for n in self.connections if n not in shown]
        return [self.diagnostics(name) for name in shown]

    def _waits_to_start(self, name: str) -> bool:
        """Whether a server with autoStart false is listed, not started yet."""
        config = self.configs.get(name)
        return config is not None and not config.auto_start and name in self._agents

    # -- internals ----------------------------------------------------------------------------

    async def _add(self, config: MCPServerConfig) -> None:
        self.configs[config.name] = config
        if not self._on_demand and config.auto_start:
            await self._register(config, cached=None)
            return
        cached = await self._cache.fresh(config) if self._cache is not None else None
        if cached is not None:  # else it waits until asked for
            await self._register(config, cached=cached)
        elif not self._on_demand:
            # autoStart false: listed, with no tools until a call naming it or a key starts it.
            await self._register(config, cached=None, connect=False)

    async def _register(
        self, config: MCPServerConfig, *, cached: CachedTools | None, connect: bool = True
    ) -> None:
        """The server as an agent of the orchestrator: connected now, or (with its cached
        tools) by the first call that runs on it."""
        agent = MCPAgent(
            config,
            cached=cached,
            connect=lambda: self._connect(config.name),
            clock=self._clock,
            on_progress=self.orchestrator.report_progress,
            media=self._media,
            pins=self._pins,
        )
        if self._cost is not None:
            self._cost.track_server(config.name, agent.agent_id)
        self._agents[config.name] = agent
        self.orchestrator.register_agent_factory(agent.agent_id, lambda: agent, server=config.name)
        await self.orchestrator.start_agent(agent.agent_id)
        if cached is None and connect:
            self._connect(config.name)

    def _connect(self, name: str, *, start: bool = True) -> ServerConnection:
        # The MCP SDK is imported by the first server this process starts.
        from .connection import ServerConnection

        connection = ServerConnection(
            self.configs[name],
            clock=self._clock,
            log=self._log,
            on_change=self._status_changed,
            on_tools=self._tools_changed,
            backoff_start=self._backoff_start,
            health_interval=self._health_interval,
            on_work=self._server_work,
            on_elicit=self._elicit_for(self.configs[name]),
            on_sample=self._sample_for(name),
            data_dir=self._data_dir,
        )
        self.connections[name] = connection
        self._agents[name].connection = connection
        if start:
            connection.start()
        return connection

    def _elicit_for(self, config: MCPServerConfig) -> Callable[[Elicitation], Awaitable[Answer]]:
        """A person has as long to answer as a call to the server may take."""
        limit = config.answer_time

        waiting = self.orchestrator.person_waits.waiting

        async def ask(request: Elicitation) -> Answer:
            with waiting(agent_id_for(config.name)):
                return await self.elicitations.ask(request, limit)

        return ask

    def _sample_for(self, name: str) -> Callable[[dict[str, Any]], Awaitable[ToolResult]] | None:
        """A person has as long to decide as a call to the server may take."""
        sampling = self._sampling
        if sampling is None:
            return None

        waiting = self.orchestrator.person_waits.waiting

        async def ask(arguments: dict[str, Any]) -> ToolResult:
            limit = self.configs[name].answer_time
            # A person decides, then the model writes: the server is charged for the model's
            # time as its sampling work, so its call is not charged for any of it again.
            with waiting(agent_id_for(name)):
                return await sampling.ask(SamplingRequest(arguments), limit)

        return ask

    async def _new_roots(self, config: MCPServerConfig) -> None:
        self.configs[config.name] = config
        agent = self._agents.get(config.name)
        if agent is not None:
            agent.config = config
        connection = self.connections.get(config.name)
        if connection is not None:
            await connection.roots_changed(config)

    async def _remove(self, name: str) -> None:
        del self.configs[name]
        connection = self.connections.pop(name, None)
        agent = self._agents.pop(name, None)
        if connection is not None:
            await connection.stop()
        if agent is not None:
            await self.orchestrator.remove_agent(agent.agent_id)

    def _server_work(self, connection: ServerConnection, kind: str, seconds: float) -> None:
        if self._cost is not None:
            self._cost.server_work(connection.name, kind, seconds)

    def _status_changed(self, connection: ServerConnection) -> None:
        state = connection.state
        self.bus.publish(
            ServerStatusChanged(
                connection.name, state.status.value, redact(state.last_error), len(state.tools)
            )
        )

    async def _tools_changed(self, connection: ServerConnection) -> None:
        agent = self._agents.get(connection.name)
        if agent is None:
            return
        registered = self.orchestrator.refresh_tools(agent.agent_id)
        for problem in agent.rejected:
            self.bus.publish(Notice("warning", f"MCP server {connection.name}: tool {problem}"))
        self._emit("mcp.tools_registered", "info", server=connection.name, tools=len(registered))
        self._status_changed(connection)
        listed = list(agent.by_server_tool.values()) if connection.ready else []
        await self._save_cache(connection)
        await self._pin(connection, listed)

    async def _pin(self, connection: ServerConnection, listed: list[ToolDefinition]) -> None:
        """Each tool the server listed is pinned the first time; a changed one is held (a
        call of a tool not pinned here, the process closing first, pins it itself)."""
        if self._pins is None or not listed:
            return
        try:
            held = await self._pins.record(
                connection.name, launch_identity(connection.config), listed
            )
        except Exception as exc:  # the check at each call still holds what changed
            self._emit("tool_pins.record_failed", "error", server=connection.name, error=str(exc))
            return
        if held:
            self.bus.publish(
                Notice(
                    "warning",
                    f"MCP server {connection.name} changed the definition of "
                    f"{', '.join(held)}: held until accepted (diana tools changes)",
                )
            )

    async def _save_cache(self, connection: ServerConnection) -> None:
        agent = self._agents.get(connection.name)
        if self._cache is not None and agent is not None and connection.ready:
            # What the server offers, its tools refused for a name another server offers
            # too included: the next command settles names anew among the servers it has.
            offered = set(self.orchestrator.offered(agent.agent_id))
            listed = [(o, d) for o, d in agent.by_server_tool.items() if d.name in offered]
            await self._cache.save(connection.config, listed)

    async def _watch_config(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_POLL)
            stamp = self._stamp()
            if stamp != self._seen_stamp:
                self._seen_stamp = stamp
                try:
                    await self.reload()
                except Exception as exc:  # keep watching: the next edit may fix it
                    self._emit("mcp.reload_failed", "error", error=f"{type(exc).__name__}: {exc}")
                    self.bus.config_checked(MCP_SERVERS_FILE, str(exc))

    def _stamp(self) -> Stamp:
        try:
            return file_stamp(self._config_file())
        except OSError:
            return None

    def _emit(self, event: str, level: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)


def _describe_reload(changes: dict[str, list[str]]) -> str:
    parts = [f"{verb} {', '.join(names)}" for verb, names in changes.items() if names]
    return "MCP servers: " + "; ".join(parts)


__all__ = ["MCPManager", "agent_id_for"]
