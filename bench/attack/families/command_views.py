"""The attack bench's family of `command_view_cases()`."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable

from ..cases import ALLOW_ALL, FIXTURE, Case, Ctx, Run, printable_bytes
from ..configs import base, python_server
from .data_dir import real_database


def spent_on_a_removed_server(ctx: Ctx) -> None:
    """Today: small calls of diana's own agents and the work of a server no longer configured
    (written as diana writes them), so `diana cost` has rows to add up."""
    base(ctx, policy=ALLOW_ALL)
    ctx.diana("call", "get_current_time", "--args", '{"timezone": "UTC"}', want=(0,))
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with contextlib.closing(sqlite3.connect(ctx.data / "diana.db")) as db:
        db.execute(
            "INSERT INTO server_cost (day, server, kind, units) VALUES (?, 'gone', 'probe', 1.1)",
            (time.strftime("%Y-%m-%d"),),
        )
        for agent in ("memory", "web", "mcp-gone"):
            db.execute(
                "INSERT INTO execution_log (correlation_id, tool, agent, arguments, status, "
                "origin, started_at, finished_at, latency_ms, cost_units) VALUES "
                "('c', 't', ?, '{}', 'succeeded', 'cli', ?, ?, 40, 0.04)",
                (agent, now, now),
            )
        db.commit()


def rows_add_up(ctx: Ctx, run: Run) -> list[str]:
    """`diana cost`: the agent rows add up to the total in the header, a removed server's
    agent among them, marked so."""
    lines = run.out.decode("utf-8", "replace").splitlines()
    if not lines or " units" not in lines[0]:
        return [f"no total: {lines[:1]}"]
    total = lines[0].split(": ", 1)[1].split(" units", 1)[0]
    table = lines[2 : lines.index("", 2)] if "" in lines[2:] else lines[2:]
    units = [float(line.rsplit(None, 1)[1]) for line in table[1:]]
    found = []
    if f"{sum(units):.1f}" != total:
        found.append(f"agent rows add up to {sum(units):.1f}, the total says {total}")
    if not any("(removed)" in line for line in table):
        found.append("the removed server's agent has no row marked removed")
    return found


def whole_when_piped(ctx: Ctx, run: Run) -> list[str]:
    """Piped, a table is printed whole whatever COLUMNS says (scripts read it)."""
    if ctx.state["whole"].encode() not in run.out:
        return ["a piped table was cut"]
    return []


def columns(value: str, then: Callable[[Ctx], object] | None = None) -> Callable[[Ctx], object]:
    def setup(ctx: Ctx) -> None:
        (then or base)(ctx)
        ctx.env["COLUMNS"] = value

    return setup


def some_proposals(ctx: Ctx) -> None:
    base(ctx, servers={"files": python_server(FIXTURE, timeout=10)})
    path = "/home/someone/projects/folder-" + "x" * 8  # whole within the 50 shown
    ctx.state["whole"] = path
    for _ in range(2):
        ctx.diana("call", "files_delete_file", "--args", json.dumps({"path": path}), want=(3,))


def every_server_listed(ctx: Ctx, run: Run) -> list[str]:
    """mcp_list_available_tools from the command line: no server left "never listed"."""
    try:
        servers = json.loads(run.out)["data"]["servers"]
    except (ValueError, KeyError, TypeError):
        return [f"not a tool result: {printable_bytes(run.out[:120])}"]
    return [
        f"{s.get('server')}: {s.get('status')}"
        for s in servers
        if str(s.get("status", "")).startswith("never listed")
    ]


def command_view_cases() -> list[Case]:
    cases = [
        Case(
            "views",
            "diana cost: a removed server's work and rows of 0.04",
            ["cost"],
            ok=(0,),
            setup=spent_on_a_removed_server,
            verify=rows_add_up,
            short=True,
        ),
        Case(
            "views",
            "diana stats --server of a removed server",
            ["stats", "--server", "gone"],
            setup=spent_on_a_removed_server,
        ),
        Case(
            "views",
            "COLUMNS=80, piped: proposals with long arguments",
            ["proposals"],
            ok=(0,),
            setup=columns("80", some_proposals),
            verify=whole_when_piped,
        ),
        Case(
            "views",
            "mcp_list_available_tools with no app and no tool cache",
            ["call", "mcp_list_available_tools", "--json"],
            ok=(0,),
            setup=lambda ctx: base(
                ctx,
                servers={
                    "files": python_server(FIXTURE, timeout=10),
                    "absent": {"command": "no-such-mcp-command-xyz", "args": []},
                },
            ),
            verify=every_server_listed,
        ),
        Case(
            "views",
            "mcp_list_available_tools with a server that never answers",
            ["call", "mcp_list_available_tools", "--json"],
            ok=(0,),
            setup=lambda ctx: base(
                ctx, servers={"mute": python_server(FIXTURE, "--never-answer", timeout=2)}
            ),
            verify=every_server_listed,
        ),
    ]
    for value in ("0", "-5", "abc", "1", "99999999999999999999", "12.5", " 80", "\u0663\u0660"):
        cases.append(
            Case(
                "views",
                f"COLUMNS={value!r}: stats",
                ["stats"],
                ok=(0,),
                setup=columns(value, real_database),
            )
        )
    return cases
