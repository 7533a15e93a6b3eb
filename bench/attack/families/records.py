"""The attack bench's family of `record_cases()`."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..cases import Case, Ctx, Run, SetupFailed, last_line
from ..checks import effects_are
from ..configs import base, make_fifo
from .clashes import demanding
from .proposals import propose
from .server_requests import no_sampling_left, pending_sampling


def proposal_status(ctx: Ctx) -> str | None:
    with contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=10)) as db:
        row = db.execute("SELECT status FROM proposals WHERE id = ?", (ctx.state["id"],)).fetchone()
    return None if row is None else str(row[0])


def not_left_approved(ctx: Ctx, run: Run) -> list[str]:
    status = proposal_status(ctx)
    if run.rc != 0 and status in ("approved", "executing", "interrupted"):
        return [f"the approval was refused, but the proposal is left {status}"]
    return []


def ledger_is(make: Callable[[Ctx, Path], object]) -> Callable[[Ctx], object]:
    def setup(ctx: Ctx) -> None:
        propose(ctx)
        ledger = ctx.data / "proposals.runs"
        if ledger.exists() or ledger.is_symlink():
            ledger.unlink()
        make(ctx, ledger)

    return setup


def ledger_elsewhere(ctx: Ctx, ledger: Path) -> None:
    elsewhere = ctx.dir / "elsewhere.runs"
    elsewhere.write_bytes(b"")
    os.symlink(elsewhere, ledger)


def nothing_written_elsewhere(ctx: Ctx, run: Run) -> list[str]:
    written = (ctx.dir / "elsewhere.runs").read_bytes()
    return ["the run ledger was written through a symlink"] if written else []


def key_gone_said(ctx: Ctx, run: Run) -> list[str]:
    """A proposal whose key is gone is refused for that reason, not as one that changed."""
    if b"arguments were changed" in run.err or b"key" not in run.err.lower():
        return [f"the missing key is not named: {last_line(run.err)}"]
    return []


def asked_and_killed(ctx: Ctx) -> None:
    """A `diana call` whose server asks the local model, killed (SIGKILL) while the proposal
    waits for a person."""
    allowed = {"servers": {"demanding": "allow"}}
    base(ctx, servers={"demanding": demanding(ctx, toolTimeout=30)}, policy=allowed)
    ctx.diana(
        "call",
        "demanding_sample_many",
        "--args",
        '{"n": 1}',
        signals=[(lambda c: pending_sampling(c) > 0, signal.SIGKILL)],
    )
    if not pending_sampling(ctx):
        raise SetupFailed("the sampling proposal never appeared")


def key_deleted(ctx: Ctx) -> None:
    propose(ctx)
    (ctx.data / "proposals.key").unlink()


def record_cases() -> list[Case]:
    return [
        Case(
            "records",
            "proposals.runs links to /proc/version: approve",
            lambda c: ["approve", c.state["id"]],
            expect=(1, 2),
            setup=ledger_is(lambda c, p: os.symlink("/proc/version", p)),
            check=effects_are(),
            verify=not_left_approved,
            max_lines=2,
        ),
        Case(
            "records",
            "proposals.runs links to a file elsewhere: approve",
            lambda c: ["approve", c.state["id"]],
            expect=(1, 2),
            setup=ledger_is(ledger_elsewhere),
            verify=lambda c, r: nothing_written_elsewhere(c, r) + not_left_approved(c, r),
            max_lines=2,
        ),
        Case(
            "records",
            "proposals.runs is a FIFO: approve",
            lambda c: ["approve", c.state["id"]],
            expect=(1, 2),
            setup=ledger_is(lambda c, p: make_fifo(p)),
            check=effects_are(),
            verify=not_left_approved,
            max_lines=2,
        ),
        Case(
            "records",
            "proposals.key deleted: approve",
            lambda c: ["approve", c.state["id"]],
            expect=(1, 2),
            setup=key_deleted,
            check=effects_are(),
            verify=key_gone_said,
            max_lines=2,
            short=True,
        ),
        Case(
            "records",
            "a killed asker's sampling proposal: proposals",
            ["proposals", "--all", "--json"],
            ok=(0,),
            setup=asked_and_killed,
            verify=no_sampling_left,
        ),
    ]
