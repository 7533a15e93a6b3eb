"""The orchestrator: the one registry of agents and tools, and the one way to call a tool.

It starts and stops agents, and carries out each call: the checks, the approval gate, the
timeout and the call's one record. Which agent answers to each tool name is kept by its
``ToolNames`` (tool_names), and agents' health is checked by its ``HealthChecks``
(agent_health)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Callable
from typing import Any

from ..content.text import without_surrogates
from ..events import (
    AgentStateChanged,
    CallFinished,
    CallProgress,
    CallStarted,
    EventBus,
    ToolsChanged,
)
from ..models import (
    AGENT_ID_PATTERN,
    AgentError,
    AgentHealth,
    AgentState,
    ErrorCode,
    ToolDefinition,
    ToolResult,
)
from ..storage.call_record import CallRecord, call_status, shown_arguments
from ..storage.execution_log import ExecutionLog
from ..system.clock import Clock, SystemClock
from ..system.telemetry import (
    StructuredLog,
    current_correlation_id,
    new_correlation_id,
    redact,
    reset_correlation_id,
    set_correlation_id,
)
from . import tracing
from .agent_health import HEALTH_TIMEOUT, HealthChecks, describe_failure
from .agents import Agent, AgentFactory, ChecksCalls, PlansCalls
from .gate import Gate, GateRequest, held_by
from .running_call import RUNNING_CALL, CallInProgress, PersonWaits, RunningCall
from .tool_names import AgentSlot, ToolNames
from .tool_schemas import RegisteredTool

DEFAULT_TOOL_TIMEOUT = 30.0
INIT_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 5.0
IN_FLIGHT_GRACE = 0.5
# Why a tool no agent offers cannot run, and the agent it would be filed under (or None if
# nobody knows of it).
MissingToolHint = Callable[[str], "tuple[ToolResult, str | None] | None"]


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
        gate: Gate | None = None,
        missing_tool_hint: MissingToolHint | None = None,
    ) -> None:
        self.bus = bus or EventBus()
        self._log = log
        self._execution_log = execution_log
        self._clock = clock or SystemClock()
        self._shutdown_timeout = shutdown_timeout
        self._init_timeout = init_timeout
        self._slots: dict[str, AgentSlot] = {}
        self._names = ToolNames(
            self._slots,
            bus=self.bus,
            emit=self._emit,
            default_timeout=default_timeout,
            tool_timeouts=dict(tool_timeouts or {}),
            defer_schema_checks=defer_schema_checks,
        )
        self._health = HealthChecks(
            bus=self.bus, clock=self._clock, emit=self._emit, timeout=health_timeout
        )
        self._call_ids = itertools.count(1)
        self._new_id = new_id
        self._in_flight: dict[asyncio.Task[Any], asyncio.Event] = {}
        self._running: dict[int, asyncio.Future[ToolResult]] = {}  # the agents' work, by call
        # Decides, before a valid call runs, whether it must wait for a person (approvals).
        self.gate = gate
        # Why a tool no agent offers now cannot run, and whose it would be (its calls are
        # filed under that agent), if anyone knows: the MCP manager does.
        self.missing_tool_hint = missing_tool_hint
        # Told of every finished call, after the bus and the log (the cost ledger).
        self.on_call_finished = on_call_finished
        # What agents' calls wait on a person, not charged (request_human_input, a server's
        # questions and requests to the model a person decides).
        self.person_waits = PersonWaits(self._clock)
        # Tools their agents refuse now (an MCP tool held because its definition changed):
        # not offered to the model, so a rewritten description never reaches it.
        self._withheld: set[str] = set()

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
        tool = self._names.tools.get(tool_name)
        return None if tool is None else tool.definition

    def time_limit(self, tool_name: str) -> float | None:
        """The seconds a call of a tool may take, or None for a name no agent answers to."""
        tool = self._names.tools.get(tool_name)
        return None if tool is None else tool.timeout

    def owner(self, tool_name: str) -> str | None:
        """The id of the agent a tool name now leads to, or None."""
        tool = self._names.tools.get(tool_name)
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
            for name, tool in sorted(self._names.tools.items())
            if self._slots[tool.agent_id].callable and not tool.definition.internal
        ]

    def model_tools(self) -> list[ToolDefinition]:
        """The tools the model is offered: every callable one that is available now, but
        those withheld (as ``refresh_withheld`` last found them)."""
        return [
            d
            for d, _agent in self.tool_definitions()
            if d.unavailable is None and d.name not in self._withheld
        ]

    async def refresh_withheld(self) -> None:
        """Ask the agents which of their tools they would refuse now (before the model is
        offered its tools: a person may have accepted one from another process)."""
        asked = {definition.name: definition for definition, _agent in self.tool_definitions()}
        withheld: set[str] = set()
        for slot in list(self._slots.values()):
            agent = slot.agent
            if isinstance(agent, ChecksCalls) and slot.callable:
                withheld |= await agent.withheld()
        # A tool whose definition changed (or that came) while the agents were asked was not
        # checked as it is now: it waits for the next look, as refresh_tools would have it.
        withheld |= {
            definition.name
            for definition, agent_id in self.tool_definitions()
            if asked.get(definition.name) != definition
            and isinstance(self._slots[agent_id].agent, ChecksCalls)
        }
        self._withheld = withheld

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
        return {name: m.summary() for name, m in sorted(self._names.metrics.items())}

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
            message = describe_failure(exc, f"did not initialize within {self._init_timeout} s")
            slot.agent, slot.state, slot.error = None, AgentState.FAILED, message
            self._emit("agent.start_failed", "error", agent=name, error=message)
            self.bus.publish(AgentStateChanged(name, AgentState.FAILED, message))
            return False
        slot.agent, slot.state, slot.error = agent, AgentState.INITIALIZED, None
        others = self._names.register(
            name, manifest.tools, manifest.defer_schema_checks, fixed=manifest.fixed_schemas
        )
        self._emit("agent.started", agent=name, tools=len(slot.tools))
        self.bus.publish(AgentStateChanged(name, AgentState.INITIALIZED))
        self._names.tools_changed(others)
        return True

    async def stop_agent(self, name: str, note: str | None = None) -> None:
        """Stop an agent; its tools answer agent_unavailable until it starts again (``note``:
        why, and how to start it, for a person's stop)."""
        slot = self._slot(name)
        slot.stopped_note = note
        answered = list(slot.tools)
        claimed, slot.offered = list(slot.offered), {}
        others = self._names.settle(claimed) - {name}
        for tool_name in answered:
            if tool_name not in self._names.tools:  # a call of it can say why it cannot run
                self._names.offline[tool_name] = name
        agent, slot.agent = slot.agent, None
        if slot.state is not AgentState.FAILED:
            slot.state = AgentState.STOPPED
        if agent is None:
            return
        try:
            async with asyncio.timeout(self._shutdown_timeout):
                await agent.shutdown()
        except Exception as exc:
            message = describe_failure(exc, f"did not shut down within {self._shutdown_timeout} s")
            slot.error = message
            self._emit("agent.shutdown_failed", "warning", agent=name, error=message)
        else:
            self._emit("agent.stopped", agent=name)
        self.bus.publish(AgentStateChanged(name, AgentState.STOPPED, slot.error))
        self._names.tools_changed(others)

    def refresh_tools(self, name: str) -> list[str]:
        """Re-read a running agent's manifest and register its tools anew (an MCP server
        whose tool list changed). Returns the tools now registered for it."""
        slot = self._slot(name)
        if slot.agent is None:
            return []
        before = {t: self.definition(t) for t in slot.tools}
        manifest = slot.agent.get_manifest()
        others = self._names.register(
            name, manifest.tools, manifest.defer_schema_checks, fixed=manifest.fixed_schemas
        )
        if isinstance(slot.agent, ChecksCalls) and slot.agent.checks_definitions:
            # A tool whose definition just changed is not offered the model until its agent
            # says it may be (refresh_withheld): the new definition may never be accepted.
            self._withheld |= {
                t for t, was in before.items() if was is not None and self.definition(t) != was
            }
        self._emit("agent.tools_refreshed", agent=name, tools=len(slot.tools))
        self.bus.publish(ToolsChanged(name, list(slot.tools)))
        self._names.tools_changed(others)
        return list(slot.tools)

    async def remove_agent(self, name: str) -> None:
        """Stop an agent and forget its factory (a server removed from the config)."""
        await self.stop_agent(name)
        del self._slots[name]
        for tool_name in [t for t, owner in self._names.offline.items() if owner == name]:
            del self._names.offline[tool_name]
        self.bus.publish(AgentStateChanged(name, AgentState.STOPPED, "removed"))

    async def restart_agent(self, name: str) -> bool:
        await self.stop_agent(name)
        return await self.start_agent(name)

    async def shutdown(self, grace: float = IN_FLIGHT_GRACE) -> None:
        """Let calls in flight finish for ``grace`` seconds, cancel the rest (they are recorded
        as cancelled), then stop every agent in parallel, each bounded by its timeout."""
        self._names.shutting_down = True  # names given back now are not news
        current = asyncio.current_task()
        waiting = {t: e for t, e in self._in_flight.items() if t is not current}
        if waiting:
            await _wait_events(list(waiting.values()), grace)
            for task, done in waiting.items():
                if not done.is_set():
                    task.cancel()
            await _wait_events(list(waiting.values()), grace)
        await asyncio.gather(*(self.stop_agent(name) for name in self._slots))

    def check_schemas(self) -> None:
        """Check now every parameter schema left for the first call; a tool whose schema is
        invalid is rejected as it would have been at registration."""
        self._names.check_schemas()

    def _slot(self, name: str) -> AgentSlot:
        try:
            return self._slots[name]
        except KeyError:
            raise AgentError(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name}") from None

    # -- calls ----------------------------------------------------------------------------

    def closest_tools(self, name: str, limit: int = 3) -> list[str]:
        return self._names.closest(name, limit)

    def unknown_tool(self, name: str, note: str | None = None) -> ToolResult:
        """No agent offers ``name``: the closest names that exist, and ``note`` in brackets."""
        return self._names.unknown(name, note)

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
        record: list[CallRecord] | None = None,
    ) -> ToolResult:
        """Validate and run one call. Never raises for a failure of the call itself.
        ``status``, if given, is told how the call ended, as its record says it (a call that
        reached its agent failed, it was not refused, whatever its error code); ``record``
        is given the call's record as the execution log keeps it (its own time and cost).
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
        call = CallInProgress(
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
        if record is not None and call.record is not None:
            record.append(call.record)
        return result

    async def _execute(self, call: CallInProgress) -> ToolResult:
        tool = self._names.tools.get(call.tool)
        call.agent = tool.agent_id if tool else self._names.offline.get(call.tool)
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

    async def _dispatch(self, call: CallInProgress, tool: RegisteredTool | None) -> ToolResult:
        tool_name, params = call.tool, call.params
        if tool is None and tool_name in self._names.refused:
            return ToolResult.fail(ErrorCode.TOOL_NOT_FOUND, self._names.refused[tool_name])
        if tool is None and tool_name in self._names.offline:
            owner = self._slots[self._names.offline[tool_name]]
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
        invalid = tool.invalid_call(params)
        if invalid is not None:
            return invalid
        slot = self._slots[tool.agent_id]
        if slot.agent is None or not slot.callable:
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE,
                f"agent {tool.agent_id} is {slot.state}"
                + (f": {slot.error}" if slot.error else ""),
            )
        if isinstance(slot.agent, ChecksCalls):
            refused = await slot.agent.refusal(tool_name)
            if refused is not None:
                self._withheld.add(tool_name)
                return refused
        if call.approved is None and isinstance(slot.agent, PlansCalls):
            # The plan goes into the arguments before the gate: what is proposed, signed and
            # approved is the plan, and an approved call is never planned anew.
            try:
                params = await slot.agent.planned(tool_name, params)
            except AgentError as exc:
                return ToolResult.fail(exc.code, exc.message)
            call.params, call.shown = params, shown_arguments(params)
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
            held = await held_by(self.gate, request)
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

    def _charged(self, call: CallInProgress, latency: float) -> float:
        """What a call costs: the time it ran, less what it spent waiting on a person."""
        if not call.ran or call.agent is None:
            return 0.0
        waited = self.person_waits.reading(call.agent) - call.waited_from
        return max(0.0, latency - waited)

    def _finish(self, call: CallInProgress, result: ToolResult, latency: float) -> None:
        """The call's record, made once: published, stored and handed on."""
        try:
            code = result.error_code
            metrics = self._names.metrics.get(call.tool)
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
            call.record = record
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
        return await self._health.check(list(self._slots.values()))

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)


async def _wait_events(events: list[asyncio.Event], within: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            for event in events:
                await event.wait()
