"""The attack bench's family of `proposal_cases()`."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ..cases import ALLOW_ALL, CLEAR, TITLE, Case, Ctx
from ..checks import effects_are
from ..configs import base, gate, write_json


def propose(ctx: Ctx, line: str = "proposed", **extra: str) -> str:
    base(ctx, servers={"gate": gate(ctx)}, policy=ALLOW_ALL)
    made = ctx.diana(
        "call", "gate_append_line", "--args", json.dumps({"line": line, **extra}), want=(3,)
    )
    proposal_id = made.out.decode().split()[-1]
    ctx.state["id"] = proposal_id
    return proposal_id


def edit(ctx: Ctx, sql: str, *params: Any) -> None:
    with contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=10)) as db:
        db.execute(sql, params)
        db.commit()


def just_propose(ctx: Ctx) -> None:
    propose(ctx)


def proposal_cases() -> list[Case]:
    def edited(sql: str, *params: Any, approve_first: bool = False) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            proposal_id = propose(ctx)
            if approve_first:
                ctx.diana("approve", proposal_id, want=(0,))
            values = [str(p).replace("MARK", str(ctx.mark)) for p in params]
            edit(ctx, sql, *values, proposal_id)

        return setup

    def approve(ctx: Ctx) -> list[str]:
        return ["approve", ctx.state["id"]]

    shell_mark = '{"language": "shell", "code": "echo ran > MARK"}'
    edits: list[tuple[str, Callable[[Ctx], object], Sequence[int], tuple[str, ...]]] = [
        (
            "tool swapped for code_execution",
            edited(
                "UPDATE proposals SET tool = 'code_execution', agent = 'code', arguments = ? "
                "WHERE id = ?",
                shell_mark,
            ),
            (2,),
            (),
        ),
        (
            "arguments edited",
            edited("UPDATE proposals SET arguments = ? WHERE id = ?", '{"line": "edited"}'),
            (2,),
            (),
        ),
        (
            "an argument added",
            edited(
                "UPDATE proposals SET arguments = ? WHERE id = ?",
                '{"line": "proposed", "api_key": "x"}',
            ),
            (2,),
            (),
        ),
        ("agent edited", edited("UPDATE proposals SET agent = 'memory' WHERE id = ?"), (2,), ()),
        (
            "tool swapped for save_fact",
            edited(
                "UPDATE proposals SET tool = 'save_fact', agent = 'memory', arguments = ? "
                "WHERE id = ?",
                '{"content": "BYPASS"}',
            ),
            (2,),
            (),
        ),
        (
            "tool swapped for the colliding gate_get_item",
            edited(
                "UPDATE proposals SET tool = 'gate_get_item', arguments = ? WHERE id = ?",
                '{"key": "k"}',
            ),
            (2,),
            (),
        ),
        ("digest removed", edited("UPDATE proposals SET digest = NULL WHERE id = ?"), (2,), ()),
        (
            "digest replaced",
            edited("UPDATE proposals SET digest = ? WHERE id = ?", "0" * 64),
            (2,),
            (),
        ),
        (
            "arguments damaged JSON",
            edited("UPDATE proposals SET arguments = ? WHERE id = ?", '{"line": '),
            (2,),
            (),
        ),
        (
            "arguments JSON null",
            edited("UPDATE proposals SET arguments = 'null' WHERE id = ?"),
            (2,),
            (),
        ),
        (
            "arguments a JSON array",
            edited("UPDATE proposals SET arguments = '[]' WHERE id = ?"),
            (2,),
            (),
        ),
        (
            "status set to approved by hand",
            edited("UPDATE proposals SET status = 'approved' WHERE id = ?"),
            (2,),
            (),
        ),
        (
            "status set to a bogus value",
            edited("UPDATE proposals SET status = 'bogus' WHERE id = ?"),
            (2,),
            (),
        ),
        (
            "status set to interrupted",
            edited("UPDATE proposals SET status = 'interrupted' WHERE id = ?"),
            (2,),
            (),
        ),
        (
            "re-pended after approval",
            edited(
                "UPDATE proposals SET status = 'pending', decided_at = NULL, decided_by = NULL, "
                "result = NULL, executor = NULL, finished_at = NULL WHERE id = ?",
                approve_first=True,
            ),
            (2,),
            ("proposed",),
        ),
        (
            "re-pended after approval, its proposal_runs row deleted",
            edited(
                "UPDATE proposals SET status = 'pending', decided_at = NULL, decided_by = NULL, "
                "result = NULL, executor = NULL, finished_at = NULL WHERE id = ?",
                approve_first=True,
            ),
            (2,),
            ("proposed",),
        ),
    ]
    cases = []
    for what, setup, expect, expected_effects in edits:
        if "proposal_runs" in what:

            def setup(ctx: Ctx, inner: Callable[[Ctx], object] = setup) -> None:
                inner(ctx)
                edit(ctx, "DELETE FROM proposal_runs WHERE proposal_id = ?", ctx.state["id"])

        cases.append(
            Case(
                "proposals",
                f"{what}, then approve",
                approve,
                expect=expect,
                setup=setup,
                check=effects_are(*expected_effects),
            )
        )

    def deny_after(policy: dict[str, Any]) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            propose(ctx)
            write_json(ctx.config / "policy.json", policy)

        return setup

    def policy_broken_after(ctx: Ctx) -> None:
        propose(ctx)
        (ctx.config / "policy.json").unlink()
        os.symlink(ctx.dir / "nowhere", ctx.config / "policy.json")

    def rejected(ctx: Ctx) -> None:
        ctx.diana("reject", propose(ctx), want=(0,))

    def key_gone(ctx: Ctx) -> None:
        propose(ctx)
        (ctx.data / "proposals.key").unlink()

    def key_replaced(ctx: Ctx) -> None:
        propose(ctx)
        (ctx.data / "proposals.key").write_bytes(os.urandom(32))

    def executing_dead(ctx: Ctx) -> None:
        edit(
            ctx,
            "UPDATE proposals SET status = 'executing', executor = '999999:1' WHERE id = ?",
            propose(ctx),
        )

    def approved_dead(ctx: Ctx) -> None:
        edit(
            ctx,
            "UPDATE proposals SET status = 'approved', executor = '999999:1' WHERE id = ?",
            propose(ctx),
        )

    def escaped_row(ctx: Ctx) -> None:
        edit(
            ctx,
            "UPDATE proposals SET tool = ?, reason = ?, arguments = ? WHERE id = ?",
            f"gate_append_line{TITLE}",
            f"why{CLEAR}\ndiana: forged",
            json.dumps({"line": f"x{TITLE}"}, ensure_ascii=False),
            propose(ctx),
        )

    def garbage_dates(ctx: Ctx) -> None:
        edit(
            ctx,
            "UPDATE proposals SET created_at = 'yesterday', risk = 'bogus' WHERE id = ?",
            propose(ctx),
        )

    more: list[
        tuple[
            str,
            Callable[[Ctx], object],
            Callable[[Ctx], list[str]],
            Sequence[int],
            Sequence[int],
            tuple[str, ...],
        ]
    ] = [
        (
            "deny (tool rule) written after proposing, then approve",
            deny_after({"tools": {"gate_append_line": "deny"}}),
            approve,
            (1,),
            (),
            (),
        ),
        (
            "deny (server rule) written after proposing, then approve",
            deny_after({"servers": {"gate": "deny"}}),
            approve,
            (1,),
            (),
            (),
        ),
        (
            "policy.json broken after proposing, then approve",
            policy_broken_after,
            approve,
            (2,),
            (),
            (),
        ),
        ("rejected, then approve", rejected, approve, (2,), (), ()),
        ("proposals.key deleted, then approve", key_gone, approve, (2,), (), ()),
        ("proposals.key replaced, then approve", key_replaced, approve, (2,), (), ()),
        (
            "executing with a dead executor, then proposals",
            executing_dead,
            lambda c: ["proposals", "--all"],
            (),
            (0,),
            (),
        ),
        ("approved with a dead executor, then approve", approved_dead, approve, (2,), (), ()),
        (
            "escapes written into the row, then proposals",
            escaped_row,
            lambda c: ["proposals", "--all"],
            (),
            (0,),
            (),
        ),
        (
            "escapes written into the row, then show",
            escaped_row,
            lambda c: ["show", c.state["id"]],
            (),
            (0,),
            (),
        ),
        ("escapes written into the row, then approve", escaped_row, approve, (2,), (), ()),
        (
            "garbage dates and risk, then proposals",
            garbage_dates,
            lambda c: ["proposals", "--all", "--json"],
            (),
            (0,),
            (),
        ),
        (
            "damaged arguments, then show",
            edited("UPDATE proposals SET arguments = '{' WHERE id = ?"),
            lambda c: ["show", c.state["id"]],
            (),
            (0,),
            (),
        ),
        (
            "id in upper case with spaces, approve (legitimate)",
            just_propose,
            lambda c: ["approve", f"  {c.state['id'].upper()} "],
            (),
            (0,),
            ("proposed",),
        ),
        (
            "approve an SQL injection id",
            just_propose,
            lambda c: ["approve", "x' OR '1'='1"],
            (2,),
            (),
            (),
        ),
    ]
    for what, setup, args, expect, ok, expected_effects in more:
        cases.append(
            Case(
                "proposals",
                what,
                args,
                expect=expect,
                ok=ok,
                setup=setup,
                check=effects_are(*expected_effects),
                max_lines=2,
            )
        )

    def collision(ctx: Ctx) -> None:
        base(ctx, servers={"dup": gate(ctx)}, policy=ALLOW_ALL)

    for name in ("dup_get_item", "dup_Get_Item", "dup_get-item"):
        cases.append(
            Case(
                "proposals",
                f"call the colliding {name}",
                ["call", name, "--args", '{"key": "k"}'],
                setup=collision,
                check=effects_are(),
                max_lines=1,
            )
        )
    return cases
