"""The attack bench's family of `interrupt_cases()`."""

from __future__ import annotations

import signal

from ..cases import FIXTURE, SPAWNING, Case, Ctx
from ..configs import base, python_server


def interrupt_cases() -> list[Case]:
    def mute(ctx: Ctx) -> None:
        base(ctx, servers={"mute": python_server(FIXTURE, "--never-answer", timeout=10)})

    def mute_spawning(ctx: Ctx) -> None:
        base(
            ctx,
            servers={
                "spawn": python_server(
                    SPAWNING,
                    "--pids",
                    str(ctx.dir / "sleepers"),
                    "--how",
                    "double-fork",
                    "--never-answer",
                    timeout=10,
                )
            },
        )

    def slow(ctx: Ctx) -> None:
        base(
            ctx,
            servers={"fx": python_server(FIXTURE, timeout=10)},
            policy={"tools": {"fx_slow": "allow"}, "servers": {}},
        )

    one_line = b"diana: interrupted\n"
    cases = [
        Case(
            "ctrl-c",
            "SIGTERM at 0.3 s, while Python imports",
            ["tools"],
            expect=(130,),
            # killed by the signal's default action before anything was started: fine too
            ok=(-signal.SIGTERM,),
            setup=mute,
            signals=[(0.3, signal.SIGTERM)],
            exact_stderr=one_line,
            serial=True,
        ),
    ]
    cases += [
        Case(
            "ctrl-c",
            f"SIGINT at {at} s while connecting",
            ["tools"],
            expect=(130,),
            setup=mute,
            signals=[(at, signal.SIGINT)],
            exact_stderr=one_line,
            serial=True,
        )
        for at in (0.05, 0.3, 1.0, 2.5)
    ]
    cases += [
        Case(
            "ctrl-c",
            "SIGINT twice, 50 ms apart",
            ["tools"],
            expect=(130,),
            # the second Ctrl-C may end the clean-up by SIGINT itself: a shell shows 130 too
            ok=(-signal.SIGINT,),
            setup=mute,
            signals=[(1.0, signal.SIGINT), (1.05, signal.SIGINT)],
            exact_stderr=one_line,
            serial=True,
        ),
        Case(
            "ctrl-c",
            "SIGTERM once the server runs",
            ["tools"],
            expect=(130,),
            setup=mute,
            signals=[("mcp_fixture.py", signal.SIGTERM)],
            exact_stderr=one_line,
            serial=True,
        ),
        Case(
            "ctrl-c",
            "SIGHUP once the server runs",
            ["tools"],
            expect=(130,),
            setup=mute,
            signals=[("mcp_fixture.py", signal.SIGHUP)],
            exact_stderr=one_line,
            serial=True,
        ),
        Case(
            "ctrl-c",
            "SIGINT once a double-forking server runs",
            ["servers"],
            expect=(130,),
            setup=mute_spawning,
            signals=[("spawning_server.py", signal.SIGINT)],
            exact_stderr=one_line,
            serial=True,
        ),
        Case(
            "ctrl-c",
            "SIGINT during a 60 s call",
            ["call", "fx_slow", "--args", '{"seconds": 60}'],
            expect=(130,),
            setup=slow,
            signals=[(4.0, signal.SIGINT)],
            exact_stderr=one_line,
            serial=True,
        ),
        Case(
            "ctrl-c",
            "SIGINT during log --follow",
            ["log", "--follow"],
            expect=(130,),
            setup=lambda c: base(c),
            signals=[(2.0, signal.SIGINT)],
            exact_stderr=one_line,
            serial=True,
        ),
    ]
    return cases
