"""The orchestrator: the one registry of agents and tools, and the one way to call a tool."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import difflib
import itertools
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import tracing
from .agents import Agent, AgentFactory
from .arguments import argument_problem, field_path
from .calls import call_status, shown_arguments
from .clock import Clock, SystemClock
from .events import (
    AgentHealthChanged,
    AgentStateChanged,
    CallFinished,
    CallProgress,
    CallStarted,
    EventBus,
    Notice,
    ToolsChanged,
)
from .execution_log import ExecutionLog
from .models import (
    AGENT_ID_PATTERN,
    AgentError,
    AgentHealth,
    AgentState,
    ErrorCode,
    HealthStatus,
    ToolDefinition,
    ToolResult,
)
from .telemetry import (
    StructuredLog,
    ToolMetrics,
    current_correlation_id,
    is_secret_name,
    new_correlation_id,
    redact,
    reset_correlation_id,
    set_correlation_id,
)
from .text import without_surrogates

if TYPE_CHECKING:  # jsonschema is imported by the first schema checked or call validated
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

DEFAULT_TOOL_TIMEOUT = 30.0
INIT_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 5.0
HEALTH_TIMEOUT = 1.0
HEALTH_LOG_EVERY = 60.0  # seconds between logged health rounds when nothing changed
IN_FLIGHT_GRACE = 0.5


@dataclass
class AgentSlot:
    """What the orchestrator knows of one registered agent factory."""

    name: str
    factory: AgentFactory
    agent: Agent | None = None
    state: AgentState = AgentState.STOPPED
    error: str | None = None
    tools: list[str] = field(default_factory=list)  # the names it answers to
    health: AgentHealth | None = None
    # The MCP server this agent stands for; None for one of diana's own agents.
    server: str | None = None
    # Every tool it offers that passed its own checks, by name: those in ``tools``, and any
    # refused because another agent offers the same name (given back when that one goes).
    offered: dict[str, RegisteredTool] = field(default_factory=dict)
    # Why it was stopped, when a person stopped it, and how to start it again.
    stopped_note: str | None = None

    @property
    def label(self) -> str:
        """The agent as a person knows it, in a message."""
        return f"MCP server {self.server}" if self.server is not None else f"agent {self.name}"

    @property
    def callable(self) -> bool:
        return self.agent is not None and self.state in (
            AgentState.INITIALIZED,
            AgentState.RUNNING,
        )


@dataclass(frozen=True)
class GateRequest:
    """A valid call about to run, as the approval gate sees it."""

    definition: ToolDefinition
    agent: str
    arguments: dict[str, Any]
    confidence: float | None
    correlation_id: str
    origin: str
    approved: bool = False  # a person approved this exact call; only a deny still stops it


Gate = Callable[[GateRequest], Awaitable[ToolResult | None]]


class PersonWaits:
    """How long each agent's calls have waited on a person (a question, a form, an approval
    asked on their behalf): waiting, not work, so a call is not charged for it. Per agent,
    a reading that grows by one per second while anything is being asked for that agent."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._open: Counter[str] = Counter()
        self._since: dict[str, float] = {}
        self._waited: defaultdict[str, float] = defaultdict(float)

    def reading(self, agent: str) -> float:
        """Seconds the agent's calls have waited on a person so far."""
        waited = self._waited[agent]
        if self._open[agent]:
            waited += self._clock.monotonic() - self._since[agent]
        return waited

    @contextlib.contextmanager
    def waiting(self, agent: str) -> Iterator[None]:
        """While a person is asked something for ``agent`` (asked at once counts once)."""
        if not self._open[agent]:
            self._since[agent] = self._clock.monotonic()
        self._open[agent] += 1
        try:
            yield
        finally:
            self._open[agent] -= 1
            if not self._open[agent]:
                self._waited[agent] += self._clock.monotonic() - self._since.pop(agent)
                del self._open[agent]


@dataclass(frozen=True)
class RunningCall:
    """The call an agent is running, as its agent can see it (``RUNNING_CALL``)."""

    call_id: int
    correlation_id: str
    tool: str
    agent: str = ""
    waits: PersonWaits | None = None


RUNNING_CALL: contextvars.ContextVar[RunningCall | None] = contextvars.ContextVar(
    "running_call", default=None
)


@contextlib.contextmanager
def waiting_for_person() -> Iterator[None]:
    """Around what a running call waits for a person to do: that time is not charged."""
    call = RUNNING_CALL.get()
    if call is None or call.waits is None:
        yield
        return
    with call.waits.waiting(call.agent):
        yield


@dataclass
class RegisteredTool:
    definition: ToolDefinition
    agent_id: str
    timeout: float
    schema_checked: bool = True  # else checked at the first call (AgentManifest)
    _validator: Draft202012Validator | None = None

    def first_error(self, params: dict[str, Any]) -> ValidationError | None:
        """The argument error a person most needs to see, or None if the call is valid."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match

        if self._validator is None:  # made for the first call
            self._validator = Draft202012Validator(self.definition.parameters)
        error: ValidationError | None = best_match(self._validator.iter_errors(params))
        return error


def schema_problem(schema: dict[str, Any]) -> str | None:
    """What makes a tool's parameter schema invalid, or None. Checking a schema against
    JSON Schema's own takes milliseconds: a `diana` command checks only what it calls."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return None


def describe_validation_error(error: ValidationError) -> str:
    """One line naming the argument that failed and why."""
    path = field_path(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        prefix = f"{path}." if path else ""
        return f'missing required argument "{prefix}{missing[0]}"'
    alternatives = _required_alternatives(error)
    if alternatives:
        prefix = f"{path}." if path else ""
        names = " or ".join(f'"{prefix}{name}"' for name in alternatives)
        return f"give exactly one of the arguments {names}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        prefix = f"{path}." if path else ""
        return f'unexpected argument "{prefix}{extra[0]}"' if extra else error.message
    if any(isinstance(part, str) and is_secret_name(part) for part in error.absolute_path):
        # The message would quote the value: say which rule failed, never what was given.
        return f'argument "{path}" does not satisfy "{error.validator}" (value hidden)'
    if path:
        return f'argument "{path}": {error.message}'
    return f"arguments: {error.message}"


def _required_alternatives(error: ValidationError) -> list[str]:
    """The arguments of a ``oneOf`` whose branches each require one of them (``{"oneOf":
    [{"required": ["a"]}, {"required": ["b"]}]}``); [] for any other failure."""
    branches = error.validator_value if error.validator == "oneOf" else None
    if not isinstance(branches, list) or not branches:
        return []
    names = []
    for branch in branches:
        required = branch.get("required") if isinstance(branch, dict) else None
        if set(branch) != {"required"} or not isinstance(required, list) or len(required) != 1:
            return []
        names.append(str(required[0]))
    return names


@dataclass
class _Call:
    """One call while it is carried out: what was asked, and how far it got."""

    call_id: int
    correlation_id: str
    tool: str
    params: Any
    shown: dict[str, Any]  # the arguments redacted, as every record of the call has them
    origin: str
    confidence: float | None
    approved: str | None  # the proposal a person approved for it
    approved_agent: str | None  # the agent whose tool that proposal was made for
    started_at: datetime
    start: float  # the clock's monotonic reading at the start
    agent: str | None = None
    ran: bool = False  # handed to its agent (only then does it cost anything)
    waited_from: float = 0.0  # its agent's PersonWaits reading when it was handed over


class Orchestrator:
    """Routes tool calls to agents: validation, timeout, metrics, events and the log."""

    def __init__(
        self,
        *,
        bus: EventBus | None = None,
        log: StructuredLog | None = None,
        execution_log: ExecutionLog | None = None,
        clock: Clock | None = None,
        default_timeout: float = DEFAULT_TOOL_TIMEOUT,
        tool_timeouts: dict[str, float] | None = None,
        health_timeout: float = HEALTH_TIMEOUT,
        shutdown_timeout: float = SHUTDOWN_TIMEOUT,
        init_timeout: float = INIT_TIMEOUT,
        new_id: Callable[[], str] = new_correlation_id,
        defer_schema_checks: bool = False,
        on_call_finished: Callable[[CallFinished], None] | None = None,
    ) -> None:
        self.bus = bus or EventBus()
        # A `diana` command checks a tool's parameter schema at its first call, not at
        # registration (checking all of them would take longer than the command).
        self._defer_schema_checks = defer_schema_checks
        self._log = log
        self._execution_log = execution_log
        self._clock = clock or SystemClock()
        self._default_timeout = default_timeout
        self._tool_timeouts = dict(tool_timeouts or {})
        self._health_timeout = health_timeout
        self._health_logged_at = -math.inf  # time.monotonic() of the last logged health round
        self._shutdown_timeout = shutdown_timeout
        self._init_timeout = init_timeout
        self._slots: dict[str, AgentSlot] = {}
        self._tools: dict[str, RegisteredTool] = {}
        self._metrics: dict[str, ToolMetrics] = {}
        self._call_ids = itertools.count(1)
        self._new_id = new_id
        # Tools of agents that are stopped or failed, so a call can say why it cannot run.
        self._offline_tools: dict[str, str] = {}
        # Names no agent answers to because several offer them: why, for a call of one.
        self._refused: dict[str, str] = {}
        # Each name refused to some agents: who kept it, and who was refused (warned once).
        self._refusals: dict[str, tuple[str | None, frozenset[str]]] = {}
        self._shutting_down = False
        self._in_flight: dict[asyncio.Task[Any], asyncio.Event] = {}
        self._running: dict[int, asyncio.Future[ToolResult]] = {}  # the agents' work, by call
        # Decides, before a valid call runs, whether it must wait for a person (approvals).
        self.gate: Gate | None = None
        # Explains a name no running agent offers (an MCP server that is not connected yet).
        # Why a tool no agent offers now cannot run, and whose it would be (its calls are
        # filed under that agent), if anyone knows: the MCP manager does.
        self.missing_tool_hint: Callable[[str], tuple[ToolResult, str | None] | None] | None = None
        # Told of every finished call, after the bus and the log (the cost ledger).
        self.on_call_finished = on_call_finished
        # What agents' calls wait on a person, not charged (request_human_input, a server's
        # questions and requests to the model a person decides).
        self.person_waits = PersonWaits(self._clock)

    # -- registry -------------------------------------------------------------------------

    def register_agent_factory(
        self, name: str, factory: AgentFactory, *, server: str | None = None
    ) -> None:
        """``server``: the MCP server the agent stands for. A server's tool never takes a
        name one of diana's own agents offers, and a name two servers offer is refused for
        both (whichever started first): one name is one tool, whose risk was judged."""
        if not re.fullmatch(AGENT_ID_PATTERN, name):
            raise ValueError(f"agent name {name!r} must match {AGENT_ID_PATTERN}")
        if name in self._slots:
            raise ValueError(f"an agent factory named {name!r} is already registered")
        self._slots[name] = AgentSlot(name=name, factory=factory, server=server)

    def agent_slots(self) -> list[AgentSlot]:
        return list(self._slots.values())

    def definition(self, tool_name: str) -> ToolDefinition | None:
        """The registered definition of a tool, or None."""
        tool = self._tools.get(tool_name)
        return None if tool is None else tool.definition

    def owner(self, tool_name: str) -> str | None:
        """The id of the agent a tool name now leads to, or None."""
        tool = self._tools.get(tool_name)
        return None if tool is None else tool.agent_id

    def offered(self, agent_id: str) -> list[str]:
        """Every tool the agent offers that passed its own checks, whether it answers to the
        name or the name was refused because another agent offers it too."""
        slot = self._slots.get(agent_id)
        return [] if slot is None else list(slot.offered)

    def server_of_agent(self, agent_id: str) -> str | None:
        """The MCP server an agent stands for; None for diana's own agents (or none)."""
        slot = self._slots.get(agent_id)
        return None if slot is None else slot.server

    def tool_definitions(self) -> list[tuple[ToolDefinition, str]]:
        """Every callable tool with the id of the agent that provides it, by name (not the
        ones diana calls only itself)."""
        return [
            (tool.definition, tool.agent_id)
            for name, tool in sorted(self._tools.items())
            if self._slots[tool.agent_id].callable and not tool.definition.internal
        ]

    def model_tools(self) -> list[ToolDefinition]:
        """The tools the model is offered: every callable one that is available now."""
        return [d for d, _agent in self.tool_definitions() if d.unavailable is None]

    def unavailable_tools(self) -> list[ToolDefinition]:
        """Tools that exist but are not offered to the model, each saying why."""
        return [d for d, _agent in self.tool_definitions() if d.unavailable is not None]

    def ollama_tools(self) -> list[dict[str, Any]]:
        """The tool manifest in the shape Ollama's /api/chat takes."""
        return [
            {
                "type": "function",
                "function": {
                    "name": definition.name,
                    "description": definition.description,
                    "parameters": definition.parameters,
                },
            }
            for definition in self.model_tools()
        ]

    def metrics(self) -> dict[str, dict[str, Any]]:
        return {name: m.summary() for name, m in sorted(self._metrics.items())}

    # -- lifecycle ------------------------------------------------------------------------

    async def start_all(self) -> None:
        """Start every stopped agent concurrently; failures are logged and skipped."""
        await asyncio.gather(
            *(self.start_agent(name) for name, s in self._slots.items() if not s.callable)
        )

    async def start_agent(self, name: str) -> bool:
        slot = self._slot(name)
        if slot.callable:
            return True
        slot.stopped_note = None
        try:
            agent = slot.factory()
            async with asyncio.timeout(self._init_timeout):
                await agent.initialize()
            manifest = agent.get_manifest()
            if manifest.id != name:
                raise AgentError(
                    ErrorCode.AGENT_INIT_FAILED,
                    f"manifest id {manifest.id!r} does not match the factory name {name!r}",
                )
        except Exception as exc:
            message = _describe_exception(exc, f"did not initialize within {self._init_timeout} s")
            slot.agent, slot.state, slot.error = None, AgentState.FAILED, message
            self._emit("agent.start_failed", "error", agent=name, error=message)
            self.bus.publish(AgentStateChanged(name, AgentState.FAILED, message))
            return False
        slot.agent, slot.state, slot.error = agent, AgentState.INITIALIZED, None
        others = self._register_tools(name, manifest.tools, manifest.defer_schema_checks)
        self._emit("agent.started", agent=name, tools=len(slot.tools))
        self.bus.publish(AgentStateChanged(name, AgentState.INITIALIZED))
        self._tools_changed(others)
        return True

    async def stop_agent(self, name: str, note: str | None = None) -> None:
        """Stop an agent; its tools answer agent_unavailable until it starts again (``note``:
        why, and how to start it, for a person's stop)."""
        slot = self._slot(name)
        slot.stopped_note = note
        answered = list(slot.tools)
        claimed, slot.offered = list(slot.offered), {}
        others = self._settle(claimed) - {name}
        for tool_name in answered:
            if tool_name not in self._tools:  # a call of it can say why it cannot run
                self._offline_tools[tool_name] = name
        agent, slot.agent = slot.agent, None
        if slot.state is not AgentState.FAILED:
            slot.state = AgentState.STOPPED
        if agent is None:
            return
        try:
            async with asyncio.timeout(self._shutdown_timeout):
                await agent.shutdown()
        except Exception as exc:
            message = _describe_exception(
                exc, f"did not shut down within {self._shutdown_timeout} s"
            )
            slot.error = message
            self._emit("agent.shutdown_failed", "warning", agent=name, error=message)
        else:
            self._emit("agent.stopped", agent=name)
        self.bus.publish(AgentStateChanged(name, AgentState.STOPPED, slot.error))
        self._tools_changed(others)

    def refresh_tools(self, name: str) -> list[str]:
        """Re-read a running agent's manifest and register its tools anew (an MCP server
        whose tool list changed). Returns the tools now registered for it."""
        slot = self._slot(name)
        if slot.agent is None:
            return []
        manifest = slot.agent.get_manifest()
        others = self._register_tools(name, manifest.tools, manifest.defer_schema_checks)
        self._emit("agent.tools_refreshed", agent=name, tools=len(slot.tools))
        self.bus.publish(ToolsChanged(name, list(slot.tools)))
        self._tools_changed(others)
        return list(slot.tools)

    def _tools_changed(self, agents: Iterable[str]) -> None:
        """Other agents whose tools changed because of one agent's: one whose name was
        refused, or given back."""
        for name in sorted(agents):
            slot = self._slots.get(name)
            if slot is not None and slot.agent is not None:
                self.bus.publish(ToolsChanged(name, list(slot.tools)))

    async def remove_agent(self, name: str) -> None:
        """Stop an agent and forget its factory (a server removed from the config)."""
        await self.stop_agent(name)
        del self._slots[name]
        for tool_name in [t for t, owner in self._offline_tools.items() if owner == name]:
            del self._offline_tools[tool_name]
        self.bus.publish(AgentStateChanged(name, AgentState.STOPPED, "removed"))

    async def restart_agent(self, name: str) -> bool:
        await self.stop_agent(name)
        return await self.start_agent(name)

    async def shutdown(self, grace: float = IN_FLIGHT_GRACE) -> None:
        """Let calls in flight finish for ``grace`` seconds, cancel the rest (they are recorded
        as cancelled), then stop every agent in parallel, each bounded by its timeout."""
        self._shutting_down = True  # names given back now are not news
        current = asyncio.current_task()
        waiting = {t: e for t, e in self._in_flight.items() if t is not current}
        if waiting:
            await _wait_events(list(waiting.values()), grace)
            for task, done in waiting.items():
                if not done.is_set():
                    task.cancel()
            await _wait_events(list(waiting.values()), grace)
        await asyncio.gather(*(self.stop_agent(name) for name in self._slots))

    def _register_tools(
        self, agent_id: str, definitions: Iterable[ToolDefinition], defer_checks: bool = False
    ) -> set[str]:
        """Take the agent's tools as what it offers now, then settle who answers to each name
        it offered before or offers now. Returns the other agents whose tools changed."""
        slot = self._slots[agent_id]
        definitions = list(definitions)
        defer_checks = defer_checks or self._defer_schema_checks
        named = Counter(d.name for d in definitions)
        offered: dict[str, RegisteredTool] = {}
        for definition in definitions:
            if named[definition.name] > 1:
                # One name, several definitions: the risk judged might not be the one run.
                self._reject_tool(
                    "tool.ambiguous_rejected",
                    f"tool {definition.name} from {slot.label} was rejected: it lists "
                    f"{named[definition.name]} tools by that name",
                    tool=definition.name,
                    agent=agent_id,
                )
                continue
            problem = None if defer_checks else schema_problem(definition.parameters)
            if problem is not None:
                self._reject_tool(
                    "tool.schema_rejected",
                    f"tool {definition.name} from {slot.label} has an invalid "
                    f"parameter schema: {problem}",
                    tool=definition.name,
                    agent=agent_id,
                    error=problem,
                )
                continue
            timeout = self._tool_timeouts.get(
                definition.name, definition.timeout or self._default_timeout
            )
            offered[definition.name] = RegisteredTool(
                definition, agent_id, timeout, schema_checked=not defer_checks
            )
        before, slot.offered = slot.offered, offered
        return self._settle([*before, *offered]) - {agent_id}

    def _settle(self, names: Iterable[str]) -> set[str]:
        """Decide, for each name, the agent that answers to it: the one agent that offers
        it; of several, the first of diana's own agents (a server never takes one of their
        names), or none when only servers offer it, so which server started first never
        decides which tool runs. Returns the agents whose tools changed."""
        changed: set[str] = set()
        for name in dict.fromkeys(names):
            claimants = [slot for slot in self._slots.values() if name in slot.offered]
            ours = [slot for slot in claimants if slot.server is None]
            owner = ours[0] if ours else claimants[0] if len(claimants) == 1 else None
            was = self._tools.pop(name, None)
            if was is not None and (owner is None or owner.name != was.agent_id):
                holder = self._slots.get(was.agent_id)
                if holder is not None and name in holder.tools:
                    holder.tools.remove(name)
                changed.add(was.agent_id)
            if owner is not None:
                self._tools[name] = owner.offered[name]
                self._metrics.setdefault(name, ToolMetrics())
                self._offline_tools.pop(name, None)
                if name not in owner.tools:
                    owner.tools.append(name)
                    changed.add(owner.name)
            self._note_refusals(name, owner, [slot for slot in claimants if slot is not owner])
        return changed

    def _note_refusals(self, name: str, owner: AgentSlot | None, refused: list[AgentSlot]) -> None:
        """Warn of a name refused to some agents, once for each new set of them; tell when
        it is given back to the one agent left offering it."""
        seen = self._refusals.get(name)
        if not refused:
            self._refused.pop(name, None)
            if seen is not None:
                del self._refusals[name]
                if owner is not None:
                    self._emit("tool.given_back", tool=name, agent=owner.name)
                    if not self._shutting_down:
                        self.bus.publish(
                            Notice(
                                "information",
                                f"tool {name} of {owner.label} is offered again: "
                                "no other agent offers that name now",
                            )
                        )
            return
        now = (owner.name if owner else None, frozenset(slot.name for slot in refused))
        if now == seen:
            return
        self._refusals[name] = now
        if owner is not None:
            self._refused.pop(name, None)
            for slot in refused:
                self._reject_tool(
                    "tool.duplicate_rejected",
                    f"tool {name} from {slot.label} was rejected: {owner.label} provides it",
                    tool=name,
                    agent=slot.name,
                    kept=owner.name,
                )
            return
        labels = _joined([slot.server or slot.name for slot in refused])
        none = "neither" if len(refused) == 2 else "none"
        self._refused[name] = (
            f"{name} is not offered: MCP servers {labels} each offer a tool by that name, "
            f"so {none} is (rename one of the servers to use them)"
        )
        self._reject_tool(
            "tool.clash_rejected",
            f"tool {name} was refused on MCP servers {labels}: each offers a tool by that "
            f"name, so {none} is offered (rename one of the servers to use them)",
            tool=name,
            agents=sorted(slot.name for slot in refused),
        )

    def check_schemas(self) -> None:
        """Check now every parameter schema left for the first call; a tool whose schema is
        invalid is rejected as it would have been at registration."""
        for name, tool in list(self._tools.items()):
            if tool.schema_checked:
                continue
            problem = schema_problem(tool.definition.parameters)
            if problem is None:
                tool.schema_checked = True
                continue
            slot = self._slots[tool.agent_id]
            del slot.offered[name]
            self._tools_changed(self._settle([name]) - {slot.name})
            self._reject_tool(
                "tool.schema_rejected",
                f"tool {name} from {slot.label} has an invalid parameter schema: {problem}",
                tool=name,
                agent=tool.agent_id,
                error=problem,
            )

    def _reject_tool(self, event: str, message: str, **fields: Any) -> None:
        """A tool that cannot be registered: a warning in the log and on screen."""
        self._emit(event, "warning", **fields)
        self.bus.publish(Notice("warning", message))

    def _slot(self, name: str) -> AgentSlot:
        try:
            return self._slots[name]
        except KeyError:
            raise AgentError(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name}") from None

    # -- calls ----------------------------------------------------------------------------

    def closest_tools(self, name: str, limit: int = 3) -> list[str]:
        names = list(self._tools)
        close = difflib.get_close_matches(name, names, n=limit, cutoff=0.5)
        for candidate in sorted(names):
            if len(close) >= limit:
                break
            if candidate not in close and (name in candidate or candidate in name):
                close.append(candidate)
        return close

    def unknown_tool(self, name: str, note: str | None = None) -> ToolResult:
        """No agent offers ``name``: the closest names that exist, and ``note`` in brackets."""
        close = self.closest_tools(name)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        said = f" ({note})" if note else ""
        return ToolResult.fail(
            ErrorCode.TOOL_NOT_FOUND, f"unknown tool {name}{hint}{said}", data={"closest": close}
        )

    async def execute(
        self,
        tool_name: str,
        params: dict[str, Any] | None = None,
        *,
        correlation_id: str | None = None,
        origin: str = "api",
        confidence: float | None = None,
        approved: str | None = None,
        approved_agent: str | None = None,
        internal: bool = False,
        status: list[str] | None = None,
    ) -> ToolResult:
        """Validate and run one call. Never raises for a failure of the call itself.
        ``status``, if given, is told how the call ended, as its record says it (a call that
        reached its agent failed, it was not refused, whatever its error code).
        ``approved`` is for the approvals service only: the id of the proposal a person
        approved for this call (the gate still sees it: a deny written since stops it), and
        ``approved_agent`` the agent whose tool it was: another agent's tool of that name
        now is not run in its place.
        ``internal``: diana itself makes the call, as only it may call a tool marked
        internal (an approved call of one was made so too)."""
        cid = correlation_id or current_correlation_id() or self._new_id()
        # A name with undecodable bytes names no tool; shown and stored with U+FFFD instead.
        tool_name = without_surrogates(tool_name)
        definition = self.definition(tool_name)
        if definition is not None and definition.internal and not (internal or approved):
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND,
                f"{tool_name} is made by diana for an MCP server's request; "
                "it cannot be called by name",
            )
        params = params if params is not None else {}
        call = _Call(
            call_id=next(self._call_ids),
            correlation_id=cid,
            tool=tool_name,
            params=params,
            shown=shown_arguments(params),  # redacted once, for every record of the call
            origin=origin,
            confidence=confidence,
            approved=approved,
            approved_agent=approved_agent,
            started_at=self._clock.now(),
            start=self._clock.monotonic(),
        )
        token = set_correlation_id(cid)
        try:
            result = await self._execute(call)
        finally:
            reset_correlation_id(token)
        if status is not None:
            status.append(call_status(result, ran=call.ran))
        return result

    async def _execute(self, call: _Call) -> ToolResult:
        tool = self._tools.get(call.tool)
        call.agent = tool.agent_id if tool else self._offline_tools.get(call.tool)
        task = asyncio.current_task()
        done = asyncio.Event()
        if task is not None:
            self._in_flight[task] = done
        tool_name, params, confidence, cid = (
            call.tool,
            call.shown,
            call.confidence,
            call.correlation_id,
        )
        tracer = tracing.tracer
        span = tracer.start_tool_call(tool_name, params, confidence, cid) if tracer else None
        # Whatever happens below, even cancellation, the call is recorded exactly once.
        result = ToolResult.fail(ErrorCode.CANCELLED, f"{call.tool} was cancelled")
        try:
            result = await self._dispatch(call, tool)
            return result
        finally:
            if task is not None:
                self._in_flight.pop(task, None)
            done.set()
            latency = self._clock.monotonic() - call.start
            self._finish(call, result, latency)
            if span is not None:
                span.finish_tool_call(result, latency)

    async def _dispatch(self, call: _Call, tool: RegisteredTool | None) -> ToolResult:
        tool_name, params = call.tool, call.params
        if tool is None and tool_name in self._refused:
            return ToolResult.fail(ErrorCode.TOOL_NOT_FOUND, self._refused[tool_name])
        if tool is None and tool_name in self._offline_tools:
            owner = self._slots[self._offline_tools[tool_name]]
            call.agent = owner.name
            why = owner.stopped_note or owner.error
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{tool_name} belongs to agent {owner.name}, which is {owner.state}"
                + (f": {why}" if why else ""),
            )
        if tool is None and self.missing_tool_hint is not None:
            unavailable = self.missing_tool_hint(tool_name)
            if unavailable is not None:
                result, call.agent = unavailable
                return result
        if tool is None:
            return self.unknown_tool(tool_name)
        if call.approved_agent is not None and tool.agent_id != call.approved_agent:
            approved_for = self._slots.get(call.approved_agent)
            label = approved_for.label if approved_for else f"agent {call.approved_agent}"
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{tool_name} was approved as the tool of {label}, but "
                f"{self._slots[tool.agent_id].label} answers to that name now: not run",
            )
        if not isinstance(params, dict):
            return ToolResult.fail(ErrorCode.INVALID_ARGUMENTS, "arguments must be a JSON object")
        if not tool.schema_checked:
            invalid = schema_problem(tool.definition.parameters)
            if invalid is not None:
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_FAILED,
                    f"{tool_name} cannot be called: its parameter schema is invalid: {invalid}",
                )
            tool.schema_checked = True
        problem = argument_problem(params)
        if problem is not None:
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS, f"invalid arguments for {tool_name}: {problem}"
            )
        error = tool.first_error(params)
        if error is not None:
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS,
                f"invalid arguments for {tool_name}: {describe_validation_error(error)}",
            )
        slot = self._slots[tool.agent_id]
        if slot.agent is None or not slot.callable:
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE,
                f"agent {tool.agent_id} is {slot.state}"
                + (f": {slot.error}" if slot.error else ""),
            )
        if self.gate is not None:
            request = GateRequest(
                tool.definition,
                tool.agent_id,
                params,
                call.confidence,
                call.correlation_id,
                call.origin,
                call.approved is not None,
            )
            try:
                held = await self.gate(request)
            except Exception as exc:  # e.g. the proposal could not be stored: it must not run
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_FAILED,
                    f"{tool_name} did not run: the approval check failed "
                    f"({type(exc).__name__}: {exc})",
                )
            if held is not None:
                return held
        self.bus.publish(
            CallStarted(
                call.call_id,
                call.correlation_id,
                tool_name,
                tool.agent_id,
                call.shown,
                call.started_at,
                call.origin,
                call.approved,
            )
        )
        call.ran = True
        if slot.state is AgentState.INITIALIZED:  # its first call: running from now on
            slot.state = AgentState.RUNNING
            self.bus.publish(AgentStateChanged(slot.name, AgentState.RUNNING))
        call.waited_from = self.person_waits.reading(tool.agent_id)
        token = RUNNING_CALL.set(
            RunningCall(
                call.call_id, call.correlation_id, tool_name, tool.agent_id, self.person_waits
            )
        )
        try:
            return await self._run(call.call_id, agent=slot.agent, tool=tool, params=params)
        finally:
            RUNNING_CALL.reset(token)

    def cancel(self, call_id: int) -> bool:
        """Stop a call while its agent runs it (a person asked): it ends `cancelled`, and an
        MCP server is told (notifications/cancelled). False if it is not running."""
        task = self._running.get(call_id)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def report_progress(
        self, call: RunningCall, progress: float, total: float | None, message: str | None
    ) -> None:
        """How far a running call has got, as its agent says (MCP progress notifications)."""
        self.bus.publish(
            CallProgress(call.call_id, call.correlation_id, call.tool, progress, total, message)
        )

    async def _run(
        self, call_id: int, *, agent: Agent, tool: RegisteredTool, params: dict[str, Any]
    ) -> ToolResult:
        name = tool.definition.name
        scope = asyncio.timeout(tool.timeout)
        running = asyncio.ensure_future(agent.execute(name, params))
        self._running[call_id] = running
        try:
            async with scope:
                try:
                    result = await asyncio.shield(running)
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if running.cancelled() and not (current and current.cancelling()):
                        return ToolResult.fail(ErrorCode.CANCELLED, f"{name} was cancelled")
                    running.cancel()  # its clean-up (a process tree ended) is done first
                    await asyncio.wait([running])
                    raise
        except TimeoutError as exc:
            if scope.expired():
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_TIMEOUT,
                    f"{name} did not finish within {tool.timeout:g} s and was cancelled",
                )
            return ToolResult.fail(
                ErrorCode.TOOL_EXECUTION_FAILED, f"{name} failed: TimeoutError: {exc}"
            )
        except AgentError as exc:
            return ToolResult.fail(exc.code, exc.message)
        except Exception as exc:
            return ToolResult.fail(
                ErrorCode.TOOL_EXECUTION_FAILED, f"{name} failed: {type(exc).__name__}: {exc}"
            )
        finally:
            self._running.pop(call_id, None)
        if not isinstance(result, ToolResult):
            return ToolResult.fail(
                ErrorCode.INVALID_RESPONSE,
                f"agent {tool.agent_id} returned {type(result).__name__}, not a ToolResult",
            )
        return result

    def _charged(self, call: _Call, latency: float) -> float:
        """What a call costs: the time it ran, less what it spent waiting on a person."""
        if not call.ran or call.agent is None:
            return 0.0
        waited = self.person_waits.reading(call.agent) - call.waited_from
        return max(0.0, latency - waited)

    def _finish(self, call: _Call, result: ToolResult, latency: float) -> None:
        """The call's record, made once: published, stored and handed on."""
        try:
            code = result.error_code
            metrics = self._metrics.get(call.tool)
            if metrics is not None:
                metrics.record(latency, code.value if code else None)
            made = result.data.get("proposal_id") if isinstance(result.data, dict) else None
            record = CallFinished(
                call_id=call.call_id,
                correlation_id=call.correlation_id,
                tool=call.tool,
                agent=call.agent,
                arguments=call.shown,
                status=call_status(result, ran=call.ran),
                error_code=code.value if code else None,
                result=redact(result.data),
                error=redact(result.error),
                origin=call.origin,
                started_at=call.started_at,
                finished_at=self._clock.now(),
                latency_ms=latency * 1000,
                cost_units=self._charged(call, latency),
                proposal=call.approved
                or (made if code is ErrorCode.PENDING_APPROVAL and isinstance(made, str) else None),
            )
            self.bus.publish(record)
            if self._execution_log is not None:
                self._execution_log.record(record)
            if self.on_call_finished is not None:
                self.on_call_finished(record)
        except Exception as exc:  # recording must never turn a result into a crash
            self._emit(
                "tool.record_failed", "error", tool=call.tool, error=f"{type(exc).__name__}: {exc}"
            )

    # -- health ---------------------------------------------------------------------------

    async def health(self) -> list[AgentHealth]:
        """Every agent's health, checked concurrently, each bounded by the health timeout.
        Logged: each agent whose health changed, and the round with its metric (the slowest
        check's milliseconds), a round where nothing changed at most once a minute."""
        checks = await asyncio.gather(*(self._timed_check(slot) for slot in self._slots.values()))
        changed = False
        for slot, (report, seconds) in zip(self._slots.values(), checks, strict=True):
            previous = slot.health
            slot.health = report
            if previous is None or (previous.status, previous.message) != (
                report.status,
                report.message,
            ):
                changed = True
                self._emit(
                    "agent.health_changed",
                    "info" if report.status != "unhealthy" else "warning",
                    agent=slot.name,
                    status=report.status,
                    was=previous.status if previous else None,
                    message=report.message,
                    check_ms=round(seconds * 1000, 3),
                )
                self.bus.publish(AgentHealthChanged(slot.name, report.status, report.message))
        now = time.monotonic()
        if changed or now - self._health_logged_at >= HEALTH_LOG_EVERY:
            self._health_logged_at = now
            self._emit(
                "agents.health_checked",
                agents=len(checks),
                healthy=sum(report.status == "healthy" for report, _ in checks),
                unhealthy=[r.agent_id for r, _ in checks if r.status == "unhealthy"],
                slowest_check_ms=round(max((s for _, s in checks), default=0.0) * 1000, 3),
            )
        return [report for report, _ in checks]

    async def _timed_check(self, slot: AgentSlot) -> tuple[AgentHealth, float]:
        """An agent's health and the seconds its check took."""
        started = time.perf_counter()
        report = await self._check(slot)
        return report, time.perf_counter() - started

    async def _check(self, slot: AgentSlot) -> AgentHealth:
        now = self._clock.now()
        agent = slot.agent
        if agent is None:
            status: HealthStatus = "unhealthy" if slot.state is AgentState.FAILED else "unknown"
            return AgentHealth(
                agent_id=slot.name,
                status=status,
                state=slot.state,
                message=slot.stopped_note or slot.error,
                last_checked=now,
                tool_count=0,
            )
        try:
            async with asyncio.timeout(self._health_timeout):
                report = await agent.health()
            return report.model_copy(update={"state": slot.state, "tool_count": len(slot.tools)})
        except Exception as exc:
            message = _describe_exception(
                exc, f"health check did not answer within {self._health_timeout:g} s"
            )
            return AgentHealth(
                agent_id=slot.name,
                status="unhealthy",
                state=slot.state,
                message=message,
                last_checked=now,
                tool_count=len(slot.tools),
            )

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)


async def _wait_events(events: list[asyncio.Event], within: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            for event in events:
                await event.wait()


def _joined(names: list[str]) -> str:
    """'a and b', 'a, b and c'."""
    names = sorted(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _describe_exception(exc: BaseException, timeout_message: str) -> str:
    if isinstance(exc, TimeoutError):
        return timeout_message
    if isinstance(exc, AgentError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
