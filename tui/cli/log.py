"""`diana log`, `diana stats` and `diana cost`: what the execution log says, as it is and as it
grows."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from diana.core.api import (
    agent_id_for,
    load_servers,
    parse_since,
)
from diana.core.api.shown import shown_shares, units_text, usage_cells
from diana.core.api.types import (
    CALL_STATUSES,
    DROPPED_FIRST,
    HOST_ORIGIN,
    MCP_SERVERS_FILE,
    USAGE_COLUMNS,
    CallRecord,
)

from .common import EXIT_OK, MAX_LOG_LIMIT, BadInput, _dump, _line, _table, unknown_server

if TYPE_CHECKING:
    from diana.core.api import Core

# On a narrow terminal `diana stats` leaves out what the usage view leaves out first; the
# last use is never cut.
STATS_GIVE_WAY = {"AGENT": 0, **dict.fromkeys(DROPPED_FIRST, 0), "LAST USED": 16}
LOG_HEADERS = ("STARTED", "CORRELATION", "TOOL", "STATUS", "LATENCY", "RESULT")
# --follow prints rows as they come: columns at least this wide keep later rows in line.
FOLLOW_WIDTHS = (19, 12, 24, 16, 10, 0)


def _log_row(call: CallRecord) -> tuple[str, ...]:
    return (
        call.started_at.isoformat()[:19].replace("T", " "),
        call.correlation_id,
        call.tool,
        call.status,
        f"{call.latency_ms:.1f} ms",
        call.summary[:60],
    )


def _since(core: Core, text: str | None) -> datetime | None:
    """--since as a moment, or None; a text it cannot read is bad input naming the option."""
    if text is None:
        return None
    try:
        return parse_since(text, core.now())
    except ValueError as exc:
        raise BadInput(f"--since: {exc}") from None


async def cmd_log(core: Core, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LOG_LIMIT:
        raise BadInput(f"--limit must be between 1 and {MAX_LOG_LIMIT:,}")
    since = _since(core, args.since)
    filters: dict[str, Any] = {
        "since": since,
        "tool": args.tool,
        "status": args.status,
        "origin": client_origin(args.client),
    }
    newest = await core.latest_call_id()
    calls = await core.query_calls(through_id=newest, limit=args.limit, **filters)
    if not args.follow:
        if args.json:
            print(_dump([call.public() for call in calls]))
        else:
            print(_table([_log_row(call) for call in calls], LOG_HEADERS))
        return EXIT_OK
    # Until Ctrl-C or SIGTERM (exit 130): JSON lines, or table rows as calls are written.
    rows = [[_line(cell) for cell in _log_row(c)] for c in calls]
    widths = [
        max([minimum, len(header), *(len(row[i]) for row in rows)])
        for i, (minimum, header) in enumerate(zip(FOLLOW_WIDTHS, LOG_HEADERS, strict=True))
    ]

    def show(batch: list[CallRecord]) -> None:
        for call in batch:
            if args.json:
                print(_dump(call.public(), indent=None))
            else:
                cells = zip(_log_row(call), widths, strict=True)
                print("  ".join(_line(c).ljust(w) for c, w in cells).rstrip())
        sys.stdout.flush()

    if not args.json:
        print("  ".join(h.ljust(w) for h, w in zip(LOG_HEADERS, widths, strict=True)).rstrip())
    show(calls)
    async for batch in core.follow_calls(after_id=newest, **filters):
        show(batch)
    return EXIT_OK


async def cmd_stats(core: Core, args: argparse.Namespace) -> int:
    """How each tool is used, from the execution log (every process's calls)."""
    since = _since(core, args.since)
    configured = list(load_servers(core.paths.config_file(MCP_SERVERS_FILE)))
    servers = {s.name: agent_id_for(s.name) for s in configured}
    if args.server is not None and args.server not in servers:
        raise unknown_server(args.server, servers)
    report = await core.usage(
        servers,
        since=since,
        tool=args.tool,
        server=args.server,
        origin=client_origin(args.client),
        builtin=known_agents(core, servers),
    )
    if args.json:
        print(_dump(report.public()))
        return EXIT_OK
    if not report.tools:
        print("No calls" + (" in that time" if since else "") + ".")
        return EXIT_OK
    print(
        _table(
            [(u.name, u.agent or "—", *usage_cells(u)) for u in report.tools],
            ("TOOL", "AGENT", *USAGE_COLUMNS),
            STATS_GIVE_WAY,
        )
    )
    print()
    print(
        _table(
            [(u.name, *usage_cells(u)) for u in report.agents],
            ("AGENT", *USAGE_COLUMNS),
            {h: w for h, w in STATS_GIVE_WAY.items() if h != "AGENT"},
        )
    )
    if report.servers:
        print()
        print(
            _table(
                [(removed(u.name, u.removed), *usage_cells(u)) for u in report.servers],
                ("SERVER", *USAGE_COLUMNS),
                {h: w for h, w in STATS_GIVE_WAY.items() if h != "AGENT"},
            )
        )
    return EXIT_OK


def known_agents(core: Core, servers: dict[str, str]) -> set[str]:
    """diana's own agents and the configured servers' ones: any other agent in a figure is
    a server's that was removed since."""
    return set(core.own_agents()) | set(servers.values())


def removed(name: str, gone: bool) -> str:
    return f"{name} (removed)" if gone else name


async def cmd_cost(core: Core, args: argparse.Namespace) -> int:
    """Today's cost units per agent and per MCP server (no server is started for this)."""
    configured = {
        s.name: agent_id_for(s.name) for s in load_servers(core.paths.config_file(MCP_SERVERS_FILE))
    }
    for server, agent in configured.items():
        core.track_server(server, agent)
    cost = core.cost()
    if args.json:
        shown = cost.as_json()
        today = {"day": shown["day"], "unit": shown["unit"], "budget": cost.budget}
        print(_dump({**today, **shown["today"]}))
        return EXIT_OK
    budget = f" of a {cost.budget:g}-unit budget" if cost.budget is not None else " (no budget)"
    print(f"{cost.day.isoformat()}: {units_text(cost.today_total)} units{budget}")
    print()
    known = known_agents(core, configured)
    # Rounded so the rows add up to the total above, a removed server's agent among them.
    shares = shown_shares(cost.agents_today, cost.today_total)
    print(
        _table(
            [(removed(a, a not in known), shares[a]) for a in cost.agents_today],
            ("AGENT", "UNITS"),
        )
    )
    if cost.servers_today:
        print()
        rows = [
            (
                removed(server, server not in configured),
                units_text(units),
                units_text(sum(cost.server_work_today.get(server, {}).values())),
            )
            for server, units in cost.servers_today.items()
        ]
        print(_table(rows, ("SERVER", "UNITS", "BACKGROUND")))
    return EXIT_OK


def log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="how many (default 20)")
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="calls started since: 30m, 2h, 7d ago, or an ISO date or time (local)",
    )
    parser.add_argument("--tool", metavar="NAME", help="calls of this tool only")
    parser.add_argument("--status", choices=CALL_STATUSES, help="calls with this status only")
    parser.add_argument("--client", metavar="NAME", help=CLIENT_HELP)
    parser.add_argument(
        "--follow",
        action="store_true",
        help="then print new calls as any process makes them, until Ctrl-C",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON array (with --follow: JSON lines)"
    )


def stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", help="only calls started since: 30m, 2h, 7d, or an ISO date")
    parser.add_argument("--tool", help="one tool")
    parser.add_argument("--server", help="one MCP server's tools")
    parser.add_argument("--client", metavar="NAME", help=CLIENT_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


CLIENT_HELP = (
    "the calls of one host of `diana serve` (its token's name over HTTP, its clientInfo name "
    "over stdio), and the runs of the proposals it made"
)


def client_origin(client: str | None) -> str | None:
    """The origin a host's calls carry, for --client NAME (`NAME` or `host:NAME` alike)."""
    if client is None:
        return None
    return client if client.startswith(HOST_ORIGIN) else f"{HOST_ORIGIN}{client}"


def cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
