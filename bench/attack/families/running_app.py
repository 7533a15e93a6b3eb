"""The attack bench's family of `running_app_cases()`."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases import ALLOW_ALL, Case, Ctx, Run, SetupFailed
from ..configs import base, gate
from .clashes import demanding, sent

DEAD_PID = 4_194_305  # past the largest pid Linux gives (pid_max is at most 2**22)


def database(ctx: Ctx) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=10))


_TEMPLATES: dict[Path, Path] = {}


_TEMPLATES_LOCK = threading.Lock()


def made_by_diana(ctx: Ctx) -> None:
    """The case's data dir as `diana proposals` makes it (a copy of one made once a run)."""
    scratch = ctx.dir.parent
    with _TEMPLATES_LOCK:
        if scratch not in _TEMPLATES:
            maker = Ctx(scratch / "template")
            for sub in ("config", "tmp", "home"):
                (maker.dir / sub).mkdir(parents=True)
            base(maker)
            maker.diana("proposals", want=(0,))
            _TEMPLATES[scratch] = maker.data
    shutil.copytree(_TEMPLATES[scratch], ctx.data)


def forged_app(**row: Any) -> Callable[[Ctx], object]:
    """A live_apps row nobody runs behind, its lock file held (by the bench); ``row`` says
    what else the row holds, and ``servers``, the live_servers rows' diagnostics."""

    def setup(ctx: Ctx) -> None:
        base(ctx, servers={"gate": gate(ctx)}, policy=ALLOW_ALL)
        made_by_diana(ctx)
        app_id = ctx.state["app"] = f"{DEAD_PID}-forged"
        lock = ctx.data / "apps" / f"{app_id}.lock"
        lock.parent.mkdir(exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        ctx.cleanups.append(lambda: os.close(fd))
        values = {
            "app_id": app_id,
            "pid": DEAD_PID,
            "config_dir": str(ctx.config.resolve()),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "servers_at": None,
            **{k: v for k, v in row.items() if k != "servers"},
        }
        with database(ctx) as db:
            db.execute(
                f"INSERT INTO live_apps ({', '.join(values)}) VALUES "
                f"({', '.join('?' * len(values))})",
                list(values.values()),
            )
            for position, diagnostics in enumerate(row.get("servers", [])):
                db.execute(
                    "INSERT INTO live_servers (app_id, position, diagnostics) VALUES (?, ?, ?)",
                    (app_id, position, diagnostics),
                )
            db.commit()

    return setup


def answering_with(outcome: str) -> Callable[[Ctx, threading.Event], object]:
    """The forged app answers each request made of it with ``outcome``."""

    def answer(ctx: Ctx, stop: threading.Event) -> None:
        while not stop.wait(0.05):
            with contextlib.suppress(sqlite3.Error), database(ctx) as db:
                db.execute(
                    "UPDATE live_requests SET picked_at = ?, finished_at = ?, outcome = ? "
                    "WHERE app_id = ? AND finished_at IS NULL",
                    ("2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", outcome,
                     ctx.state["app"]),
                )  # fmt: skip
                db.commit()

    return answer


def servers_listed(ctx: Ctx, run: Run) -> list[str]:
    if b"No MCP servers are configured" in run.out + run.err:
        return ["says no MCP server is configured; gate is"]
    return []


def app_started(ctx: Ctx) -> tuple[Any, str]:
    """diana-tui started on a terminal over ctx's dirs, until it has listed its server's
    tools and shares what it runs: its terminal, and its app id."""
    from terminal import Terminal, diana_command

    app = Terminal(diana_command(ctx.config, ctx.data), env=ctx.environment())
    ctx.cleanups.append(app.close)
    deadline = time.monotonic() + 60
    app_id = None
    while app_id is None or not sent(ctx, "tools/list"):
        if time.monotonic() > deadline or app.process.poll() is not None:
            raise SetupFailed("diana-tui did not start its server within 60 s")
        time.sleep(0.2)
        with contextlib.suppress(sqlite3.Error, OSError), database(ctx) as db:
            row = db.execute("SELECT app_id FROM live_apps WHERE servers_at IS NOT NULL").fetchone()
            app_id = row and row[0]
    return app, str(app_id)


def app_with_queue(requests: int) -> Callable[[Ctx], object]:
    """diana-tui running on a terminal with one server, and ``requests`` reconnect requests
    for it already waiting in live_requests."""

    def setup(ctx: Ctx) -> None:

        base(ctx, servers={"count": demanding(ctx)}, policy=ALLOW_ALL)
        _app, app_id = app_started(ctx)
        now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        with database(ctx) as db:
            db.executemany(
                "INSERT INTO live_requests (app_id, kind, server, requested_at) "
                "VALUES (?, 'reconnect', 'count', ?)",
                [(app_id, now)] * requests,
            )
            db.commit()
        ctx.state["requests"] = requests + 1

    return setup


def restarted_once_or_so(ctx: Ctx, run: Run) -> list[str]:
    restarts = sent(ctx, "initialize") - 1
    if restarts > 5:
        return [
            f"{restarts} restarts of the server for {ctx.state['requests']:,} reconnect requests"
        ]
    return []


def running_app_cases() -> list[Case]:
    cases = [
        Case(
            "running app",
            "a forged live_apps row: servers",
            ["servers"],
            expect=(1, 2),
            ok=(0, 1),
            setup=forged_app(),
            verify=servers_listed,
            quiet_ok=True,
        ),
        Case(
            "running app",
            "a forged live_apps row: reconnect gate",
            ["reconnect", "gate"],
            expect=(1, 2),
            ok=(0,),
            setup=forged_app(),
            max_lines=2,
        ),
    ]
    rows: list[tuple[str, dict[str, Any], list[str], str]] = [
        (
            "live_servers holding JSON that is not",
            {"servers": ["{not json"]},
            ["servers"],
            "",
        ),
        ("a live_servers row missing its fields", {"servers": ["{}"]}, ["servers"], ""),
        ("live_servers holding a JSON list", {"servers": ["[1, 2]"]}, ["servers"], ""),
        ("live_apps.started_at 'not a date'", {"started_at": "not a date"}, ["servers"], ""),
        ("live_apps.servers_at 'soon'", {"servers_at": "soon"}, ["servers"], ""),
        ("an outcome that is not JSON", {}, ["reconnect", "gate"], "{bad"),
        ("an outcome of the wrong shape", {}, ["reconnect", "gate"], '{"servers": 5}'),
    ]
    for what, row, command, outcome in rows:
        cases.append(
            Case(
                "running app",
                f"{what}: {' '.join(command[:1])}",
                command,
                expect=(1, 2),
                ok=(0, 1) if command == ["servers"] else (0,),
                setup=forged_app(**row),
                during=answering_with(outcome) if outcome else None,
                quiet_ok=command == ["servers"],
                max_lines=2,
            )
        )
    cases.append(
        Case(
            "running app",
            "2,000 reconnects waiting for the app: reconnect count",
            ["reconnect", "count"],
            expect=(1,),
            ok=(0,),
            setup=app_with_queue(2000),
            verify=restarted_once_or_so,
            max_lines=2,
        )
    )
    return cases
