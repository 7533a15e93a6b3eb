"""How tools are used, from the execution log: per tool its calls, how they ended, latency
(median and 95th percentile of the calls that ran), cost and when it was last used; totals
per agent and per MCP server. Read with one query; the figures are counted here."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..storage.call_record import RAN
from ..storage.db import Database
from ..storage.execution_log import origin_clause
from ..storage.stored import stored_time
from .cost import units_text

# How a call ended, as the execution log says it, in the columns of the table.
FAILED = ("failed", "cancelled")
REFUSED = ("refused", "denied")  # it never ran
REJECTED = ("rejected",)  # held for approval, and a person said no
# An MCP server's agent id is this prefix and the server's name (core/config/mcp_servers.py).
SERVER_AGENT_PREFIX = "mcp-"
# A call held for approval and then approved (or withdrawn, or still waiting) is counted in
# ``calls`` only: once approved, its run is a call of its own.


@dataclass
class Usage:
    """One tool's figures, or the totals of an agent or a server."""

    name: str
    agent: str | None = None
    calls: int = 0
    succeeded: int = 0
    failed: int = 0
    refused: int = 0
    rejected: int = 0
    timed_out: int = 0
    cost: float = 0.0
    last_used: str | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    removed: bool = False  # a server's figures, the server no longer configured

    def public(self) -> dict[str, Any]:
        return asdict(self)


def percentile(ordered: list[float], rank: float) -> float:
    """The nearest-rank percentile of a sorted, non-empty list (as the query computes it)."""
    return ordered[max(0, -(-len(ordered) * int(rank) // 100) - 1)]


def _listed(statuses: tuple[str, ...]) -> str:
    return ", ".join(f"'{status}'" for status in statuses)


# Counted in SQLite for each tool (and agent): each outcome, cost, the last use, and the
# latencies of the calls that ran, as one text (far quicker than a row for each call).
_COUNTS = (
    "SELECT tool, agent, COUNT(*), SUM(status = 'succeeded'), "
    f"SUM(status IN ({_listed(FAILED)})), SUM(status IN ({_listed(REFUSED)})), "
    f"SUM(status IN ({_listed(REJECTED)})), SUM(status = 'timed_out'), "
    "SUM(COALESCE(cost_units, 0)), MAX(finished_at), "
    f"GROUP_CONCAT(CASE WHEN status IN ({_listed(RAN)}) THEN latency_ms END) "
    "FROM execution_log{where} GROUP BY tool, agent"
)


USAGE_COLUMNS = (
    "CALLS",
    "OK",
    "FAILED",
    "REFUSED",
    "REJECTED",
    "TIMED OUT",
    "P50",
    "P95",
    "COST",
    "LAST USED",
)


# The figures a narrow table leaves out first, in order (the usage view, `diana stats`).
DROPPED_FIRST = ("REJECTED", "REFUSED", "TIMED OUT", "P50", "COST")


def shown_minute(stored: str | None) -> str:
    """A stored time as a table shows it: local, to the minute; "—" for none."""
    if not stored:
        return "—"
    return datetime.fromisoformat(stored).astimezone().strftime("%Y-%m-%d %H:%M")


def usage_cells(usage: Usage) -> tuple[str, ...]:
    """One tool's (or agent's, or server's) figures as a table shows them, in USAGE_COLUMNS'
    order; the last use in local time."""

    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f} ms"

    when = shown_minute(usage.last_used)
    counts = (
        usage.calls,
        usage.succeeded,
        usage.failed,
        usage.refused,
        usage.rejected,
        usage.timed_out,
    )
    return (
        *(f"{n:,}" for n in counts),
        ms(usage.p50_ms),
        ms(usage.p95_ms),
        units_text(usage.cost),
        when,
    )


@dataclass(frozen=True)
class UsageReport:
    tools: list[Usage]
    agents: list[Usage]
    servers: list[Usage]

    def public(self) -> dict[str, Any]:
        return {
            "tools": [u.public() for u in self.tools],
            "agents": [u.public() for u in self.agents],
            "servers": [u.public() for u in self.servers],
        }


async def usage(
    db: Database,
    servers: dict[str, str],
    *,
    since: datetime | None = None,
    tool: str | None = None,
    server: str | None = None,
    origin: str | None = None,
    builtin: Collection[str] = (),
) -> UsageReport:
    """The figures for the calls started since ``since`` (all, if None), of one tool or one
    server's tools if asked. ``servers``: each MCP server's agent id, by server name;
    ``builtin``: diana's own agents. Another agent named as a server's (mcp-NAME) is a
    server removed since: its row is kept, marked removed. ``origin``: the calls it made and
    the runs of the proposals it made (a host's, `host:NAME`)."""
    clauses, params = origin_clause(origin)
    if since is not None:
        clauses.append("started_at >= ?")
        params.append(stored_time(since))
    if tool is not None:
        clauses.append("tool = ?")
        params.append(tool)
    if server is not None:
        clauses.append("agent = ?")
        params.append(servers.get(server, f"mcp-{server}"))
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    tools: list[Usage] = []
    agents: dict[str, tuple[Usage, list[float]]] = {}
    for row in await db.read(_COUNTS.format(where=where), params):
        name, agent, calls, succeeded, failed, refused, rejected, timed_out, cost, last, spread = (
            row
        )
        latencies = sorted(map(float, spread.split(","))) if spread else []
        figures = Usage(
            name,
            agent,
            calls=calls,
            succeeded=succeeded or 0,
            failed=failed or 0,
            refused=refused or 0,
            rejected=rejected or 0,
            timed_out=timed_out or 0,
            cost=cost or 0.0,
            last_used=last,
        )
        tools.append(_figures(figures, latencies))
        totals, merged = agents.setdefault(agent or "(none)", (Usage(agent or "(none)"), []))
        for figure in ("calls", "succeeded", "failed", "refused", "rejected", "timed_out", "cost"):
            setattr(totals, figure, getattr(totals, figure) + getattr(tools[-1], figure))
        if last is not None and (totals.last_used is None or last > totals.last_used):
            totals.last_used = last
        merged += latencies
    agent_totals = [_figures(totals, sorted(merged)) for totals, merged in agents.values()]
    by_agent = {server_agent: name for name, server_agent in servers.items()}
    server_totals = []
    for totals in agent_totals:
        if totals.name in by_agent:
            name, gone = by_agent[totals.name], False
        elif totals.name.startswith(SERVER_AGENT_PREFIX) and totals.name not in builtin:
            name, gone = totals.name.removeprefix(SERVER_AGENT_PREFIX), True
        else:
            continue
        shown = {**totals.public(), "name": name, "agent": totals.name, "removed": gone}
        server_totals.append(Usage(**shown))
    server_totals.sort(key=lambda u: (u.removed, u.name))
    ordered = sorted(tools, key=lambda u: (-u.calls, u.name))
    return UsageReport(ordered, sorted(agent_totals, key=lambda u: u.name), server_totals)


def _figures(usage: Usage, ordered: list[float]) -> Usage:
    """The percentiles of the sorted latencies; the cost rounded."""
    if ordered:
        usage.p50_ms = round(percentile(ordered, 50), 1)
        usage.p95_ms = round(percentile(ordered, 95), 1)
    usage.cost = round(usage.cost, 3)
    return usage
