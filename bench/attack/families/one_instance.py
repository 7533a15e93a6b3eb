"""The attack bench's family of `one_instance_cases()`."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Callable

from ..cases import ALLOW_ALL, Case, Ctx, Run
from ..checks import effects, effects_are
from ..configs import base
from .clashes import demanding, sent
from .running_app import app_started, database


def one_instance_cases() -> list[Case]:
    """`diana call` beside a diana-tui running on the same dirs: the app runs the call on its
    own server (one process of it), bounds what it is sent, and refuses call requests forged
    into live_requests; a paused app's call is run by the command, said in one line."""
    marks = {"poke": "demanding poke"}

    def app_beside(*, forged: int = 0, paused: bool = False) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:

            server = demanding(ctx, "--tool", "poke", "--read-only")
            base(ctx, servers={"one": server}, policy=ALLOW_ALL)
            app, app_id = app_started(ctx)
            now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            bad = [
                {"tool": "one_poke", "arguments": {}, "origin": "app"},
                {"tool": "one_poke", "arguments": {}, "origin": "person"},
                {"tool": "one_poke", "arguments": "not an object", "origin": "cli"},
                {"tool": "one_poke", "arguments": {"x": "y" * 70_000}, "origin": "cli"},
                {"proposal": "nope", "by": "app"},
            ]
            with database(ctx) as db:
                db.executemany(
                    "INSERT INTO live_requests (app_id, kind, server, params, requested_at) "
                    "VALUES (?, ?, NULL, ?, ?)",
                    [
                        (app_id, "approve" if "by" in asked else "call", json.dumps(asked), now)
                        for n in range(forged)
                        for asked in [bad[n % len(bad)]]
                    ],
                )
                db.commit()
            if paused:  # stopped outside a write of its own: this holds the lock meanwhile
                held = sqlite3.connect(ctx.data / "diana.db", timeout=30, isolation_level=None)
                held.execute("BEGIN IMMEDIATE")
                app.process.send_signal(signal.SIGSTOP)
                held.execute("COMMIT")
                held.close()
                ctx.cleanups.insert(0, lambda: app.process.send_signal(signal.SIGCONT))

        return setup

    def one_process(ctx: Ctx, run: Run) -> list[str]:
        started = sent(ctx, "initialize")
        return [f"{started} processes of the server ran (one expected)"] if started != 1 else []

    def poked_once(ctx: Ctx, run: Run) -> list[str]:
        return effects_are(marks["poke"])(ctx, run)

    return [
        Case(
            "one instance",
            "a call beside the app starts no server of its own",
            ["call", "one_poke"],
            ok=(0,),
            setup=app_beside(),
            check=poked_once,
            verify=one_process,
            short=True,
        ),
        Case(
            "one instance",
            "100 KB of arguments beside the app",
            ["call", "one_poke", "--args", json.dumps({"x": "y" * 100_000})],
            expect=(2,),
            setup=app_beside(),
            verify=lambda c, r: (
                one_process(c, r) + (["the refused call ran"] if effects(c) else [])
            ),
        ),
        Case(
            "one instance",
            "2,000 forged call and approve requests queued before a call",
            ["call", "one_poke"],
            ok=(0,),
            setup=app_beside(forged=2000),
            check=poked_once,
            verify=one_process,
        ),
        Case(
            "one instance",
            "the app paused: the command runs the call itself",
            ["call", "one_poke"],
            ok=(0,),
            setup=app_beside(paused=True),
            check=poked_once,
            max_lines=1,
        ),
    ]
