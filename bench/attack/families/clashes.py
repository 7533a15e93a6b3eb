"""The attack bench's family of `clash_cases()`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..cases import ALLOW_ALL, DEMANDING, Case, Ctx, Run
from ..checks import effects
from ..configs import base, python_server


def demanding(ctx: Ctx, *extra: str, **fields: Any) -> dict[str, Any]:
    """The demanding server (tests/fixtures/demanding_server.py), writing down what it was
    sent and what it did in the case's directory."""
    fields.setdefault("timeout", 10)
    return python_server(
        DEMANDING,
        "--record",
        str(ctx.dir / "record.jsonl"),
        "--side-effects",
        str(ctx.effects),
        *extra,
        **fields,
    )


def recorded(ctx: Ctx) -> list[dict[str, Any]]:
    """What the demanding server was sent (and the answers to what it asked), in order."""
    path = ctx.dir / "record.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sent(ctx: Ctx, method: str) -> int:
    return sum(entry.get("method") == method for entry in recorded(ctx))


def clash_cases() -> list[Case]:
    """Server ``notes`` has a read-only tool ``old_purge``, server ``notes_old`` a destructive
    ``purge``: both are exposed as ``notes_old_purge``."""

    def servers(ctx: Ctx, slow: str, only: str | None = None) -> dict[str, Any]:
        def delay(name: str) -> list[str]:
            return ["--start-delay", "1.5"] if name == slow else []

        entries = {
            "notes": demanding(
                ctx, "--tool", "old_purge", "--read-only", "--label", "notes", *delay("notes")
            ),
            "notes_old": demanding(
                ctx, "--tool", "purge", "--label", "notes_old", *delay("notes_old")
            ),
        }
        return {k: v for k, v in entries.items() if only is None or k == only}

    plain_allow = {"tools": {"notes_old_purge": "allow"}}
    bound_allow = {"tools": {"notes_old_purge": {"rule": "allow", "server": "notes"}}}

    def configured(slow: str, policy: Any, only: str | None = None) -> Callable[[Ctx], object]:
        return lambda ctx: base(ctx, servers=servers(ctx, slow, only), policy=policy)

    def nothing_ran(ctx: Ctx, run: Run) -> list[str]:
        if "notes_old purge" in effects(ctx):
            return ["notes_old's destructive purge ran unasked, by a rule written for notes"]
        return []

    def nothing_ran_at_all(ctx: Ctx, run: Run) -> list[str]:
        ran = [e for e in effects(ctx) if e != "notes_old purge"]
        return [f"a name two servers clash on still runs a tool: {ran}"] if ran else []

    def not_offered(ctx: Ctx, run: Run) -> list[str]:
        try:
            names = [tool["name"] for tool in json.loads(run.out)]
        except ValueError:
            return []
        if "notes_old_purge" in names:
            return ["notes_old_purge, a name two servers clash on, is offered"]
        return []

    call = ["call", "notes_old_purge"]

    def clashing_call(name: str, slow: str, policy: Any, short: bool = False) -> Case:
        """A call of the name both servers offer, one of them slow to start: nothing runs."""
        return Case(
            "name clashes",
            name,
            call,
            expect=(1, 2, 3),
            setup=configured(slow, policy),
            check=nothing_ran,
            verify=nothing_ran_at_all,
            max_lines=3,
            short=short,
        )

    return [
        clashing_call(
            "notes starts slowly, a rule allows notes_old_purge: call it",
            "notes",
            plain_allow,
        ),
        clashing_call(
            "notes_old starts slowly, a rule allows notes_old_purge: call it",
            "notes_old",
            plain_allow,
        ),
        clashing_call("notes starts slowly, no rule: call it", "notes", ALLOW_ALL),
        Case(
            "name clashes",
            "notes starts slowly: tools --json",
            ["tools", "--json"],
            ok=(0,),
            setup=configured("notes", plain_allow),
            verify=not_offered,
            max_lines=5,
        ),
        Case(
            "name clashes",
            "a rule bound to notes, only notes_old configured: call it",
            call,
            expect=(2, 3),  # the rule is not notes_old's: it asks (or the shape is refused)
            setup=configured("", bound_allow, only="notes_old"),
            check=nothing_ran,
            max_lines=2,
            short=True,
        ),
        Case(
            "name clashes",
            "a plain rule, no clash: call it (legitimate)",
            call,
            ok=(0,),
            setup=configured("", plain_allow, only="notes_old"),
        ),
    ]
