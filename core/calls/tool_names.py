"""Which agent answers to each tool name: the tools each agent offers that pass their checks,
the one agent given each name (one of diana's own before any MCP server; none when only
servers offer it), the names refused and given back, and the closest names to one that no
agent offers."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..events import EventBus, Notice, ToolsChanged
from ..models import AgentHealth, AgentState, ErrorCode, ToolDefinition, ToolResult
from ..system.telemetry import ToolMetrics
from .agents import Agent, AgentFactory
from .tool_schemas import RegisteredTool, schema_problem


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


class ToolNames:
    """The tool names of the agents in ``slots`` (the orchestrator's, shared): who answers to
    each, what each call of a name no agent answers to is told, and each name's metrics."""

    def __init__(
        self,
        slots: dict[str, AgentSlot],
        *,
        bus: EventBus,
        emit: Callable[..., None],
        default_timeout: float,
        tool_timeouts: dict[str, float],
        defer_schema_checks: bool,
    ) -> None:
        self._slots = slots
        self._bus = bus
        self._emit = emit
        self._default_timeout = default_timeout
        self._tool_timeouts = tool_timeouts
        # A `diana` command checks a tool's parameter schema at its first call, not at
        # registration (checking all of them would take longer than the command).
        self._defer_checks = defer_schema_checks
        self.tools: dict[str, RegisteredTool] = {}  # the tool each name leads to
        self.metrics: dict[str, ToolMetrics] = {}
        # Tools of agents that are stopped or failed, so a call can say why it cannot run.
        self.offline: dict[str, str] = {}
        # Names no agent answers to because several offer them: why, for a call of one.
        self.refused: dict[str, str] = {}
        # Each name refused to some agents: who kept it, and who was refused (warned once).
        self._refusals: dict[str, tuple[str | None, frozenset[str]]] = {}
        self.shutting_down = False  # names given back now are not news

    def register(
        self,
        agent_id: str,
        definitions: Iterable[ToolDefinition],
        defer_checks: bool = False,
        *,
        fixed: bool = False,
    ) -> set[str]:
        """Take the agent's tools as what it offers now, then settle who answers to each name
        it offered before or offers now. Returns the other agents whose tools changed.
        ``fixed``: their schemas are diana's own, never left to be checked at a call."""
        slot = self._slots[agent_id]
        definitions = list(definitions)
        defer_checks = defer_checks or self._defer_checks
        named = Counter(d.name for d in definitions)
        offered: dict[str, RegisteredTool] = {}
        for definition in definitions:
            if named[definition.name] > 1:
                # One name, several definitions: the risk judged might not be the one run.
                self._reject(
                    "tool.ambiguous_rejected",
                    f"tool {definition.name} from {slot.label} was rejected: it lists "
                    f"{named[definition.name]} tools by that name",
                    tool=definition.name,
                    agent=agent_id,
                )
                continue
            problem = None if defer_checks else schema_problem(definition.parameters)
            if problem is not None:
                self._reject(
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
                definition, agent_id, timeout, schema_checked=fixed or not defer_checks
            )
        before, slot.offered = slot.offered, offered
        return self.settle([*before, *offered]) - {agent_id}

    def settle(self, names: Iterable[str]) -> set[str]:
        """Decide, for each name, the agent that answers to it: the one agent that offers
        it; of several, the first of diana's own agents (a server never takes one of their
        names), or none when only servers offer it, so which server started first never
        decides which tool runs. Returns the agents whose tools changed."""
        changed: set[str] = set()
        for name in dict.fromkeys(names):
            claimants = [slot for slot in self._slots.values() if name in slot.offered]
            ours = [slot for slot in claimants if slot.server is None]
            owner = ours[0] if ours else claimants[0] if len(claimants) == 1 else None
            was = self.tools.pop(name, None)
            if was is not None and (owner is None or owner.name != was.agent_id):
                holder = self._slots.get(was.agent_id)
                if holder is not None and name in holder.tools:
                    holder.tools.remove(name)
                changed.add(was.agent_id)
            if owner is not None:
                self.tools[name] = owner.offered[name]
                self.metrics.setdefault(name, ToolMetrics())
                self.offline.pop(name, None)
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
            self.refused.pop(name, None)
            if seen is not None:
                del self._refusals[name]
                if owner is not None:
                    self._emit("tool.given_back", tool=name, agent=owner.name)
                    if not self.shutting_down:
                        self._bus.publish(
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
            self.refused.pop(name, None)
            for slot in refused:
                self._reject(
                    "tool.duplicate_rejected",
                    f"tool {name} from {slot.label} was rejected: {owner.label} provides it",
                    tool=name,
                    agent=slot.name,
                    kept=owner.name,
                )
            return
        labels = _joined([slot.server or slot.name for slot in refused])
        none = "neither" if len(refused) == 2 else "none"
        self.refused[name] = (
            f"{name} is not offered: MCP servers {labels} each offer a tool by that name, "
            f"so {none} is (rename one of the servers to use them)"
        )
        self._reject(
            "tool.clash_rejected",
            f"tool {name} was refused on MCP servers {labels}: each offers a tool by that "
            f"name, so {none} is offered (rename one of the servers to use them)",
            tool=name,
            agents=sorted(slot.name for slot in refused),
        )

    def check_schemas(self) -> None:
        """Check now every parameter schema left for the first call; a tool whose schema is
        invalid is rejected as it would have been at registration."""
        for name, tool in list(self.tools.items()):
            if tool.schema_checked:
                continue
            problem = schema_problem(tool.definition.parameters)
            if problem is None:
                tool.schema_checked = True
                continue
            slot = self._slots[tool.agent_id]
            del slot.offered[name]
            self.tools_changed(self.settle([name]) - {slot.name})
            self._reject(
                "tool.schema_rejected",
                f"tool {name} from {slot.label} has an invalid parameter schema: {problem}",
                tool=name,
                agent=tool.agent_id,
                error=problem,
            )

    def _reject(self, event: str, message: str, **fields: Any) -> None:
        """A tool that cannot be registered: a warning in the log and on screen."""
        self._emit(event, "warning", **fields)
        self._bus.publish(Notice("warning", message))

    def tools_changed(self, agents: Iterable[str]) -> None:
        """Other agents whose tools changed because of one agent's: one whose name was
        refused, or given back."""
        for name in sorted(agents):
            slot = self._slots.get(name)
            if slot is not None and slot.agent is not None:
                self._bus.publish(ToolsChanged(name, list(slot.tools)))

    def closest(self, name: str, limit: int = 3) -> list[str]:
        names = list(self.tools)
        close = difflib.get_close_matches(name, names, n=limit, cutoff=0.5)
        for candidate in sorted(names):
            if len(close) >= limit:
                break
            if candidate not in close and (name in candidate or candidate in name):
                close.append(candidate)
        return close

    def unknown(self, name: str, note: str | None = None) -> ToolResult:
        """No agent offers ``name``: the closest names that exist, and ``note`` in brackets."""
        close = self.closest(name)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        said = f" ({note})" if note else ""
        return ToolResult.fail(
            ErrorCode.TOOL_NOT_FOUND, f"unknown tool {name}{hint}{said}", data={"closest": close}
        )


def _joined(names: list[str]) -> str:
    """'a and b', 'a, b and c'."""
    names = sorted(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
