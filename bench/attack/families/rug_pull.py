"""The attack bench's family of `rug_pull_cases()`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..cases import ALLOW_ALL, FIXTURES, Case, Ctx, Run
from ..checks import effects_are
from ..configs import base, python_server
from .memory import fake_ollama


def rug_pull_cases() -> list[Case]:
    """Tool pins: a server that changes a tool after it was first offered (its description
    rewritten mid-session, its schema widened or its annotations flipped to look harmless by an
    update), or a second server offering a tool of the same exposed name with another
    definition: no call reaches the changed tool before a person accepts it. Every policy
    allows everything, so only the pin stands in the way."""
    rug = str(FIXTURES / "rug_server.py")
    prefix = str(FIXTURES / "prefix_server.py")

    def rug_server(ctx: Ctx, name: str = "rug", start_as: str | None = None) -> dict[str, Any]:
        env = {"RUG_START_AS": start_as} if start_as else {}
        # A busy machine must not cut off the setup's first call, which starts the server.
        return python_server(rug, "--calls", str(ctx.effects), timeout=30, toolTimeout=30, env=env)

    def first_then(start_as: str, first: str | None = None) -> Callable[[Ctx], object]:
        """Pinned by a first call (approved, for a destructive one), then the same program
        updated to offer ``start_as``."""

        def setup(ctx: Ctx) -> None:
            base(ctx, servers={"rug": rug_server(ctx, start_as=first)}, policy=ALLOW_ALL)
            args = ("call", "rug_describe", "--args", '{"text": "first"}')
            if first == "harmful":
                made = ctx.diana(*args, want=(3,))
                ctx.diana("approve", made.out.decode().split()[-1], want=(0,))
            else:
                ctx.diana(*args, want=(0,))
            base(ctx, servers={"rug": rug_server(ctx, start_as=start_as)}, policy=ALLOW_ALL)

        return setup

    def rewritten_mid_session(ctx: Ctx) -> None:
        fake = fake_ollama(ctx)
        base(ctx, servers={"rug": rug_server(ctx)}, policy=ALLOW_ALL, llm={"host": fake.url})
        calls = [
            ("rug_describe", {"text": "first"}),
            ("rug_rewrite", {"part": "description"}),
            ("rug_describe", {"text": "after the rewrite"}),
        ]
        fake.add(
            *({"tool_calls": [{"name": n, "arguments": a}]} for n, a in calls),
            {"content": "done"},
        )

    def colliding(ctx: Ctx) -> None:
        servers = {"my_rug": rug_server(ctx)}
        base(ctx, servers=servers, policy=ALLOW_ALL)
        ctx.diana("call", "my_rug_describe", "--args", '{"text": "first"}', want=(0,))
        other = python_server(
            prefix,
            "--tool",
            "rug_describe",
            "--label",
            "other",
            "--side-effects",
            str(ctx.effects),
            "--read-only",
            timeout=30,
        )
        base(ctx, servers={**servers, "my": other}, policy=ALLOW_ALL)

    def held_and_listed(ctx: Ctx, run: Run) -> list[str]:
        listed = ctx.diana("tools", "changes", "--json")
        try:
            held = [c["tool"] for c in json.loads(listed.out)]
        except ValueError:
            held = []
        return [] if held == ["rug_describe"] else [f"`diana tools changes` lists {held}"]

    describe = ["call", "rug_describe", "--args"]
    return [
        Case(
            "rug pull",
            "description rewritten mid-session, then called by the model (diana ask)",
            ["ask", "echo something"],
            expect=(1,),
            ok=(0,),
            prefixes=("diana:", "⚙", "✓", "✗", "…"),
            max_lines=12,
            setup=rewritten_mid_session,
            check=effects_are("first"),
            verify=held_and_listed,
            short=True,
        ),
        Case(
            "rug pull",
            "schema widened by an update, then called with the new argument",
            [*describe, '{"text": "x", "path": "/etc/passwd"}'],
            expect=(1,),
            setup=first_then("schema"),
            check=effects_are("first"),
            verify=held_and_listed,
        ),
        Case(
            "rug pull",
            "annotations flipped from destructive to read-only by an update",
            [*describe, '{"text": "x"}'],
            expect=(1,),
            setup=first_then("annotations", first="harmful"),
            check=effects_are("first"),
            verify=held_and_listed,
        ),
        Case(
            "rug pull",
            "description rewritten by an update, called with --json",
            [*describe, '{"text": "x"}', "--json"],
            expect=(1,),
            quiet_ok=True,
            setup=first_then("description"),
            check=effects_are("first"),
        ),
        Case(
            "rug pull",
            "accept a tool that is not held",
            ["tools", "accept", "rug_describe"],
            setup=lambda ctx: base(ctx, servers={"rug": rug_server(ctx)}, policy=ALLOW_ALL),
            max_lines=1,
        ),
        Case(
            "rug pull",
            "a second server offers the same exposed name with another definition",
            ["call", "my_rug_describe", "--args", '{"text": "x", "value": "x"}'],
            setup=colliding,
            check=effects_are("first"),
        ),
    ]
