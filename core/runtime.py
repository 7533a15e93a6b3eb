"""The Runtime: one object, built from config, that owns the core a front end opened.

It is opened with a profile (core/profiles.py) naming the parts it opens: the app opens
everything; a `diana` command that reads opens the database and what it reads; one that
calls a tool opens the agents, and MCP servers as they are needed. Each part is made by one
builder (core/builders.py) that imports what it needs, so a command does not pay for
importing what it does not open (the MCP SDK, the ollama client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import builders
from .calls.tracing import protocol as tracing_protocol
from .config.mcp_servers import (
    BACKOFF_START,
    HEALTH_INTERVAL,
    MCP_SERVERS_FILE,
    MCPServerConfig,
    Switches,
    agent_id_for,
    load_servers,
    load_servers_file,
    switches,
)
from .config.settings import (
    LIVE_SETTINGS,
    SETTINGS_FILE,
    ConfigError,
    Paths,
    Settings,
    changed_settings,
    load_settings,
)
from .events import EventBus, Notice
from .mcp.tokens import remember_kept_tokens
from .ports import Ports
from .profiles import Profile
from .storage.db import Database, StorageError, released_on_failure
from .system import processes
from .system.clock import Clock, SystemClock
from .system.files import make_private
from .system.lifecycle import Closing
from .system.telemetry import StructuredLog, new_correlation_id

if TYPE_CHECKING:
    from .approvals.sampling_gate import Sampling
    from .approvals.service import Approvals, Decision
    from .calls.orchestrator import Orchestrator
    from .calls.tracing import Tracing
    from .chat.chats import Chats
    from .chat.session import ChatSession
    from .mcp.elicitation_form import Elicitations
    from .mcp.manager import MCPManager
    from .mcp.registry import RegistryClient
    from .mcp.subagent import MCPSubagent
    from .mcp.tool_cache import ToolCache
    from .memory import Memory
    from .models import ToolDefinition, ToolResult
    from .shared.live import LiveApp, Warn
    from .shared.sharing import Sharing
    from .storage.call_record import CallRecord
    from .storage.execution_log import CallsFromElsewhere, ExecutionLog
    from .tools.human import HumanInput
    from .tools.local import LocalTools
    from .usage.cost import CostLedger

__all__ = ["NO_PORTS", "NotOpened", "Profile", "Runtime"]


def _definitions(rows: list[dict[str, Any]], log: StructuredLog) -> list[tuple[Any, str]]:
    """The tools an app listed, as definitions; a row that is not one is left out, named."""
    from pydantic import ValidationError

    from .models import ToolAnnotations, ToolDefinition

    found = []
    for row in rows:
        try:
            definition = ToolDefinition(
                name=row["name"],
                description=row["description"],
                parameters=row["parameters"],
                category=row.get("category"),
                annotations=ToolAnnotations.model_validate(row.get("annotations") or {}),
                risk=row["risk"],
            )
            found.append((definition, str(row["agent"])))
        except (KeyError, TypeError, ValidationError) as exc:
            log.emit("runtime.app_tool_unread", "warning", error=str(exc)[:300])
    return found


def _refusal(refused: Any, proposal: Any) -> Exception:
    """The approvals error the app refused with, as it would be raised here."""
    from .approvals import proposal as proposals

    kind = getattr(proposals, refused.why, None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        return RuntimeError(str(refused))
    error = kind.__new__(kind)
    Exception.__init__(error, str(refused))
    error.proposal = proposal  # type: ignore[attr-defined]
    return error


NO_PORTS = Ports()  # a runtime no person is in front of
_UNTOLD = object()  # a setting not told of yet


class NotOpened(RuntimeError):
    """A part the runtime's profile does not open was asked for: a front end's mistake."""


@dataclass
class Runtime:
    profile: Profile  # the parts it opened
    paths: Paths
    settings: Settings
    clock: Clock
    bus: EventBus
    db: Database
    log: StructuredLog
    approvals: Approvals  # the proposals, the policy, and (with agents) the gate
    tracing: Tracing | None  # None: tracing is off, or not opened
    # What opening found and put right, for a person to be told (a front end shows them).
    notices: list[str]
    switched: Switches  # mcp-servers.json's file-wide switches, as read at open
    _execution_log: ExecutionLog | None = field(repr=False)
    _cost: CostLedger | None = field(repr=False)
    _memory: Memory | None = field(repr=False)
    _agents: builders.Agents | None = field(repr=False)
    _new_id: Callable[[], str] = field(repr=False)
    _closing: Closing = field(repr=False)
    watchers: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    # Settings changed in settings.json that wait for a restart, and the value told of.
    _restart_told: dict[str, object] = field(init=False, default_factory=dict, repr=False)
    _chat: ChatSession | None = field(init=False, default=None, repr=False)  # made when used
    _sharing: Sharing | None = field(init=False, default=None, repr=False)
    # The diana-tui a gateway found running when it opened: the gateway starts no MCP server
    # of its own, and its calls and tool list are the app's (core/shared/app_requests.py).
    through: LiveApp | None = field(init=False, default=None)
    # The app's tools as last listed, for a runtime ``through`` an app.
    _app_tools: list[tuple[ToolDefinition, str]] = field(
        init=False, default_factory=list, repr=False
    )

    @classmethod
    async def open(
        cls,
        profile: Profile,
        config_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        *,
        clock: Clock | None = None,
        new_id: Callable[[], str] = new_correlation_id,
        mcp_backoff_start: float = BACKOFF_START,
        mcp_health_interval: float = HEALTH_INTERVAL,
        proposal_ids: Callable[[], str] | None = None,
        request_ids: Callable[[], str] | None = None,
        ports: Ports = NO_PORTS,
    ) -> Runtime:
        """Read config (raises ConfigError before anything is written), open the database
        and the parts ``profile`` names; with agents, start them and begin connecting the
        MCP servers (in the background: ``runtime.mcp.wait_ready()`` waits for their first
        attempts). Whatever fails on the way, everything acquired so far is released before
        the error is raised. ``ports``: how the front end reaches a person (core/ports.py);
        without them nobody is asked."""
        paths = Paths.resolve(config_dir, data_dir)
        settings = load_settings(paths)
        servers_path = paths.config_file(MCP_SERVERS_FILE)
        known = profile.agents and profile.servers != "none"
        servers_file = load_servers_file(servers_path) if known else None
        servers = servers_file.servers if servers_file else []
        if profile.only is not None:
            servers = [server for server in servers if server.name == profile.only]
        # How the servers file was read, and its file-wide switches (read once, at start).
        read_notices = [*paths.notices(), *(servers_file.notices if servers_file else [])]
        switched = switches(servers_file, servers_path) if servers_file else Switches()
        _check_policy(paths)
        tracing_protocol()  # OTEL_* variables diana cannot follow are named before anything
        stack = Closing()
        processes.become_subreaper()  # what its children leave behind is re-parented here
        stack.push("the processes it started", processes.sweep)  # closed last
        async with released_on_failure(paths.database, stack.close_after_failure):
            runtime = await cls._start(
                stack,
                profile,
                paths,
                settings,
                servers,
                switched,
                read_notices,
                clock=clock or SystemClock(),
                new_id=new_id,
                mcp_backoff_start=mcp_backoff_start,
                mcp_health_interval=mcp_health_interval,
                proposal_ids=proposal_ids,
                request_ids=request_ids,
                ports=ports,
            )
        return runtime

    @classmethod
    async def _start(
        cls,
        stack: Closing,
        profile: Profile,
        paths: Paths,
        settings: Settings,
        servers: list[MCPServerConfig],
        switched: Switches,
        read_notices: list[str],
        *,
        clock: Clock,
        new_id: Callable[[], str],
        mcp_backoff_start: float,
        mcp_health_interval: float,
        proposal_ids: Callable[[], str] | None,
        request_ids: Callable[[], str] | None,
        ports: Ports,
    ) -> Runtime:
        """Each part is handed to ``stack`` as soon as it exists, so closing (after a
        failure here, or at the end) releases exactly what was acquired, newest first."""
        # Config is read whole before anything is written under the data dir.
        tools = None
        if profile.agents:
            tools = builders.local_tools(paths, clock)
        else:
            builders.check_local_tools(paths)
        notices = [*read_notices, *switched.notices, *_private_data_dir(paths.data_dir)]
        remember_kept_tokens(paths.data_dir)  # masked here too, whoever obtained them
        db = stack.take("the database", await builders.database(paths))
        log = stack.take("the log file", builders.log_file(paths, settings, clock))
        stack.log = log
        stack.take("library logging", builders.library_logging(log))
        tracing = stack.take("tracing", builders.tracing(settings)) if profile.tracing else None
        calls = (
            stack.take("the execution log", builders.execution_log(paths, settings, clock, db, log))
            if profile.execution_log
            else None
        )
        bus = EventBus()
        cost = None
        if profile.cost:
            ledger = await builders.cost_ledger(paths, settings, clock, db, log)
            cost = stack.take("the cost ledger", ledger)
        memory = (
            stack.take("the memory", builders.memory(settings, clock, db, log, calls))
            if profile.memory and calls is not None  # a profile with memory logs calls
            else None
        )
        rules = builders.policy(paths, bus)
        agents = None
        if profile.agents:
            # A profile with agents opens these (Profile.__post_init__).
            assert tools is not None and calls is not None and cost is not None
            assert memory is not None
            agents = await builders.agents(
                stack.push,
                paths,
                settings,
                clock,
                bus,
                log,
                db=db,
                calls=calls,
                cost=cost,
                memory=memory,
                rules=rules,
                tools=tools,
                switched=switched,
                new_id=new_id,
                ports=ports,
                schemas_at_call=profile.schemas_at_call,
                backoff_start=mcp_backoff_start,
                health_interval=mcp_health_interval,
                proposal_ids=proposal_ids,
                request_ids=request_ids,
            )
            approvals = agents.approvals
        else:
            approvals = stack.take(
                "approvals",
                await builders.approvals(
                    paths,
                    clock,
                    bus,
                    log,
                    rules,
                    cost=cost,
                    switched=switched,
                    proposal_ids=proposal_ids,
                ),
            )
        runtime = cls(
            profile=profile,
            paths=paths,
            settings=settings,
            clock=clock,
            bus=bus,
            db=db,
            log=log,
            approvals=approvals,
            tracing=tracing,
            notices=notices,
            switched=switched,
            _execution_log=calls,
            _cost=cost,
            _memory=memory,
            _agents=agents,
            _new_id=new_id,
            _closing=stack,
        )
        for notice in notices:
            log.emit("runtime.notice", "warning", message=notice)
        if profile.chat:
            runtime.chat  # noqa: B018  (made now: a bad Ollama host is a start-up error)
        stack.push("the config watchers", runtime._stop_watchers)
        log.emit("runtime.started", config_dir=str(paths.config_dir), data_dir=str(paths.data_dir))
        if profile.through_app and profile.servers == "all" and agents is not None:
            app = await runtime.running_app()
            if app is not None:  # its servers are the app's: none started, nothing shared
                runtime.through = app
                runtime.profile = profile.but(servers="on_demand", share=False)
                log.emit("runtime.through_app", app=app.app_id, pid=app.pid)
        if agents is None:
            await approvals.start(watch=profile.watch)
        else:
            await agents.orchestrator.start_all()
            await runtime._start_agents(servers)
        log.emit("runtime.opened", profile=profile.name, parts=runtime.parts())
        return runtime

    def parts(self) -> list[str]:
        """The parts this runtime opened, by name (logged once it is open)."""
        named = [
            ("the execution log", self._execution_log),
            ("the cost ledger", self._cost),
            ("the memory", self._memory),
            ("the tracing exporter", self.tracing),
        ]
        names = ["the database", "the log file", "the proposals"]
        names += [name for name, part in named if part is not None]
        if self._agents is not None:
            names += [
                "the orchestrator",
                f"diana's own agents ({len(self.own_agents())})",
                "the MCP manager",
                "the MCP Registry client",
                "the MCP sub-agent",
            ]
        names += [
            name
            for name, part in (
                ("the chat", self._chat),
                ("what it shares with diana", self._sharing),
            )
            if part is not None
        ]
        if self.watchers or self.approvals.watching:
            names.append("the config watchers")
        return names

    async def _start_agents(self, servers: list[MCPServerConfig]) -> None:
        """Start what runs calls: a person's stops hold, the servers begin connecting, the
        app shares what it knows, the sub-agent takes requests."""
        from .calls.agent_switches import apply_switches
        from .tools.local import TOOLS_FILE

        profile, paths, stack = self.profile, self.paths, self._closing
        await apply_switches(self.orchestrator, self.settings.agents.stopped)
        if profile.watch:
            self.watch(lambda: paths.config_file(TOOLS_FILE), self.reload_local_tools)
            self.watch(lambda: paths.config_file(SETTINGS_FILE), self.apply_settings)
        await self.approvals.start(watch=profile.watch)
        on_demand = profile.servers == "on_demand"
        await self.mcp.start(servers, watch=profile.watch, on_demand=on_demand, only=profile.only)
        if profile.share:
            await self._share()
        records = self._parts().records
        records.start()
        stack.push("the MCP sub-agent's records", records.close)  # after its last change
        self.subagent.start()
        # First to stop: a request it is carrying out may still reload MCP servers.
        stack.push("the MCP sub-agent", self.subagent.stop)

    async def _share(self) -> None:
        """What the app shares with `diana` on the same data dir (core/shared/live.py); facts
        saved while Ollama or the embedding model was missing, or under another model, are
        embedded now, in the background."""
        from .shared.sharing import Sharing

        self.memory.start_backfill()
        sharing = Sharing(
            self.db,
            self.paths,
            self.mcp,
            self.bus,
            self.clock,
            self.log,
            run_call=self.call_here,
            approve=self._approve_here,
        )
        self._sharing = sharing
        self._closing.push("what it shares with diana", sharing.stop)
        try:
            await sharing.start()
        except (OSError, StorageError) as exc:  # an aid to `diana`: the app runs without it
            self.log.emit("live.share_failed", "warning", error=str(exc))

    # -- the parts a profile may leave out -----------------------------------------------

    def _missing(self, part: str) -> NotOpened:
        return NotOpened(f"the {self.profile.name} runtime does not open {part}")

    def _parts(self) -> builders.Agents:
        if self._agents is None:
            raise self._missing("the agents")
        return self._agents

    @property
    def shared(self) -> bool:
        """This is the app (its profile shares): its chat keeps the app's conversation."""
        return self.profile.share

    @property
    def execution_log(self) -> ExecutionLog:
        if self._execution_log is None:
            raise self._missing("the execution log")
        return self._execution_log

    @property
    def cost(self) -> CostLedger:
        """Units per agent and server, and the daily budget."""
        if self._cost is None:
            raise self._missing("the cost ledger")
        return self._cost

    @property
    def memory(self) -> Memory:
        """The facts DIANA remembers, found by words and meaning."""
        if self._memory is None:
            raise self._missing("the memory")
        return self._memory

    @property
    def orchestrator(self) -> Orchestrator:
        return self._parts().orchestrator

    @property
    def mcp(self) -> MCPManager:
        return self._parts().mcp

    @property
    def human(self) -> HumanInput:
        return self._parts().human

    @property
    def local_tools(self) -> LocalTools:
        return self._parts().local_tools

    @property
    def subagent(self) -> MCPSubagent:
        """Adds, tests, removes MCP servers."""
        return self._parts().subagent

    @property
    def tool_cache(self) -> ToolCache:
        """Every MCP server's tools as last listed."""
        return self._parts().tool_cache

    @property
    def elicitations(self) -> Elicitations:
        """Who answers what servers ask a person."""
        return self._parts().elicitations

    @property
    def sampling(self) -> Sampling:
        """What servers ask the local model."""
        return self._parts().sampling

    @property
    def registry(self) -> RegistryClient:
        """The MCP Registry servers are found in."""
        return self._parts().registry

    def own_agents(self) -> list[str]:
        """The ids of diana's own agents (registered, or that would be with agents)."""
        return builders.own_agents(self.switched)

    @property
    def chat(self) -> ChatSession:
        """The conversation with the local model (and the ollama client), made when first
        used; closed with the runtime."""
        if self._chat is None:
            from .chat.conversation import APP, CLI, ConversationStore
            from .chat.session import ChatSession

            chat = ChatSession(
                settings=self.settings.llm,
                orchestrator=self.orchestrator,
                approvals=self.approvals,
                conversations=ConversationStore(self.db),
                clock=self.clock,
                new_id=self._new_id,
                log=self.log,
                memory=self.memory if self.settings.memory.recall else None,
                find_servers=self._servers_for if self.settings.registry.suggests else None,
                origin=APP if self.shared else CLI,
            )
            self._closing.push("the chat", chat.close)
            self._chat = chat
        return self._chat

    @property
    def chats(self) -> Chats:
        """The stored conversations: list, search, rename, delete, export."""
        from .chat.chats import Chats

        return Chats(self.db)

    async def _servers_for(self, capability: str) -> list[dict[str, Any]]:
        """The registry's best entries for a capability no tool provides, as shown."""
        from .mcp.registry import candidates

        found = await candidates(self.registry, capability)
        return [
            entry.public(servers_dir=self.registry.servers_dir, rule=self.registry.address_rule)
            for entry in found
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, origin: str, warn: Warn | None = None
    ) -> ToolResult:
        """A call a person typed (`diana call`, the chat's /call) or a host made (`diana
        serve`). With a diana-tui running on the data dir, a command's or a gateway's call is
        run by the app (one live instance of each server); one the app does not take up in
        time is run here (``warn`` told why), except by a gateway that has no servers."""
        from .shared.app_requests import AppNotTaken

        app = await self.app_for_calls()
        if app is None:
            return await self.call_here(name, arguments, origin)
        params = {"tool": name, "arguments": arguments, "origin": origin}
        try:
            return await self._app_runs(app, "call", params)
        except AppNotTaken as exc:
            if self.through is not None:
                return self._without_app(str(exc))
            if warn is not None:
                warn(f"{exc}; running the call with this command's own servers")
        return await self.call_here(name, arguments, origin)

    async def call_here(self, name: str, arguments: dict[str, Any], origin: str) -> ToolResult:
        """The call run in this process. The one MCP server that could hold the tool is given
        its first attempt to connect, so a name is unknown (with the closest names),
        unavailable, or run the same way wherever it is typed. Its result is returned once
        its record, with its origin, is in the execution log."""
        await self.mcp.wait_ready(self.mcp.servers_for_tool(name))
        records: list[CallRecord] = []
        result = await self.orchestrator.execute(name, arguments, origin=origin, record=records)
        for record in records:
            await self.execution_log.landed(record)
        return result

    async def approve(
        self, proposal_id: str, *, by: str, seen: str | None = None, warn: Warn | None = None
    ) -> Decision:
        """Approve a proposal and run its call, once: by the diana-tui running on the data
        dir for a command (its servers), else here."""
        from .approvals.service import Decision
        from .shared.app_requests import AppNotTaken, Refused

        app = await self.app_for_calls() if seen is None else None
        if app is not None:
            try:
                result = await self._app_runs(app, "approve", {"proposal": proposal_id, "by": by})
                return Decision(await self.approvals.get(proposal_id), result)
            except Refused as exc:
                raise _refusal(exc, await self.approvals.get(proposal_id)) from None
            except AppNotTaken as exc:
                if warn is not None:
                    warn(f"{exc}; running the call with this command's own servers")
        if self.profile.agents and self.profile.servers == "on_demand":
            tool = (await self.approvals.get(proposal_id)).tool
            await self.mcp.wait_ready(self.mcp.servers_for_tool(tool))
        return await self.approvals.approve(proposal_id, by=by, seen=seen)

    async def _approve_here(self, proposal_id: str, by: str) -> ToolResult:
        decision = await self.approvals.approve(proposal_id, by=by)
        assert decision.result is not None
        return decision.result

    async def app_for_calls(self) -> LiveApp | None:
        """The diana-tui that runs this process's calls: the one running on the data dir, for
        a command or a gateway (``through_app``) that shares nothing itself; a gateway opened
        through an app keeps asking the one it found when it is gone (and says so). A gateway
        that found no app at open connected every server itself and runs its calls for its
        whole life: its calls look for no app (no read of the database on that path)."""
        if not self.profile.through_app or self._sharing is not None or self._agents is None:
            return None
        if self.through is None and self.profile.servers == "all":
            return None
        app = await self.running_app()
        return app if app is not None else self.through

    async def _app_runs(self, app: LiveApp, kind: str, params: dict[str, Any]) -> ToolResult:
        from .shared.app_requests import app_runs

        return await app_runs(self.db, self.paths, app, self.clock, kind, params)

    def _without_app(self, why: str) -> ToolResult:
        from .models import ErrorCode, ToolResult

        return ToolResult.fail(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{why}: this diana serve uses its MCP servers and starts none of its own; "
            "start diana-tui again, or restart diana serve",
        )

    def tool_definitions(self) -> list[tuple[ToolDefinition, str]]:
        """Every tool the model may call, with its agent: the app's, for a runtime through
        one (as last listed by ``wait_servers_ready``)."""
        if self.through is not None:
            return list(self._app_tools)
        return self.orchestrator.tool_definitions()

    async def wait_servers_ready(self, names: list[str] | None = None) -> None:
        """Until each server (or every one) has had its first attempt to connect; through an
        app, its tools listed by it again (kept as they were if it does not answer)."""
        if self.through is None:
            await self.mcp.wait_ready(names)
            return
        from .shared.app_requests import AppGone, ask_app_question
        from .shared.queries import ToolsAnswer

        app = await self.app_for_calls()
        assert app is not None
        try:
            found = await ask_app_question(self.db, self.paths, app, "tools", None, self.clock)
        except (AppGone, StorageError) as exc:
            self.log.emit("runtime.app_tools_failed", "warning", error=str(exc))
            return
        assert isinstance(found, ToolsAnswer)
        self._app_tools = _definitions(found.tools, self.log)

    async def recent_calls(self, limit: int = 50) -> list[CallRecord]:
        from .storage.execution_log import recent_calls

        await self.execution_log.flush()
        return await recent_calls(self.db, limit)

    async def running_app(self, warn: Warn | None = None) -> LiveApp | None:
        """The diana-tui running on this data dir and config dir, if one is; ``warn`` is
        told of each row passed over (damaged, or not a running app's own)."""
        from .shared.live import running_app

        return await running_app(self.db, self.paths, warn)

    async def start_servers(self) -> None:
        """Connect every configured MCP server, for a runtime opened without them."""
        await self.mcp.start(self.mcp.load())

    def calls_from_elsewhere(self, after_id: int) -> CallsFromElsewhere:
        """The calls other processes log after row ``after_id``, polled as they come."""
        from .storage.execution_log import CallsFromElsewhere

        return CallsFromElsewhere(self.db, self.execution_log, after_id)

    def watch(self, locate: Callable[[], Path], changed: Callable[[], Awaitable[None]]) -> None:
        """Call ``changed`` whenever a config file changes, until the runtime closes."""
        from .config.watch import watch_file

        self.watchers.append(asyncio.create_task(watch_file(locate, changed)))

    async def reload_local_tools(self) -> None:
        """tools.json changed (here or in another process): its tools, without a restart."""
        from .tools.local import AGENT_ID as LOCAL_AGENT
        from .tools.local import TOOLS_FILE

        try:
            replaced = self.local_tools.reload()
        except ConfigError as exc:
            self.bus.config_checked(TOOLS_FILE, str(exc))
            self.log.emit("local_tools.reload_failed", "error", error=str(exc))
            return
        self.bus.config_checked(TOOLS_FILE)
        if replaced:
            names = self.orchestrator.refresh_tools(LOCAL_AGENT)
            self.log.emit("local_tools.reloaded", tools=len(names))
            self.bus.publish(Notice("info", f"tools.json reloaded: {len(names)} local tools"))

    async def switch_agent(self, agent: str, *, stop: bool) -> bool:
        """A person stops (or starts) one of diana's own agents: written to settings.json,
        applied here at once (a running app follows the file). Whether the file changed.
        AgentSwitchRefused for an agent that is not diana's own; ConfigError if settings.json
        cannot be written."""
        from .calls.agent_switches import check_switchable, write_switch

        try:
            configured = load_servers(self.paths.config_file(MCP_SERVERS_FILE))
        except ConfigError:
            configured = []
        servers = {agent_id_for(config.name): config.name for config in configured}
        check_switchable(self.orchestrator, agent, servers)
        changed = await write_switch(self.paths, agent, stopped=stop)
        await self.apply_settings()
        return changed

    async def apply_settings(self) -> None:
        """settings.json changed (here or in another process): the agents a person stopped
        are stopped, those started again are started, the daily budget, how proposals are
        told (``notify``) and what `diana serve` shows and holds (``serve``) are the ones it
        gives. Other settings apply at the next start:
        a notice names each one changed (once for each new value)."""
        from .calls.agent_switches import apply_switches

        try:
            settings = load_settings(self.paths)
        except ConfigError as exc:  # being edited, or broken: what was in force stays
            self.log.emit("settings.unreadable", "warning", error=str(exc))
            return
        self._tell_restart_needed(settings)
        self.settings = self.settings.model_copy(
            update={
                "notify": settings.notify,
                "cost": settings.cost,
                "agents": settings.agents,
                "serve": settings.serve,
            }
        )
        self.cost.set_budget(settings.cost.daily_budget)
        self.bus.config_checked(SETTINGS_FILE)  # a gateway shows each host what it now may see
        for change in await apply_switches(self.orchestrator, settings.agents.stopped):
            self.log.emit("agents.switched", change=change)
            self.bus.publish(Notice("info", change))

    def _tell_restart_needed(self, settings: Settings) -> None:
        """A notice naming the settings changed that only a restart applies."""
        after = settings.model_dump()
        differing = changed_settings(self.settings, settings)
        told = []
        for key in differing:
            if key in LIVE_SETTINGS:
                continue
            section, _, name = key.partition(".")
            value = after[section][name] if name else after[section]
            if self._restart_told.get(key, _UNTOLD) != value:
                self._restart_told[key] = value
                told.append(key)
        # A key set back to the value in force needs no restart: told again if changed again.
        for key in [k for k in self._restart_told if k not in differing]:
            del self._restart_told[key]
        if told:
            message = (
                f"{SETTINGS_FILE}: {', '.join(told)} changed; "
                f"{'it applies' if len(told) == 1 else 'they apply'} after a restart of diana"
            )
            self.log.emit("settings.restart_needed", "warning", keys=told)
            self.bus.publish(Notice("warning", message))

    async def close(self) -> None:
        """Stop everything, newest part first; every part is closed even if another fails.
        Raises CloseError naming what failed to close, once the rest is closed."""
        await self._closing.close()

    async def _stop_watchers(self) -> None:
        for watcher in self.watchers:
            watcher.cancel()
        await asyncio.gather(*self.watchers, return_exceptions=True)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _private_data_dir(data_dir: Path) -> list[str]:
    """The data dir made private (core/system/files.py); a notice if others could read it before."""
    try:
        tightened = make_private(data_dir)
    except OSError:  # it cannot be made: opening the database, next, says why
        return []
    if not tightened:
        return []
    entries = "1 entry" if tightened == 1 else f"{tightened} entries"
    return [
        f"the data dir {data_dir} was readable by others ({entries}): made private "
        "(folders 0700, files 0600)"
    ]


def _check_policy(paths: Paths) -> None:
    """The approval policy is read before anything opens: a bad one is a ConfigError."""
    from .approvals.policy import POLICY_FILE, load_policy

    load_policy(paths.config_file(POLICY_FILE))
