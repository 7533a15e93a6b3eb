"""The door into the core: everything a front end (the app, `diana`, the gateway) may do.

A front end opens a ``Core`` with a profile (core/profiles.py) and the ports it lends
(core/ports.py), and from then on asks it: calls and their log, proposals and decisions,
servers and their state, agents and their health, usage and cost, memory, the approval
policy, conversations and the chat, and questions to a running app. What it gets back are
the value types of ``diana.core.api.types``; what can go wrong, the errors of
``diana.core.api.errors``; how values read as text, ``diana.core.api.shown``; what changes
while it runs, the events of ``diana.core.events``. Nothing else of the core is public: the
import contracts (pyproject.toml) keep the front ends to these modules, and ``Core`` keeps
the runtime that wires the parts private.

The pure helpers a front end needs to read what a person typed (arguments, JSON, a server
entry, a local tool) are re-exported here too, from where the core keeps them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from ..ports import Ports
from ..profiles import Profile
from .lazy import attribute

if TYPE_CHECKING:
    from ..approvals.hosts_pause import hosts_paused, pause_hosts, resume_hosts
    from ..approvals.policy import Kind as RuleKind
    from ..approvals.policy import PolicyEntry, Rule
    from ..approvals.proposal import Proposal, ProposalStatus
    from ..approvals.service import Decision
    from ..calls.arguments import parse_arguments, prompt_arguments
    from ..calls.sampling_call import asks_sampling
    from ..calls.tool_names import AgentSlot
    from ..chat.chats import Chats
    from ..chat.images import dropped_path, read_image, read_images, stored_images
    from ..chat.session import ChatSession
    from ..config.mcp_servers import (
        MCPServerConfig,
        agent_id_for,
        could_serve,
        load_servers,
        tool_prefix,
    )
    from ..config.settings import Paths, Settings, load_settings, read_json
    from ..content.attachments import split_attachments
    from ..content.jsontext import parse_json
    from ..events import Event, Subscription
    from ..mcp.catalog import (
        can_subscribe,
        complete_argument,
        get_prompt,
        list_prompts,
        list_resources,
        read_resource,
        unwatch_resource,
        watch_resource,
        with_attachments,
    )
    from ..mcp.connection import ServerConnection
    from ..mcp.elicitation_form import check_answer
    from ..mcp.info import ServerInfo
    from ..mcp.pins import ToolChange
    from ..mcp.registry import Answer as RegistryAnswer
    from ..mcp.registry_entry import InstallPlan, RegistryServer
    from ..mcp.servers_document import check_server
    from ..mcp.state import ServerState
    from ..mcp.stdio import MessageSplitter, Oversized
    from ..mcp.subagent import MCPSubagent
    from ..memory import Memory
    from ..models import AgentHealth, ToolDefinition, ToolResult
    from ..runtime import Runtime
    from ..shared.app_requests import Outcome
    from ..shared.applock import app_runs_on
    from ..shared.host_tokens import HostTokens, TokenError
    from ..shared.live import LiveApp, Warn
    from ..shared.queries import Answer as AppAnswer
    from ..storage.call_record import CallRecord
    from ..storage.execution_log import CallsFromElsewhere
    from ..system.browser import open_file, open_url
    from ..system.clock import Clock, parse_since
    from ..system.files import check_save_target, kept_files, save_to
    from ..tools.local import LocalToolSpec, add_tool, load_tools, remove_tool, update_tool
    from ..usage.clients import ClientSummary
    from ..usage.cost import CostSnapshot
    from ..usage.stats import UsageReport

_ORIGINS = {
    "HostTokens": ("diana.core.shared.host_tokens", "HostTokens"),
    "MessageSplitter": ("diana.core.mcp.stdio", "MessageSplitter"),
    "Oversized": ("diana.core.mcp.stdio", "Oversized"),
    "TokenError": ("diana.core.shared.host_tokens", "TokenError"),
    "add_tool": ("diana.core.tools.local", "add_tool"),
    "agent_id_for": ("diana.core.config.mcp_servers", "agent_id_for"),
    "app_runs_on": ("diana.core.shared.applock", "app_runs_on"),
    "asks_sampling": ("diana.core.calls.sampling_call", "asks_sampling"),
    "can_subscribe": ("diana.core.mcp.catalog", "can_subscribe"),
    "check_answer": ("diana.core.mcp.elicitation_form", "check_answer"),
    "check_save_target": ("diana.core.system.files", "check_save_target"),
    "check_server": ("diana.core.mcp.servers_document", "check_server"),
    "complete_argument": ("diana.core.mcp.catalog", "complete_argument"),
    "could_serve": ("diana.core.config.mcp_servers", "could_serve"),
    "dropped_path": ("diana.core.chat.images", "dropped_path"),
    "get_prompt": ("diana.core.mcp.catalog", "get_prompt"),
    "hosts_paused": ("diana.core.approvals.hosts_pause", "hosts_paused"),
    "kept_files": ("diana.core.system.files", "kept_files"),
    "list_prompts": ("diana.core.mcp.catalog", "list_prompts"),
    "list_resources": ("diana.core.mcp.catalog", "list_resources"),
    "load_servers": ("diana.core.config.mcp_servers", "load_servers"),
    "load_settings": ("diana.core.config.settings", "load_settings"),
    "load_tools": ("diana.core.tools.local", "load_tools"),
    "open_file": ("diana.core.system.browser", "open_file"),
    "open_url": ("diana.core.system.browser", "open_url"),
    "parse_arguments": ("diana.core.calls.arguments", "parse_arguments"),
    "parse_json": ("diana.core.content.jsontext", "parse_json"),
    "parse_since": ("diana.core.system.clock", "parse_since"),
    "pause_hosts": ("diana.core.approvals.hosts_pause", "pause_hosts"),
    "plan_install": ("diana.core.mcp.registry_entry", "plan_install"),
    "prompt_arguments": ("diana.core.calls.arguments", "prompt_arguments"),
    "read_image": ("diana.core.chat.images", "read_image"),
    "read_images": ("diana.core.chat.images", "read_images"),
    "read_json": ("diana.core.config.settings", "read_json"),
    "read_resource": ("diana.core.mcp.catalog", "read_resource"),
    "remove_tool": ("diana.core.tools.local", "remove_tool"),
    "resume_hosts": ("diana.core.approvals.hosts_pause", "resume_hosts"),
    "save_to": ("diana.core.system.files", "save_to"),
    "split_attachments": ("diana.core.content.attachments", "split_attachments"),
    "stored_images": ("diana.core.chat.images", "stored_images"),
    "tool_prefix": ("diana.core.config.mcp_servers", "tool_prefix"),
    "unwatch_resource": ("diana.core.mcp.catalog", "unwatch_resource"),
    "update_tool": ("diana.core.tools.local", "update_tool"),
    "watch_resource": ("diana.core.mcp.catalog", "watch_resource"),
    "with_attachments": ("diana.core.mcp.catalog", "with_attachments"),
}


def __getattr__(name: str) -> Any:
    return attribute(__name__, _ORIGINS, name)


__all__ = [
    "Core",
    "HostTokens",
    "MessageSplitter",
    "Oversized",
    "PolicyRules",
    "TokenError",
    "add_tool",
    "agent_id_for",
    "app_runs_on",
    "asks_sampling",
    "can_subscribe",
    "check_answer",
    "check_save_target",
    "check_server",
    "complete_argument",
    "could_serve",
    "dropped_path",
    "get_prompt",
    "hosts_paused",
    "kept_files",
    "list_prompts",
    "list_resources",
    "load_servers",
    "load_settings",
    "load_tools",
    "open_file",
    "open_url",
    "parse_arguments",
    "parse_json",
    "parse_since",
    "pause_hosts",
    "prompt_arguments",
    "read_image",
    "read_images",
    "read_json",
    "read_resource",
    "remove_tool",
    "resume_hosts",
    "save_to",
    "split_attachments",
    "start_servers_early",
    "stop_servers_started_early",
    "stored_images",
    "tool_prefix",
    "unwatch_resource",
    "update_tool",
    "watch_resource",
    "with_attachments",
]


@dataclass(frozen=True)
class PolicyRules:
    """The approval policy in force: its rules, and the file they come from."""

    entries: list[PolicyEntry]
    path: Path  # the file read: the user's policy.json, or the shipped default
    shipped: bool  # there is no policy.json in the config dir
    user_file: Path  # where a change is written


async def start_servers_early(servers: list[MCPServerConfig]) -> None:
    """Begin starting these configured servers' processes while the command still imports
    (core/mcp/launch.py); a runtime opened afterwards takes them up."""
    from ..mcp import launch

    await launch.start_early(servers)


async def stop_servers_started_early() -> None:
    from ..mcp import launch

    await launch.close_early()


class Core:
    """One opened core, as a front end sees it. Open it with ``await Core.open(...)`` and
    close it (or use ``async with``); every method may be called from the front end's event
    loop. A part the profile did not open raises NotOpened (a front end's mistake)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @classmethod
    async def open(
        cls,
        profile: Profile,
        config_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        *,
        ports: Ports | None = None,
        clock: Clock | None = None,
        **options: Any,
    ) -> Core:
        """Read config (ConfigError before anything is written), open the database and the
        parts ``profile`` names; ``ports``: how the core reaches the person in front of this
        front end. ``options``: the runtime's test seams (ids, back-off)."""
        from ..runtime import Runtime

        runtime = await Runtime.open(
            profile, config_dir, data_dir, clock=clock, ports=ports or Ports(), **options
        )
        return cls(runtime)

    async def close(self) -> None:
        """Stop everything, newest part first (CloseError names what failed to close)."""
        await self._runtime.close()

    async def __aenter__(self) -> Core:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- what was opened, and where -------------------------------------------------------

    @property
    def profile(self) -> Profile:
        """The parts this core opened."""
        return self._runtime.profile

    @property
    def paths(self) -> Paths:
        """The config dir and the data dir, and the files in them."""
        return self._runtime.paths

    @property
    def settings(self) -> Settings:
        """settings.json as in force now (the parts that apply live follow the file)."""
        return self._runtime.settings

    @property
    def notices(self) -> list[str]:
        """What opening found and put right, for the person to be told."""
        return self._runtime.notices

    def now(self) -> datetime:
        """The core's clock (a test's clock in tests)."""
        return self._runtime.clock.now()

    def subscribe(self) -> Subscription:
        """The events the core publishes from now on (core/events.py)."""
        return self._runtime.bus.subscribe()

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop receiving events."""
        self._runtime.bus.unsubscribe(subscription)

    def publish(self, event: Event) -> None:
        """Tell every subscriber (the front end's own news, as a Notice)."""
        self._runtime.bus.publish(event)

    def log_event(self, event: str, level: str = "info", **fields: Any) -> None:
        """One line in diana's structured log (the front end's own doings)."""
        self._runtime.log.emit(event, level, **fields)

    # -- calls and their log --------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, origin: str, warn: Warn | None = None
    ) -> ToolResult:
        """A call a person typed (`diana call`, the chat's /call) or a host made, through the
        gate. A command's or a gateway's is run by the diana-tui running on the data dir, if
        one is; ``warn``: told when it does not take the call up, and this process runs it."""
        return await self._runtime.call_tool(name, arguments, origin=origin, warn=warn)

    def cancel_call(self, call_id: int) -> bool:
        """Cancel a running call; whether one was running."""
        return self._runtime.orchestrator.cancel(call_id)

    def tool_definitions(self) -> list[tuple[ToolDefinition, str]]:
        """Every tool the model may call, with the agent that runs it (a gateway opened
        beside a running diana-tui: the app's, as ``wait_servers_ready`` last listed them)."""
        return self._runtime.tool_definitions()

    async def recent_calls(self, limit: int = 50) -> list[CallRecord]:
        """The newest logged calls, oldest first (everything logged so far written first)."""
        return await self._runtime.recent_calls(limit)

    def calls_from_elsewhere(self, after_id: int) -> CallsFromElsewhere:
        """The calls other processes log after row ``after_id``, as they come."""
        return self._runtime.calls_from_elsewhere(after_id)

    async def latest_call_id(self) -> int:
        """The newest logged call's row (everything logged so far written first)."""
        from ..storage.execution_log import latest_call_id

        await self._runtime.execution_log.flush()
        return await latest_call_id(self._runtime.db)

    async def query_calls(self, **filters: Any) -> list[CallRecord]:
        """Logged calls matching every filter (core/storage/execution_log.py query_calls)."""
        from ..storage.execution_log import query_calls

        await self._runtime.execution_log.flush()
        return await query_calls(self._runtime.db, **filters)

    def follow_calls(self, *, after_id: int, **filters: Any) -> AsyncIterator[list[CallRecord]]:
        """Batches of matching calls any process logs after row ``after_id``, forever."""
        from ..storage.execution_log import follow_calls

        return follow_calls(self._runtime.db, after_id=after_id, **filters)

    # -- proposals and decisions ----------------------------------------------------------

    async def proposal(self, proposal_id: str) -> Proposal:
        """The proposal as it is now (UnknownProposal if there is none)."""
        return await self._runtime.approvals.get(proposal_id)

    async def proposals(
        self,
        statuses: tuple[ProposalStatus, ...] | Literal["open"] | None = "open",
        limit: int | None = None,
    ) -> list[Proposal]:
        """Newest first: the open ones, those of ``statuses``, or all (None)."""
        if statuses == "open":
            from ..approvals.proposal import OPEN

            statuses = OPEN
        return await self._runtime.approvals.select(statuses, limit=limit)

    async def proposal_of_call(
        self,
        correlation_id: str,
        tool: str,
        *,
        proposal_id: str | None = None,
        during: tuple[str, str] | None = None,
    ) -> Proposal | None:
        """The proposal behind a logged call of ``tool``, if it waited for a person."""
        return await self._runtime.approvals.find(
            correlation_id, tool, proposal_id=proposal_id, during=during
        )

    async def approve(
        self, proposal_id: str, *, by: str, seen: str | None = None, warn: Warn | None = None
    ) -> Decision:
        """Approve and run the stored call, once; ``seen``: the digest the person was shown.
        A command's approval is run by the diana-tui running on the data dir, if one is
        (``warn``: told when it does not take it up, and this process runs it).
        UnknownProposal, AlreadyDecided, DamagedProposal or ProposalChanged otherwise."""
        return await self._runtime.approve(proposal_id, by=by, seen=seen, warn=warn)

    async def always(
        self, proposal_id: str, rule: Rule, *, by: str, seen: str | None = None
    ) -> Decision:
        """Decide the proposal and keep the answer as a rule for its tool from now on."""
        return await self._runtime.approvals.always(proposal_id, rule, by=by, seen=seen)

    async def reject(self, proposal_id: str, *, by: str, reason: str | None = None) -> Decision:
        """Reject the proposal; its call never runs."""
        return await self._runtime.approvals.reject(proposal_id, by=by, reason=reason)

    async def decided(self, proposal_id: str) -> Proposal:
        """Resolve when a person decides the proposal, here or in another process."""
        return await self._runtime.approvals.wait(proposal_id)

    def policy_rules(self) -> PolicyRules:
        """The rules in force, and the file they come from."""
        policy = self._runtime.approvals.policy
        return PolicyRules(policy.entries(), policy.path, policy.shipped, policy.user_file)

    async def remove_rule(self, name: str, kind: RuleKind | None = None) -> str:
        """Take one rule out of the user's policy.json (UnknownRule); what was removed."""
        return await self._runtime.approvals.policy.remove_rule(name, kind)

    # -- agents ---------------------------------------------------------------------------

    def agent_slots(self) -> list[AgentSlot]:
        """Every registered agent: its state, its error, the tools it answers to."""
        return self._runtime.orchestrator.agent_slots()

    async def health(self) -> list[AgentHealth]:
        """Each agent's health, checked now."""
        return await self._runtime.orchestrator.health()

    def own_agents(self) -> list[str]:
        """The ids of diana's own agents."""
        return self._runtime.own_agents()

    def switchable_agents(self) -> list[str]:
        """The agents a person may stop and start (diana's own)."""
        from ..calls.agent_switches import switchable

        return list(switchable(self._runtime.orchestrator))

    async def switch_agent(self, agent: str, *, stop: bool) -> bool:
        """Stop (or start) one of diana's own agents; whether settings.json changed."""
        return await self._runtime.switch_agent(agent, stop=stop)

    @property
    def local_tools_dir(self) -> Path:
        """Where the scripts of local tools are kept."""
        return self._runtime.local_tools.tools_dir

    async def change_local_tools(
        self, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> list[LocalToolSpec]:
        """Add, change or remove a local tool in tools.json; its tools, as written."""
        return await self._runtime.local_tools.change(change)

    # -- MCP servers ----------------------------------------------------------------------

    @property
    def server_configs(self) -> dict[str, Any]:
        """The configured MCP servers, by name, as this process knows them."""
        return self._runtime.mcp.configs

    def not_configured(self, name: str) -> str:
        """What to say of a server name that is not configured (with the closest names)."""
        return self._runtime.mcp.not_configured(name)

    async def start_servers(self) -> None:
        """Connect every configured MCP server, for a core opened without them."""
        await self._runtime.start_servers()

    async def wait_servers_ready(self, names: list[str] | None = None) -> None:
        """Until each server (or every one) has had its first attempt to connect (a gateway
        opened beside a running diana-tui: the app's tools listed again)."""
        await self._runtime.wait_servers_ready(names)

    def servers_for_tool(self, tool: str) -> list[str]:
        """The configured servers that could hold a tool of this name."""
        return self._runtime.mcp.servers_for_tool(tool)

    def server_diagnostics(self) -> list[ServerInfo]:
        """Every configured server, as the app and `diana servers` show it."""
        return self._runtime.mcp.all_diagnostics()

    def server_diagnostic(self, name: str) -> ServerInfo:
        """One started or disabled server, as the app and `diana servers` show it."""
        return self._runtime.mcp.diagnostics(name)

    def server_state(self, name: str) -> ServerState:
        """A started server's connection state."""
        return self._runtime.mcp.state_of(name)

    async def reconnect(self, server: str | None = None) -> list[str]:
        """Reconnect one server (or every one); the names reconnecting. KeyError if unknown."""
        return await self._runtime.mcp.reconnect(server)

    async def wait_reconnected(self, names: list[str]) -> None:
        """Until each of these servers has made its attempt after a reconnect."""
        await self._runtime.mcp.wait_reconnected(names)

    async def sign_in(
        self, server: str, show_url: Callable[[str], Any] | None = None
    ) -> ServerConnection:
        """Sign in to an HTTP server (OAuth), ``show_url`` telling the person where."""
        return await self._runtime.mcp.sign_in(server, show_url=show_url)

    def sign_out(self, server: str) -> bool:
        """Forget the tokens kept for a server; whether there were any."""
        from ..mcp.tokens import forget

        return forget(self._runtime.paths.data_dir, server)

    def signed_in(self, server: str) -> bool:
        """Tokens are kept for the server."""
        from ..mcp.tokens import read_kept, token_file

        return "tokens" in read_kept(token_file(self._runtime.paths.data_dir, server))

    def upstream_names(self, server: str) -> dict[str, str]:
        """The server's tools as it names them itself, by the name diana exposes each under
        (`diana serve --only SERVER` shows them so)."""
        return self._runtime.mcp.upstream_names(server)

    def connection_of(self, server: str) -> ServerConnection | None:
        """The server's connection if it has been started."""
        return self._runtime.mcp.connection_of(server)

    async def connected(self, server: str) -> ServerConnection:
        """The server's connection, once connected (CatalogError saying why not)."""
        return await self._runtime.mcp.connected(server)

    def started_connections(self) -> list[tuple[str, ServerConnection]]:
        """The servers started so far, with their connections."""
        return self._runtime.mcp.started_connections()

    @property
    def server_requests(self) -> MCPSubagent:
        """The requests that add, change, test, enable and remove MCP servers."""
        return self._runtime.subagent

    async def answer(
        self,
        kind: str,
        server: str | None,
        params: dict[str, Any] | None = None,
        *,
        warn: Warn,
        start: bool = False,
    ) -> tuple[AppAnswer, LiveApp | None]:
        """The answer to a question about the agents and servers (core/shared/queries.py:
        tools, health, resources, prompts, a resource, a prompt), and the app that gave it.
        The diana-tui running on this data dir answers on its live connections; when none
        runs, or it does not answer (``warn`` is told why), this process answers on servers
        of its own (``start``: every one started first). UnknownServer for a server name
        neither knows."""
        from ..shared.app_requests import AppGone, UnknownServer
        from ..shared.queries import answer
        from ..storage.db import StorageError

        app = await self.running_app(warn)
        if app is not None:
            try:
                return await self.ask_app_question(app, kind, server, params), app
            except (AppGone, StorageError) as exc:
                warn(f"{exc}; answering with this command's own servers")
        runtime = self._runtime
        if start:
            await runtime.start_servers()
        try:
            found = await answer(
                kind, runtime.mcp, server, params or {}, now=runtime.clock.now, here=True
            )
        except KeyError:
            raise UnknownServer(runtime.mcp.not_configured(str(server))) from None
        return found, None

    # -- the MCP Registry -----------------------------------------------------------------

    @property
    def registry_url(self) -> str:
        """The MCP Registry servers are found in (settings.json `registry.url`)."""
        return self._runtime.registry.url

    async def registry_search(self, name: str, *, limit: int = 10) -> RegistryAnswer:
        """The registry's servers with ``name`` in theirs (RegistryError saying why not)."""
        return await self._runtime.registry.search(name, limit=limit)

    async def registry_server(self, name: str, version: str | None = None) -> RegistryServer:
        """One registry entry, its latest version or ``version``."""
        return await self._runtime.registry.server(name, version)

    def registry_public(self, entry: RegistryServer | RegistryAnswer) -> dict[str, Any]:
        """An entry (or a search's entries) as shown: how each would run here, and what
        its addresses may reach."""
        registry = self._runtime.registry
        return entry.public(servers_dir=registry.servers_dir, rule=registry.address_rule)

    def install_plan(self, entry: RegistryServer) -> InstallPlan:
        """How this machine would run the entry: the first package it can run, else a
        remote (RegistryEntryError saying why none)."""
        from ..mcp.registry_entry import plan_install

        registry = self._runtime.registry
        return plan_install(entry, servers_dir=registry.servers_dir, rule=registry.address_rule)

    async def check_remote(self, plan: InstallPlan, values: dict[str, str]) -> None:
        """A remote entry's address, as filled in, passes web_fetch's address rule
        (RegistryEntryError)."""
        from ..mcp.registry_entry import check_remote

        await check_remote(plan, values, self._runtime.registry.address_rule)

    # -- usage and cost -------------------------------------------------------------------

    def cost(self) -> CostSnapshot:
        """Units per agent and server, and the daily budget, now."""
        return self._runtime.cost.snapshot()

    def track_server(self, server: str, agent: str) -> None:
        """Count a configured server's units under its name."""
        self._runtime.cost.track_server(server, agent)

    async def usage(
        self, servers: dict[str, str], *, builtin: Iterable[str] = (), **filters: Any
    ) -> UsageReport:
        """The figures for the calls logged (core/usage/stats.py usage)."""
        from ..usage.stats import usage

        await self._runtime.execution_log.flush()
        return await usage(self._runtime.db, servers, builtin=tuple(builtin), **filters)

    # -- memory, the chat, conversations ---------------------------------------------------

    @property
    def memory(self) -> Memory:
        """The facts DIANA remembers, found by words and meaning."""
        return self._runtime.memory

    @property
    def chat(self) -> ChatSession:
        """The conversation with the local model (made when first used)."""
        return self._runtime.chat

    @property
    def chats(self) -> Chats:
        """The stored conversations: list, search, rename, delete, export."""
        return self._runtime.chats

    def elicitations_waiting(self) -> int:
        """Servers' questions waiting behind the one being asked."""
        return self._runtime.elicitations.waiting

    # -- a running app on the same data dir ------------------------------------------------

    async def running_app(self, warn: Warn | None = None) -> LiveApp | None:
        """The diana-tui running on this data dir and config dir, if one is."""
        return await self._runtime.running_app(warn)

    async def ask_app(
        self,
        app: LiveApp,
        kind: str,
        server: str | None,
        params: dict[str, Any] | None = None,
        **patience: float,
    ) -> Outcome:
        """Ask the running app to carry out one request (AppGone if it does not)."""
        from ..shared.app_requests import ask_app

        runtime = self._runtime
        return await ask_app(
            runtime.db, runtime.paths, app, kind, server, runtime.clock, params=params, **patience
        )

    async def ask_app_question(
        self, app: LiveApp, kind: str, server: str | None, params: dict[str, Any] | None = None
    ) -> AppAnswer:
        """The running app's answer to a question (UnknownServer, AppGone)."""
        from ..shared.app_requests import ask_app_question

        runtime = self._runtime
        return await ask_app_question(
            runtime.db, runtime.paths, app, kind, server, runtime.clock, params
        )

    async def app_servers(self, app: LiveApp, warn: Warn | None = None) -> list[ServerInfo]:
        """The running app's servers as it last wrote them."""
        from ..shared.live import app_servers

        return await app_servers(self._runtime.db, app, self._runtime.clock.now(), warn)

    # -- the gateway ----------------------------------------------------------------------

    async def withdraw(self, proposal_id: str, *, reason: str) -> Proposal:
        """Withdraw a pending proposal whose caller stopped waiting: it never runs, and
        ``reason`` says why (AlreadyDecided if a person decided it first)."""
        return (await self._runtime.approvals.withdraw(proposal_id, reason)).proposal

    def outcome(self, proposal: Proposal) -> ToolResult:
        """What a decided proposal means to the caller that waited for it: the call's
        result, or a failure saying it was rejected (with the reason), failed or withdrawn."""
        from ..approvals.service import result_of

        return result_of(proposal)[0]

    async def clients(self) -> list[ClientSummary]:
        """Every host seen calling through `diana serve` or holding a token for --http: its
        calls, its proposals waiting now, its last call (core/usage/clients.py)."""
        from ..shared.host_tokens import HostTokens, TokenError
        from ..usage.clients import clients

        try:
            with_tokens = [token.name for token in HostTokens(self.paths.data_dir).listed()]
        except TokenError:
            with_tokens = []
        await self._runtime.execution_log.flush()
        return await clients(self._runtime.db, with_tokens)

    def hosts_paused(self) -> str | None:
        """Why every host's call waits for a person now (`diana serve pause`), or None."""
        from ..approvals.hosts_pause import hosts_paused

        return hosts_paused(self.paths.data_dir)

    def pause_hosts(self, by: str) -> bool:
        """Every host's call waits for a person until resumed; whether they were running."""
        from ..approvals.hosts_pause import pause_hosts

        return pause_hosts(self.paths.data_dir, by, self.now())

    def resume_hosts(self) -> bool:
        """Hosts' calls pass the policy again; whether they were paused."""
        from ..approvals.hosts_pause import resume_hosts

        return resume_hosts(self.paths.data_dir)

    # -- tool pins ---------------------------------------------------------------------------

    async def tool_changes(self) -> list[ToolChange]:
        """Every MCP server tool held because its definition changed since it was accepted,
        with the definition accepted and the one offered now."""
        from ..mcp.pins import ToolPins

        runtime = self._runtime
        return await ToolPins(runtime.db, runtime.clock).changes()

    async def accept_tool(self, name: str) -> list[ToolChange]:
        """A person accepts a held tool's new definition: callable again, in every process
        from its next call (UnknownHeldTool if no tool of that name is held)."""
        from ..mcp.pins import ToolPins

        runtime = self._runtime
        return await ToolPins(runtime.db, runtime.clock, runtime.log).accept(name)
