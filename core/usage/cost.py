"""Cost accounting ("energy"): one unit is one second of tool or server time.

A tool call costs the seconds it ran; a call that never reached its agent (refused, denied,
waiting for approval) costs nothing. An MCP server's background work (connection attempts,
health probes, listing its tools again) costs that server, and so the server's agent. The
``CostLedger`` is the one place the totals live: per agent and per server, for today (the
clock's local date) and since start-up, and whether today's total has reached the budget.

Today's totals survive a restart: calls are summed from the execution log's ``cost_units``
column (written with each call's row), server work from the ``server_cost`` table, which the
ledger writes every ``SAVE_INTERVAL`` seconds and when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from ..config.mcp_servers import agent_id_for
from ..events import CallFinished
from ..storage.db import Database
from ..system.clock import Clock
from ..system.telemetry import StructuredLog

SAVE_INTERVAL = 30.0
# While work waits for the budget: how often the configured budget is read again, and the
# day checked (a new day starts with nothing spent).
BUDGET_CHECK_INTERVAL = 1.0
# Background work by kind; connect covers the handshake and the first tools/list.
CONNECT, PROBE, REDISCOVER = "connect", "probe", "rediscover"


def local_day(at: datetime) -> date:
    """The local calendar date of an instant (naive datetimes are taken as local)."""
    return at.astimezone().date() if at.tzinfo is not None else at.date()


def units_text(units: float) -> str:
    """How an amount of units is shown: one decimal, so a few milliseconds read as 0.0."""
    return f"{units:.1f}"


def shown_shares(values: dict[str, float], total: float) -> dict[str, str]:
    """Each value as shown (one decimal), rounded so that the shown values add up to the
    shown total (largest remainder): rows of 0.04 each are not all 0.0 under a total of 0.1."""
    tenths = round(total * 10)
    floors = {k: int(v * 10 // 1) for k, v in values.items()}
    left = tenths - sum(floors.values())
    by_remainder = sorted(values, key=lambda k: values[k] * 10 - floors[k], reverse=True)
    for key in by_remainder[: max(0, left)]:
        floors[key] += 1
    return {k: f"{floors[k] / 10:.1f}" for k in values}


def estimate_words(units: float | None) -> str:
    """What a proposal's call is likely to cost, in words."""
    if units is None:
        return "not known: the tool has not run before"
    return f"{units_text(units)} units (the median of its recent calls)"


def ran_words(units: float, ran_ms: float | None) -> str:
    """What an approved call cost once it ran, in words, with how long it ran."""
    ran = "" if ran_ms is None else f" (it ran {ran_ms:.1f} ms)"
    return f"{units_text(units)} units{ran}"


def budget_bar(used: float, budget: float, width: int = 10) -> str:
    """A text gauge: ``width`` cells, filled in proportion to what is used, full when over."""
    filled = min(width, max(0, round(width * used / budget)))
    return "█" * filled + "░" * (width - filled)


# The kind of work an agent does on its own (stored beside servers' work, under its name).
AGENT_WORK = "agent"


@dataclass
class _Totals:
    """Units over some span of time: calls by agent, background work by (server, kind)."""

    calls: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    work: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))

    def total(self) -> float:
        return sum(self.calls.values()) + sum(self.work.values())

    def by_server(self, agents: dict[str, str]) -> dict[str, float]:
        """Each server's work plus the calls its agent ran."""
        servers: defaultdict[str, float] = defaultdict(float, dict.fromkeys(agents, 0.0))
        for (server, kind), units in self.work.items():
            if kind != AGENT_WORK:
                servers[server] += units
        for server in servers:
            servers[server] += self.calls.get(agents.get(server) or agent_id_for(server), 0.0)
        return dict(sorted(servers.items()))

    def by_agent(self, agents: dict[str, str]) -> dict[str, float]:
        """Each agent's calls plus, for a server's agent, the server's background work (a
        server no longer configured under the agent it had), so the rows add up to the
        total."""
        totals: defaultdict[str, float] = defaultdict(float, self.calls)
        for (server, kind), units in self.work.items():
            if kind == AGENT_WORK:  # an agent's own work, kept under its name
                totals[server] += units
            else:
                totals[agents.get(server) or agent_id_for(server)] += units
        return dict(sorted(totals.items()))

    def untracked_servers(self, agents: dict[str, str]) -> list[str]:
        """Servers that worked but are not tracked (removed from the config since)."""
        return sorted({s for (s, kind) in self.work if kind != AGENT_WORK and s not in agents})

    def work_by_kind(self) -> dict[str, dict[str, float]]:
        kinds: dict[str, dict[str, float]] = {}
        for (server, kind), units in sorted(self.work.items()):
            if kind != AGENT_WORK:
                kinds.setdefault(server, {})[kind] = units
        return kinds


@dataclass(frozen=True)
class CostSnapshot:
    """The ledger at one moment, for the Agents pane and `diana cost`."""

    day: date
    budget: float | None
    today_total: float
    since_start_total: float
    agents_today: dict[str, float]
    servers_today: dict[str, float]
    agents_since_start: dict[str, float]
    servers_since_start: dict[str, float]
    server_work_today: dict[str, dict[str, float]]  # server -> kind -> units
    # Servers counted today that are not configured now (removed), and their agents' ids.
    removed_servers: tuple[str, ...] = ()

    @property
    def removed_agents(self) -> frozenset[str]:
        return frozenset(agent_id_for(server) for server in self.removed_servers)

    def as_json(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "unit": "seconds of tool or server time",
            "budget": self.budget,
            "today": {
                "total": round(self.today_total, 6),
                "agents": _rounded(self.agents_today),
                "servers": _rounded(self.servers_today),
                "server_work": {s: _rounded(k) for s, k in self.server_work_today.items()},
                "removed_servers": list(self.removed_servers),
            },
            "since_start": {
                "total": round(self.since_start_total, 6),
                "agents": _rounded(self.agents_since_start),
                "servers": _rounded(self.servers_since_start),
            },
        }


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in values.items()}


class CostLedger:
    """Totals per agent and per MCP server, today and since start-up, and the daily budget."""

    def __init__(
        self,
        clock: Clock,
        *,
        budget: float | None = None,
        db: Database | None = None,
        log: StructuredLog | None = None,
        configured_budget: Callable[[], float | None] | None = None,
    ) -> None:
        self.budget = budget
        # The budget as configured now (settings.json read again), for work waiting on it.
        self._configured_budget = configured_budget
        self._budget_changed = asyncio.Event()
        self._clock = clock
        self._db = db
        self._log = log
        self._day = local_day(clock.now())
        self._today = _Totals()
        self._since_start = _Totals()
        self._agents: dict[str, str] = {}  # server -> its agent's id
        self._unsaved: defaultdict[tuple[str, str, str], float] = defaultdict(float)
        self._saver: asyncio.Task[None] | None = None

    # -- start and stop ---------------------------------------------------------------------

    async def load(self) -> None:
        """Read today's totals from the database: calls from the execution log, server work
        from server_cost. Rows from before the cost_units column have none and count 0."""
        from ..calls.sampling_call import SAMPLING_AGENT

        if self._db is None:
            return
        day = self._day
        # Rows are compared as text with a day's margin either side, then by their own date.
        midnight = datetime.combine(day, time(), tzinfo=None).astimezone()
        low = (midnight - timedelta(days=1)).isoformat()
        rows = await self._db.read(
            "SELECT agent, finished_at, cost_units FROM execution_log "
            "WHERE finished_at >= ? AND cost_units > 0 AND agent IS NOT NULL AND agent != ?",
            (low, SAMPLING_AGENT),
        )
        for agent, finished_at, units in rows:
            if local_day(datetime.fromisoformat(finished_at)) == day:
                self._today.calls[agent] += units
        for server, kind, units in await self._db.read(
            "SELECT server, kind, units FROM server_cost WHERE day = ?", (day.isoformat(),)
        ):
            self._today.work[(server, kind)] += units

    def start(self) -> None:
        """Save server work to the database every SAVE_INTERVAL seconds."""
        if self._db is not None and self._saver is None:
            self._saver = asyncio.create_task(self._save_loop(), name="cost-ledger-saver")

    async def close(self) -> None:
        if self._saver is not None:
            self._saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._saver
            self._saver = None
        await self.save()

    async def save(self) -> None:
        """Add the server work not yet written to today's rows of server_cost."""
        if self._db is None or not self._unsaved:
            return
        pending, self._unsaved = self._unsaved, defaultdict(float)
        rows = [(day, server, kind, units) for (day, server, kind), units in pending.items()]
        try:
            await self._db.write(
                lambda c: c.executemany(
                    "INSERT INTO server_cost (day, server, kind, units) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (day, server, kind) DO UPDATE SET units = units + excluded.units",
                    rows,
                )
            )
        except Exception as exc:  # keep the work for the next attempt
            for key, units in pending.items():
                self._unsaved[key] += units
            self._emit("cost.save_failed", "error", error=f"{type(exc).__name__}: {exc}")

    async def _save_loop(self) -> None:
        while True:
            await asyncio.sleep(SAVE_INTERVAL)
            await self.save()

    # -- what is spent ----------------------------------------------------------------------

    def track_server(self, server: str, agent: str) -> None:
        """Name the agent through which a server's tools are called."""
        self._agents[server] = agent

    def call_finished(self, event: CallFinished) -> None:
        """The orchestrator's finish hook: a call's cost goes to its agent (a sampling
        request's went to the server that asked, as its work, while it ran)."""
        from ..calls.sampling_call import SAMPLING_AGENT

        if event.cost_units <= 0 or event.agent in (None, SAMPLING_AGENT):
            return
        self._since_start.calls[event.agent] += event.cost_units
        if self._is_today(local_day(event.finished_at)):
            self._today.calls[event.agent] += event.cost_units

    def server_work(self, server: str, kind: str, seconds: float) -> None:
        """Work of an MCP server (connect, probe, rediscover, sampling), in seconds."""
        if seconds <= 0:
            return
        self._since_start.work[(server, kind)] += seconds
        day = local_day(self._clock.now())
        if self._is_today(day):
            self._today.work[(server, kind)] += seconds
        if self._db is not None:
            self._unsaved[(day.isoformat(), server, kind)] += seconds

    def agent_work(self, agent: str, seconds: float) -> None:
        """Work an agent does on its own, outside any call (the MCP sub-agent installing and
        testing a server), in seconds: charged to that agent."""
        self.server_work(agent, AGENT_WORK, seconds)

    def _is_today(self, day: date) -> bool:
        """Whether ``day`` is today; a later day starts a new today."""
        if day > self._day:
            self._day = day
            self._today = _Totals()
        return day == self._day

    # -- what it comes to -------------------------------------------------------------------

    def today_total(self) -> float:
        self._is_today(local_day(self._clock.now()))
        return self._today.total()

    def over_budget(self) -> str | None:
        """Why calls that are not reversible must wait, or None while within the budget."""
        if self.budget is None:
            return None
        used = self.today_total()
        if used < self.budget:
            return None
        return f"budget: {units_text(used)} of {self.budget:g} units used today"

    def set_budget(self, budget: float | None) -> None:
        """A new daily budget (None: none), in force at once; work waiting for it wakes."""
        if budget != self.budget:
            self._emit("cost.budget_changed", "info", budget=budget, was=self.budget)
            self.budget = budget
            self._budget_changed.set()

    async def within_budget(self) -> None:
        """Return once today's cost is under the budget: it was raised (set_budget, or in
        settings.json) or a new day began."""
        while self.over_budget() is not None:
            self._budget_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BUDGET_CHECK_INTERVAL):
                    await self._budget_changed.wait()
            self._read_budget()

    def _read_budget(self) -> None:
        if self._configured_budget is None:
            return
        try:
            budget = self._configured_budget()
        except Exception as exc:  # a file being edited: the budget in force stays
            self._emit("cost.budget_unreadable", "warning", error=f"{type(exc).__name__}: {exc}")
            return
        self.set_budget(budget)

    def snapshot(self) -> CostSnapshot:
        total = self.today_total()
        return CostSnapshot(
            day=self._day,
            budget=self.budget,
            today_total=total,
            since_start_total=self._since_start.total(),
            agents_today=self._today.by_agent(self._agents),
            servers_today=self._today.by_server(self._agents),
            agents_since_start=self._since_start.by_agent(self._agents),
            servers_since_start=self._since_start.by_server(self._agents),
            server_work_today=self._today.work_by_kind(),
            removed_servers=tuple(self._today.untracked_servers(self._agents)),
        )

    def _emit(self, event: str, level: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)
