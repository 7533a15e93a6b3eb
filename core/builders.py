"""The core's parts, each made by one builder that returns the part and what closes it.

The runtime (core/runtime.py) calls them in order, as its profile says (core/profiles.py):
every wire between two parts is an argument given here, nothing is set on a part after it
is made. A builder imports what its part needs, so a runtime that does not open a part does
not import it (`diana proposals` imports neither the MCP SDK nor the ollama client).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config.mcp_servers import MCP_SERVERS_FILE, Switches, configured_identities
from .config.settings import Paths, Settings
from .events import EventBus
from .ports import Ports
from .storage.db import Database, StorageError
from .system.clock import Clock
from .system.lifecycle import Closer
from .system.telemetry import LibraryLogHandler, StructuredLog

if TYPE_CHECKING:
    from .approvals.policy import Policy
    from .approvals.sampling_gate import Sampling
    from .approvals.service import Approvals
    from .calls.agents import AgentFactory
    from .calls.gate import GateRequest
    from .calls.orchestrator import Orchestrator
    from .calls.tracing import Tracing
    from .mcp.elicitation_form import Elicitations
    from .mcp.manager import MCPManager
    from .mcp.registry import RegistryClient
    from .mcp.subagent import MCPSubagent
    from .mcp.subagent_records import RequestRecords
    from .mcp.tool_cache import ToolCache
    from .memory import Memory
    from .models import ToolResult
    from .storage.execution_log import ExecutionLog
    from .tools.human import HumanInput
    from .tools.local import LocalTools
    from .usage.cost import CostLedger

# diana's own agents, by id, in the order they are registered: the one list of them
# (``builtin_agents`` makes each; a reading command names them without making them).
OWN_AGENTS = ("memory", "obsidian", "clock", "web", "human", "code", "local-tools", "sampling")
# The MCP sub-agent's tools for the model: one of diana's own agents unless switched off.
ADMIN_AGENT = "mcp-admin"


def own_agents(switched: Switches) -> list[str]:
    """The ids of diana's own agents a runtime with these switches registers."""
    return [*OWN_AGENTS, *([ADMIN_AGENT] if switched.subagent else [])]


async def database(paths: Paths) -> tuple[Database, Closer]:
    from .storage.schema import connect

    db = await connect(paths.database)
    return db, db.close


def log_file(paths: Paths, settings: Settings, clock: Clock) -> tuple[StructuredLog, Closer]:
    try:
        log = StructuredLog(paths.log_file, clock, retention_days=settings.logs.retention_days)
    except OSError as exc:
        raise StorageError(f"cannot write the log {paths.log_file}: {exc.strerror}") from None

    def stop() -> None:
        log.emit("runtime.stopped")
        log.close()

    return log, stop


def library_logging(log: StructuredLog) -> tuple[LibraryLogHandler, Closer]:
    """What libraries log goes to the structured log."""
    handler = LibraryLogHandler(log)
    logging.getLogger().addHandler(handler)
    return handler, lambda: logging.getLogger().removeHandler(handler)


def tracing(settings: Settings) -> tuple[Tracing | None, Closer | None]:
    """The OpenTelemetry exporter the OTEL_* variables ask for, or None."""
    from .calls.tracing import configure, install, uninstall

    made = configure(settings.tracing.service_name)
    if made is None:
        return None, None
    install(made)

    async def stop() -> None:
        uninstall(made)
        await made.close()

    return made, stop


def execution_log(
    paths: Paths, settings: Settings, clock: Clock, db: Database, log: StructuredLog
) -> tuple[ExecutionLog, Closer]:
    """The execution log, writing in the background; media files past retention go."""
    from .storage.execution_log import ExecutionLog
    from .system.files import MEDIA_DIR, MediaFiles

    calls = ExecutionLog(db, log, clock=clock, retention_days=settings.logs.retention_days)
    calls.start()
    MediaFiles(paths.data_dir / MEDIA_DIR).prune(settings.logs.retention_days, time.time())
    return calls, calls.close


async def cost_ledger(
    paths: Paths, settings: Settings, clock: Clock, db: Database, log: StructuredLog
) -> tuple[CostLedger, Closer]:
    from .config.settings import load_settings
    from .usage.cost import CostLedger

    cost = CostLedger(
        clock,
        budget=settings.cost.daily_budget,
        db=db,
        log=log,
        configured_budget=lambda: load_settings(paths).cost.daily_budget,
    )
    await cost.load()
    cost.start()
    return cost, cost.close


def memory(
    settings: Settings,
    clock: Clock,
    db: Database,
    log: StructuredLog,
    calls: ExecutionLog,
) -> tuple[Memory, Closer]:
    """The memory, embedding through the Ollama the chat uses (no request is made yet); a
    forget first writes down the calls still queued, so their copies of the fact go too."""
    from .memory import Memory, OllamaEmbedder

    timeouts = settings.llm.model_copy(update={"timeout": settings.memory.embed_timeout})
    embedder = OllamaEmbedder(settings.llm.host, settings.memory.embed_model, timeouts)
    made = Memory(db, embedder, clock, log=log, before_forget=calls.flush)
    return made, made.close


def policy(paths: Paths, bus: EventBus) -> Policy:
    """The approval policy; its rules bound to servers are measured against mcp-servers.json
    as it is when they are shown."""
    from .approvals.policy import POLICY_FILE, Policy

    return Policy(
        lambda: paths.config_file(POLICY_FILE),
        paths.config_dir / POLICY_FILE,
        on_checked=lambda problem: bus.config_checked(POLICY_FILE, problem),
        configured=lambda: configured_identities(paths.config_file(MCP_SERVERS_FILE)),
    )


async def approvals(
    paths: Paths,
    clock: Clock,
    bus: EventBus,
    log: StructuredLog,
    rules: Policy,
    *,
    cost: CostLedger | None,
    switched: Switches,
    proposal_ids: Callable[[], str] | None,
    orchestrator: Orchestrator | None = None,
    identity_of: Callable[[str], str | None] | None = None,
) -> tuple[Approvals, Closer]:
    """The proposals and the gate; ``orchestrator`` runs approved calls (None: this runtime
    reads and rejects proposals, and runs none)."""
    from .approvals.hosts_pause import hosts_paused
    from .approvals.proposal_store import ProposalStore
    from .approvals.service import Approvals

    store = await ProposalStore.open(paths.database, proposal_ids, clock=clock)
    made = Approvals(
        store,
        orchestrator,
        rules,
        clock=clock,
        bus=bus,
        log=log,
        cost=cost,
        ask_every_mcp_tool=switched.ask_every_tool,
        identity_of=identity_of,
        hosts_paused=lambda: hosts_paused(paths.data_dir),
    )
    return made, made.close


@dataclass
class Agents:
    """What running a call needs: the orchestrator and diana's own agents, the MCP servers
    and what they ask (questions, the local model), the sub-agent that adds and removes
    them, and the MCP Registry they are found in."""

    orchestrator: Orchestrator
    approvals: Approvals
    human: HumanInput
    local_tools: LocalTools
    mcp: MCPManager
    tool_cache: ToolCache
    elicitations: Elicitations
    sampling: Sampling
    registry_of: Callable[[], RegistryClient]  # made when first used
    records: RequestRecords
    subagent: MCPSubagent

    @property
    def registry(self) -> RegistryClient:
        return self.registry_of()


def local_tools(paths: Paths, clock: Clock) -> LocalTools:
    """The local tools of tools.json, read now (a bad file is a ConfigError before anything
    is written under the data dir)."""
    from .tools.local import TOOLS_FILE, LocalTools

    return LocalTools(lambda: paths.config_file(TOOLS_FILE), paths.config_dir / TOOLS_FILE, clock)


def check_local_tools(paths: Paths) -> None:
    """tools.json is read by every runtime, with agents or not: a bad one is a ConfigError
    before anything is written under the data dir, whatever the command."""
    from .tools.local import TOOLS_FILE, load_tools

    load_tools(paths.config_file(TOOLS_FILE))


def builtin_agents(
    settings: Settings,
    clock: Clock,
    *,
    memory: Memory,
    human: HumanInput,
    local_tools: LocalTools,
    cost: CostLedger,
) -> dict[str, AgentFactory]:
    """diana's own agents (OWN_AGENTS, in order), each by its factory."""
    from .llm.sampling import sampling_agent
    from .tools.builtin import clock_agent, memory_agent, obsidian_agent
    from .tools.code import code_agent
    from .tools.human import human_agent
    from .tools.web import web_agent

    made: dict[str, AgentFactory] = {
        "memory": lambda: memory_agent(memory, clock),
        "obsidian": lambda: obsidian_agent(settings, clock),
        "clock": lambda: clock_agent(clock),
        "web": lambda: web_agent(settings.web, clock),
        "human": lambda: human_agent(human, clock),
        "code": lambda: code_agent(clock),
        "local-tools": local_tools.make_agent,
        "sampling": lambda: sampling_agent(
            settings.llm, clock, lambda server, s: cost.server_work(server, "sampling", s)
        ),
    }
    return {name: made[name] for name in OWN_AGENTS}


async def agents(
    closing: Callable[[str, Closer], None],
    paths: Paths,
    settings: Settings,
    clock: Clock,
    bus: EventBus,
    log: StructuredLog,
    *,
    db: Database,
    calls: ExecutionLog,
    cost: CostLedger,
    memory: Memory,
    rules: Policy,
    tools: LocalTools,
    switched: Switches,
    new_id: Callable[[], str],
    ports: Ports,
    schemas_at_call: bool,
    backoff_start: float,
    health_interval: float,
    proposal_ids: Callable[[], str] | None,
    request_ids: Callable[[], str] | None,
) -> Agents:
    """The orchestrator and everything that runs calls, each closer handed to ``closing``
    as its part exists. The orchestrator asks the approvals' gate and the MCP manager's
    hint; both call the orchestrator in turn, so they are given to it as functions of the
    parts made right after it."""
    from .approvals.sampling_gate import Sampling
    from .calls.orchestrator import Orchestrator
    from .mcp.elicitation_form import Elicitations
    from .mcp.manager import MCPManager
    from .mcp.pins import ToolPins
    from .mcp.subagent import ADMIN_AGENT_ID, MCPSubagent
    from .mcp.subagent_records import RequestRecords
    from .mcp.tool_cache import ToolCache
    from .mcp.venv_install import SERVERS_DIR
    from .tools.human import HumanInput
    from .tools.local import AGENT_ID as LOCAL_AGENT
    from .tools.mcp_admin import mcp_admin_agent

    assert LOCAL_AGENT in OWN_AGENTS and ADMIN_AGENT_ID == ADMIN_AGENT

    def gate_of_approvals(request: GateRequest) -> Awaitable[ToolResult | None]:
        return gates.gate(request)

    def hint_of_servers(tool_name: str) -> tuple[ToolResult, str | None] | None:
        return manager.missing_tool(tool_name)

    orchestrator = Orchestrator(
        bus=bus,
        log=log,
        execution_log=calls,
        clock=clock,
        default_timeout=settings.tools.default_timeout,
        tool_timeouts=settings.tools.timeouts,
        new_id=new_id,
        defer_schema_checks=schemas_at_call,
        on_call_finished=cost.call_finished,
        gate=gate_of_approvals,
        missing_tool_hint=hint_of_servers,
    )
    human = HumanInput(ports.ask_person)
    for name, factory in builtin_agents(
        settings, clock, memory=memory, human=human, local_tools=tools, cost=cost
    ).items():
        orchestrator.register_agent_factory(name, factory)
    gates, close_approvals = await approvals(
        paths,
        clock,
        bus,
        log,
        rules,
        cost=cost,
        switched=switched,
        proposal_ids=proposal_ids,
        orchestrator=orchestrator,
        # Rules and proposals for a server's tools are bound to the program it runs.
        identity_of=lambda server: manager.identity_of(server),
    )
    closing("approvals", close_approvals)
    tool_cache = ToolCache(db, clock, log=log)
    pins = ToolPins(db, clock, log=log)
    elicitations = Elicitations(
        log, asker=ports.answer_server, on_change=ports.server_requests_changed
    )
    sampling = Sampling(orchestrator, gates, log, on_waiting=ports.sampling_waits)
    manager = MCPManager(
        orchestrator,
        lambda: paths.config_file(MCP_SERVERS_FILE),
        log=log,
        clock=clock,
        backoff_start=backoff_start,
        health_interval=health_interval,
        cost=cost,
        cache=tool_cache,
        elicitations=elicitations,
        sampling=sampling,
        data_dir=paths.data_dir,
        pins=pins,
    )
    closing("the MCP servers", manager.close)
    closing("the agents", orchestrator.shutdown)
    # Before the calls and servers stop, what servers are asking is answered (a question
    # cancelled, a proposal taken back), while the database is open and the server
    # listens; their calls can then end at once.
    closing("the servers' requests to the local model", sampling.close)
    closing("the servers' questions", elicitations.close)

    @functools.cache
    def registry() -> RegistryClient:
        """The MCP Registry's client, made when a search or an install first needs it (a
        call of another tool never imports it)."""
        from .mcp.registry import REGISTRY_DIR, RegistryClient
        from .web.addresses import AddressRule

        return RegistryClient(
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
    if switched.subagent:
        orchestrator.register_agent_factory(
            ADMIN_AGENT,
            lambda: mcp_admin_agent(subagent, manager, clock, registry=registry, cache=tool_cache),
        )
    return Agents(
        orchestrator=orchestrator,
        approvals=gates,
        human=human,
        local_tools=tools,
        mcp=manager,
        tool_cache=tool_cache,
        elicitations=elicitations,
        sampling=sampling,
        registry_of=registry,
        records=records,
        subagent=subagent,
    )
