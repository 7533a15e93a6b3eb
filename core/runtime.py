"""The Runtime: one object, built from config, that owns the whole core.

A `diana` command opens it with only what it needs: no MCP server, or servers on demand
(core/mcp/manager.py), and no chat. The MCP SDK and the ollama client are imported by the
parts that use them, so a command that uses neither does not pay for importing them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import processes
from .agent_switches import apply_switches, check_switchable, write_switch
from .approvals.policy import POLICY_FILE, Policy, load_policy
from .approvals.sampling import Sampling
from .approvals.service import Approvals
from .approvals.store import ProposalStore
from .calls import CallRecord
from .clock import Clock, SystemClock
from .config import (
    LIVE_SETTINGS,
    SETTINGS_FILE,
    ConfigError,
    Paths,
    Settings,
    changed_settings,
    load_settings,
)
from .cost import CostLedger
from .db import Database, StorageError, released_on_failure
from .elicitation import Elicitations
from .events import EventBus, Notice
from .execution_log import CallsFromElsewhere, ExecutionLog, recent_calls
from .files import MEDIA_DIR, MediaFiles, make_private
from .lifecycle import Closing
from .live import LiveApp, Warn, running_app
from .llm.conversation import APP, CLI, ConversationStore
from .mcp.config import (
    BACKOFF_START,
    MCP_SERVERS_FILE,
    MCPServerConfig,
    Switches,
    agent_id_for,
    load_servers,
    load_servers_file,
    switches,
)
from .mcp.manager import MCPManager
from .mcp.registry import REGISTRY_DIR, RegistryClient
from .mcp.requests import RequestRecords
from .mcp.subagent import ADMIN_AGENT_ID, MCPSubagent
from .mcp.tokens import remember_kept_tokens
from .mcp.tool_cache import ToolCache
from .mcp.venv_install import SERVERS_DIR
from .memory import Memory
from .models import ToolResult
from .orchestrator import Orchestrator
from .ports import Ports
from .sampling import SAMPLING_AGENT, sampling_agent
from .schema import connect
from .sharing import Sharing
from .telemetry import LibraryLogHandler, StructuredLog, new_correlation_id
from .tools.builtin import builtin_factories
from .tools.code import code_agent
from .tools.human import HumanInput, human_agent
from .tools.local import AGENT_ID as LOCAL_AGENT
from .tools.local import TOOLS_FILE, LocalTools
from .tools.mcp_admin import mcp_admin_agent
from .tracing import Tracing, configure, install, uninstall
from .tracing import protocol as tracing_protocol
from .watch import watch_file
from .web.addresses import AddressRule

if TYPE_CHECKING:
    from .llm.chats import Chats
    from .llm.session import ChatSession

NO_PORTS = Ports()  # a runtime no person is in front of
_UNTOLD = object()  # a setting not told of yet


@dataclass
class Runtime:
    paths: Paths
    settings: Settings
    clock: Clock
    bus: EventBus
    db: Database
    log: StructuredLog
    execution_log: ExecutionLog
    orchestrator: Orchestrator
    memory: Memory  # the facts DIANA remembers, found by words and meaning
    mcp: MCPManager
    approvals: Approvals
    human: HumanInput
    local_tools: LocalTools
    subagent: MCPSubagent  # adds, tests, removes MCP servers
    cost: CostLedger  # units per agent and server, and the daily budget
    tracing: Tracing | None  # None: tracing is off
    tool_cache: ToolCache  # every MCP server's tools as last listed
    elicitations: Elicitations  # who answers what servers ask a person
    sampling: Sampling  # what servers ask the local model
    # What opening found and put right, for a person to be told (a front end shows them).
    notices: list[str]
    registry: RegistryClient  # the MCP Registry servers are found in
    _new_id: Callable[[], str] = field(repr=False)
    _closing: Closing = field(repr=False)
    watchers: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    # Settings changed in settings.json that wait for a restart, and the value told of.
    _restart_told: dict[str, object] = field(init=False, default_factory=dict, repr=False)
    _chat: ChatSession | None = field(init=False, default=None, repr=False)  # made when used
    shared: bool = False  # this is the app (``share``): its chat keeps the app's conversation

    @classmethod
    async def open(
        cls,
        config_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        *,
        clock: Clock | None = None,
        new_id: Callable[[], str] = new_correlation_id,
        mcp: bool = True,
        mcp_on_demand: bool = False,
        chat: bool = True,
        share: bool = False,
        schemas_at_call: bool = False,
        watch_config: bool = False,
        mcp_backoff_start: float = BACKOFF_START,
        proposal_ids: Callable[[], str] | None = None,
        request_ids: Callable[[], str] | None = None,
        ports: Ports = NO_PORTS,
    ) -> Runtime:
        """Read config (raises ConfigError before anything is written), open the database,
        start the built-in agents and begin connecting the MCP servers (in the background:
        ``runtime.mcp.wait_ready()`` waits for their first attempts). Whatever fails on the
        way, everything acquired so far is released before the error is raised.

        ``mcp=False``: no server is known; ``mcp_on_demand``: none is started yet (see
        core/mcp/manager.py). ``chat=False``: the chat session is made when first used.
        ``share``: this is the app; `diana` on the same data dir sees its servers and may
        ask it to reconnect them (core/live.py). ``schemas_at_call``: a tool's parameter
        schema is checked at its first call, not when registered (a command that calls one
        tool need not check them all; the app shows a bad one at once). ``ports``: how the
        front end reaches a person (core/ports.py); without them nobody is asked."""
        paths = Paths.resolve(config_dir, data_dir)
        settings = load_settings(paths)
        servers_path = paths.config_file(MCP_SERVERS_FILE)
        servers_file = load_servers_file(servers_path) if mcp else None
        servers = servers_file.servers if servers_file else []
        # How the servers file was read, and its file-wide switches (read once, at start).
        read_notices = [*paths.notices(), *(servers_file.notices if servers_file else [])]
        switched = switches(servers_file, servers_path) if servers_file else Switches()
        load_policy(paths.config_file(POLICY_FILE))
        tracing_protocol()  # OTEL_* variables diana cannot follow are named before anything
        stack = Closing()
        processes.become_subreaper()  # what its children leave behind is re-parented here
        stack.push("the processes it started", processes.sweep)  # closed last
        async with released_on_failure(paths.database, stack.close_after_failure):
            runtime = await cls._start(
                stack,
                paths,
                settings,
                servers,
                switched,
                read_notices,
                clock=clock or SystemClock(),
                new_id=new_id,
                mcp_on_demand=mcp_on_demand,
                chat=chat,
                share=share,
                schemas_at_call=schemas_at_call,
                watch_config=watch_config,
                mcp_backoff_start=mcp_backoff_start,
                proposal_ids=proposal_ids,
                request_ids=request_ids,
                ports=ports,
            )
        return runtime

    @classmethod
    async def _start(
        cls,
        stack: Closing,
        paths: Paths,
        settings: Settings,
        servers: list[MCPServerConfig],
        switched: Switches,
        read_notices: list[str],
        *,
        clock: Clock,
        new_id: Callable[[], str],
        mcp_on_demand: bool,
        chat: bool,
        share: bool,
        schemas_at_call: bool,
        watch_config: bool,
        mcp_backoff_start: float,
        proposal_ids: Callable[[], str] | None,
        request_ids: Callable[[], str] | None,
        ports: Ports,
    ) -> Runtime:
        """Each part is handed to ``stack`` as soon as it exists, so closing (after a
        failure here, or at the end) releases exactly what was acquired, newest first."""
        local_tools = LocalTools(
            lambda: paths.config_file(TOOLS_FILE), paths.config_dir / TOOLS_FILE, clock
        )
        # Config is read whole before anything is written under the data dir.
        notices = [*read_notices, *switched.notices, *_private_data_dir(paths.data_dir)]
        remember_kept_tokens(paths.data_dir)  # masked here too, whoever obtained them
        db = await connect(paths.database)
        stack.push("the database", db.close)
        try:
            log = StructuredLog(paths.log_file, clock, retention_days=settings.logs.retention_days)
        except OSError as exc:
            raise StorageError(f"cannot write the log {paths.log_file}: {exc.strerror}") from None
        stack.push("the log file", lambda: _stop_log(log))
        stack.log = log
        library_logs = LibraryLogHandler(log)
        logging.getLogger().addHandler(library_logs)
        stack.push("library logging", lambda: logging.getLogger().removeHandler(library_logs))
        tracing = configure(settings.tracing.service_name)
        if tracing is not None:
            install(tracing)
            stack.push("tracing", lambda: _stop_tracing(tracing))
        execution_log = ExecutionLog(
            db, log, clock=clock, retention_days=settings.logs.retention_days
        )
        execution_log.start()
        MediaFiles(paths.data_dir / MEDIA_DIR).prune(settings.logs.retention_days, time.time())
        stack.push("the execution log", execution_log.close)
        bus = EventBus()
        cost = CostLedger(
            clock,
            budget=settings.cost.daily_budget,
            db=db,
            log=log,
            configured_budget=lambda: load_settings(paths).cost.daily_budget,
        )
        await cost.load()
        cost.start()
        stack.push("the cost ledger", cost.close)
        orchestrator = Orchestrator(
            bus=bus,
            log=log,
            execution_log=execution_log,
            clock=clock,
            default_timeout=settings.tools.default_timeout,
            tool_timeouts=settings.tools.timeouts,
            new_id=new_id,
            defer_schema_checks=schemas_at_call,
            on_call_finished=cost.call_finished,
        )
        memory = open_memory(db, settings, clock, log, execution_log)
        stack.push("the memory", memory.close)
        for name, factory in builtin_factories(settings, memory, clock).items():
            orchestrator.register_agent_factory(name, factory)
        human = HumanInput(ports.ask_person)
        orchestrator.register_agent_factory("human", lambda: human_agent(human, clock))
        orchestrator.register_agent_factory("code", lambda: code_agent(clock))
        orchestrator.register_agent_factory(LOCAL_AGENT, local_tools.make_agent)
        orchestrator.register_agent_factory(
            SAMPLING_AGENT,
            lambda: sampling_agent(
                settings.llm, clock, lambda server, s: cost.server_work(server, "sampling", s)
            ),
        )
        policy = Policy(
            lambda: paths.config_file(POLICY_FILE),
            paths.config_dir / POLICY_FILE,
            on_checked=lambda problem: bus.config_checked(POLICY_FILE, problem),
        )
        proposals = await ProposalStore.open(paths.database, proposal_ids, clock=clock)
        approvals = Approvals(
            proposals,
            orchestrator,
            policy,
            clock=clock,
            bus=bus,
            log=log,
            cost=cost,
            ask_every_mcp_tool=switched.ask_every_tool,
        )
        stack.push("approvals", approvals.close)
        tool_cache = ToolCache(db, clock, log=log)
        elicitations = Elicitations(
            log, asker=ports.answer_server, on_change=ports.server_requests_changed
        )
        sampling = Sampling(orchestrator, approvals, log, on_waiting=ports.sampling_waits)
        manager = MCPManager(
            orchestrator,
            lambda: paths.config_file(MCP_SERVERS_FILE),
            log=log,
            clock=clock,
            backoff_start=mcp_backoff_start,
            cost=cost,
            cache=tool_cache,
            elicitations=elicitations,
            sampling=sampling,
            data_dir=paths.data_dir,
        )
        stack.push("the MCP servers", manager.close)
        # Rules and proposals for a server's tools are bound to the program it runs.
        approvals.identity_of = manager.identity_of
        policy.configured = manager.configured_identities
        stack.push("the agents", orchestrator.shutdown)
        # Before the calls and servers stop, what servers are asking is answered (a question
        # cancelled, a proposal taken back), while the database is open and the server
        # listens; their calls can then end at once.
        stack.push("the servers' requests to the local model", sampling.close)
        stack.push("the servers' questions", elicitations.close)
        registry = RegistryClient(
            settings.registry,
            paths.data_dir / REGISTRY_DIR,
            clock,
            paths.data_dir / SERVERS_DIR,
            AddressRule.of(settings.web.allow_private, settings.web.allow_hosts),
        )
        records = RequestRecords(db, log)
        subagent = MCPSubagent(
            manager,
            paths.user_file(MCP_SERVERS_FILE),
            source=lambda: paths.config_file(MCP_SERVERS_FILE),
            bus=bus,
            clock=clock,
            log=log,
            cost=cost,
            records=records,
            request_ids=request_ids,
        )
        runtime = cls(
            paths=paths,
            settings=settings,
            clock=clock,
            bus=bus,
            db=db,
            log=log,
            execution_log=execution_log,
            orchestrator=orchestrator,
            memory=memory,
            mcp=manager,
            approvals=approvals,
            human=human,
            local_tools=local_tools,
            subagent=subagent,
            cost=cost,
            tracing=tracing,
            tool_cache=tool_cache,
            elicitations=elicitations,
            sampling=sampling,
            notices=notices,
            registry=registry,
            _new_id=new_id,
            _closing=stack,
            shared=share,
        )
        for notice in notices:
            log.emit("runtime.notice", "warning", message=notice)
        if chat:
            runtime.chat  # noqa: B018  (made now: a bad Ollama host is a start-up error)
        stack.push("the config watchers", runtime._stop_watchers)
        if switched.subagent:
            orchestrator.register_agent_factory(
                ADMIN_AGENT_ID,
                lambda: mcp_admin_agent(
                    subagent, manager, clock, registry=registry, cache=tool_cache
                ),
            )
        log.emit("runtime.started", config_dir=str(paths.config_dir), data_dir=str(paths.data_dir))
        await orchestrator.start_all()
        await apply_switches(orchestrator, settings.agents.stopped)  # a person's stops hold
        if watch_config:
            runtime.watch(lambda: paths.config_file(TOOLS_FILE), runtime.reload_local_tools)
            runtime.watch(lambda: paths.config_file(SETTINGS_FILE), runtime.apply_settings)
        await approvals.start(watch=watch_config)
        await manager.start(servers, watch=watch_config, on_demand=mcp_on_demand)
        if share:
            # Facts saved while Ollama or the embedding model was missing, or under another
            # model, are embedded now, in the background.
            memory.start_backfill()
            sharing = Sharing(db, paths, manager, bus, clock, log)
            stack.push("what it shares with diana", sharing.stop)
            try:
                await sharing.start()
            except (OSError, StorageError) as exc:  # an aid to `diana`: the app runs without it
                log.emit("live.share_failed", "warning", error=str(exc))
        records.start()
        stack.push("the MCP sub-agent's records", records.close)  # after its last change
        subagent.start()
        # First to stop: a request it is carrying out may still reload MCP servers.
        stack.push("the MCP sub-agent", subagent.stop)
        return runtime

    @property
    def chat(self) -> ChatSession:
        """The conversation with the local model (and the ollama client), made when first
        used; closed with the runtime."""
        if self._chat is None:
            from .llm.session import ChatSession

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
        from .llm.chats import Chats

        return Chats(self.db)

    async def _servers_for(self, capability: str) -> list[dict[str, Any]]:
        """The registry's best entries for a capability no tool provides, as shown."""
        from .mcp.registry import candidates

        found = await candidates(self.registry, capability)
        return [
            entry.public(servers_dir=self.registry.servers_dir, rule=self.registry.address_rule)
            for entry in found
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], *, origin: str) -> ToolResult:
        """A call a person typed (`diana call`, the chat's /call). The one MCP server that
        could hold the tool is given its first attempt to connect, so a name is unknown
        (with the closest names), unavailable, or run the same way wherever it is typed."""
        await self.mcp.wait_ready(self.mcp.servers_for_tool(name))
        return await self.orchestrator.execute(name, arguments, origin=origin)

    async def recent_calls(self, limit: int = 50) -> list[CallRecord]:
        await self.execution_log.flush()
        return await recent_calls(self.db, limit)

    async def running_app(self, warn: Warn | None = None) -> LiveApp | None:
        """The diana-tui running on this data dir and config dir, if one is; ``warn`` is
        told of each row passed over (damaged, or not a running app's own)."""
        return await running_app(self.db, self.paths, warn)

    async def start_servers(self) -> None:
        """Connect every configured MCP server, for a runtime opened without them."""
        await self.mcp.start(self.mcp.load())

    def calls_from_elsewhere(self, after_id: int) -> CallsFromElsewhere:
        """The calls other processes log after row ``after_id``, polled as they come."""
        return CallsFromElsewhere(self.db, self.execution_log, after_id)

    def watch(self, locate: Callable[[], Path], changed: Callable[[], Awaitable[None]]) -> None:
        """Call ``changed`` whenever a config file changes, until the runtime closes."""
        self.watchers.append(asyncio.create_task(watch_file(locate, changed)))

    async def reload_local_tools(self) -> None:
        """tools.json changed (here or in another process): its tools, without a restart."""
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
        are stopped, those started again are started, the daily budget and how proposals
        are told (``notify``) are the ones it gives. Other settings apply at the next start:
        a notice names each one changed (once for each new value)."""
        try:
            settings = load_settings(self.paths)
        except ConfigError as exc:  # being edited, or broken: what was in force stays
            self.log.emit("settings.unreadable", "warning", error=str(exc))
            return
        self._tell_restart_needed(settings)
        self.settings = self.settings.model_copy(
            update={"notify": settings.notify, "cost": settings.cost, "agents": settings.agents}
        )
        self.cost.set_budget(settings.cost.daily_budget)
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


def open_memory(
    db: Database, settings: Settings, clock: Clock, log: StructuredLog, calls: ExecutionLog
) -> Memory:
    """The memory, embedding through the Ollama the chat uses (no request is made yet); a
    forget first writes down the calls still queued, so their copies of the fact go too."""
    from .memory import OllamaEmbedder

    timeouts = settings.llm.model_copy(update={"timeout": settings.memory.embed_timeout})
    embedder = OllamaEmbedder(settings.llm.host, settings.memory.embed_model, timeouts)
    return Memory(db, embedder, clock, log=log, before_forget=calls.flush)


def _stop_log(log: StructuredLog) -> None:
    log.emit("runtime.stopped")
    log.close()


async def _stop_tracing(tracing: Tracing) -> None:
    uninstall(tracing)
    await tracing.close()


def _private_data_dir(data_dir: Path) -> list[str]:
    """The data dir made private (core/files.py); a notice if others could read it before."""
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
