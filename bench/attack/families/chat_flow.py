"""The attack bench's family of `chat_flow_cases()`."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

from ..cases import ALLOW_ALL, Case, Ctx, Run
from ..configs import base
from .proposals import edit
from .running_app import database, made_by_diana


def chat_flow_cases() -> list[Case]:
    """The chat's conversation and the calls it shows decided: a `diana ask` beside the app's
    conversation keeps its own; a proposal that ran says what its run cost and took, even
    with its stored figures damaged; a call waiting for want of confidence says so."""

    def app_conversation(ctx: Ctx) -> None:
        base(ctx)
        made_by_diana(ctx)
        with database(ctx) as db:  # the app's, as the app writes it (no origin named)
            db.execute(
                "INSERT INTO conversations (id, model, created_at, updated_at) "
                "VALUES ('apps', 'attack', '2026-01-01T00:00:00+00:00', "
                "'2999-01-01T00:00:00+00:00')"
            )
            for role in ("user", "assistant"):
                db.execute(
                    "INSERT INTO messages (conversation_id, role, kind, content, created_at) "
                    "VALUES ('apps', ?, 'chat', 'the app', '2026-01-01T00:00:00+00:00')",
                    (role,),
                )
            db.commit()

    def apps_kept(ctx: Ctx, run: Run) -> list[str]:
        with database(ctx) as db:
            (count,) = db.execute(
                "SELECT count(*) FROM messages WHERE conversation_id = 'apps'"
            ).fetchone()
            try:
                others = db.execute(
                    "SELECT count(*) FROM conversations WHERE id <> 'apps' AND origin = 'app'"
                ).fetchone()[0]
            except sqlite3.OperationalError:
                return ["conversations do not say which front end began them"]
        broken = [f"the app's conversation has {count} messages, not 2"] if count != 2 else []
        return broken + (
            [f"{others} conversations of `diana ask` taken as the app's"] if others else []
        )

    def ran(ctx: Ctx) -> None:  # a built-in's call: no server to start on a busy machine
        base(ctx, policy=ALLOW_ALL)
        made = ctx.diana("call", "obsidian_log", "--args", '{"entry": "ran"}', want=(3,))
        ctx.state["id"] = made.out.decode().split()[-1]
        ctx.diana("approve", ctx.state["id"], want=(0,))

    def damaged_run(ran_ms: Any, cost: Any) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            ran(ctx)
            edit(
                ctx,
                "UPDATE proposals SET ran_ms = ?, cost_units = ? WHERE id = ?",
                ran_ms,
                cost,
                ctx.state["id"],
            )

        return setup

    def says_its_cost(ctx: Ctx, run: Run) -> list[str]:
        if not re.search(rb"^\s*cost  \d+\.\d units \(it ran \d+\.\d ms\)$", run.out, re.M):
            return ["`diana show` says nothing of what the call that ran cost"]
        return []

    def says_why(ctx: Ctx, run: Run) -> list[str]:
        return [] if b"below 0.85" in run.err else ["the reason does not name the 0.85 bar"]

    def shown(ctx: Ctx) -> list[str]:
        return ["show", ctx.state["id"]]

    def shown_json(ctx: Ctx) -> list[str]:
        return ["show", "--json", ctx.state["id"]]

    cases = [
        Case(
            "chat flow",
            "ask --continue beside the app's conversation (Ollama unreachable)",
            ["ask", "--continue", "hello"],
            setup=app_conversation,
            verify=apps_kept,
        ),
        Case(
            "chat flow",
            "ask beside the app's conversation (Ollama unreachable)",
            ["ask", "hello"],
            setup=app_conversation,
            verify=apps_kept,
        ),
        Case(
            "chat flow",
            "show a proposal whose call ran: its cost",
            shown,
            ok=(0,),
            setup=ran,
            verify=says_its_cost,
        ),
        Case(
            "chat flow",
            "obsidian_log with no confidence: the reason",
            ["call", "obsidian_log", "--args", '{"entry": "unsure"}'],
            expect=(3,),
            setup=base,
            verify=says_why,
            short=True,
        ),
    ]
    damages: list[tuple[str, Any, Any]] = [
        ("text", "lots", "many"),
        ("a blob", b"\x00\xff", b"\x1b[2J"),
        ("huge and negative", 1e308, -1e308),
        ("NaN-like text", "NaN", "inf"),
    ]
    for what, ran_ms, cost in damages:
        for how, args in (("show", shown), ("show --json", shown_json)):
            cases.append(
                Case(
                    "chat flow",
                    f"run figures damaged ({what}): {how}",
                    args,
                    ok=(0,),
                    setup=damaged_run(ran_ms, cost),
                    quiet_ok=True,
                )
            )
    return cases
