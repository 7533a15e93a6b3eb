"""What a case leaves behind: orphans, secrets, side effects, and the checks built on them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

from .cases import ORPHAN_GRACE, Ctx, Run, alive, live_processes_naming, shown


def sleepers(ctx: Ctx) -> list[int]:
    """The sleepers fixture servers and tools wrote down that still sleep (checked by their
    command line, so a pid used again by another process is left alone)."""
    pids = []
    for path in ctx.dir.glob("sleepers*"):
        with contextlib.suppress(OSError, ValueError):
            pids += [int(p) for p in path.read_text().split()]
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if alive(pid) and b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def orphans_of(ctx: Ctx) -> int:
    deadline = time.monotonic() + ORPHAN_GRACE
    while True:
        left = set(live_processes_naming(ctx.marker)) | set(sleepers(ctx))
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
    return len(left)


def stored_files(directory: Path) -> list[Path]:
    files = []
    for top, _dirs, names in os.walk(directory):
        for name in names:
            path = Path(top) / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):
                    files.append(path)
    return files


def secret_leaks(ctx: Ctx) -> list[str]:
    """Secrets printed by any run (a stored secret: by the last one, once it was decided) or
    found in any file under the data dir (OAuth tokens: outside the oauth/ folder)."""
    leaks = []
    everywhere = ctx.secrets + ctx.stored_secrets + ctx.token_secrets
    for value in everywhere:
        for run in ctx.runs[-1:] if value in ctx.stored_secrets else ctx.runs:
            if value.encode() in run.out + run.err:
                leaks.append(f"secret printed by `{shown(run.args)[:60]}`")
                break
    for path in stored_files(ctx.data):
        try:
            content = path.read_bytes()
        except OSError:
            continue
        kept_here = path.parent == ctx.data / "oauth"
        for value in everywhere:
            if value in ctx.token_secrets and kept_here:
                continue
            if value.encode() in content:
                leaks.append(f"secret stored in {path.relative_to(ctx.dir)}")
    return leaks


def facts_saved(ctx: Ctx) -> int:
    db = ctx.data / "diana.db"
    try:
        if not stat.S_ISREG(os.stat(db).st_mode):
            return 0
        with contextlib.closing(sqlite3.connect(db, timeout=2)) as connection:
            return int(connection.execute("SELECT count(*) FROM facts").fetchone()[0])
    except (OSError, sqlite3.Error):
        return 0


def effects(ctx: Ctx) -> list[str]:
    return ctx.effects.read_text().splitlines() if ctx.effects.exists() else []


def no_fact(ctx: Ctx, run: Run) -> list[str]:
    return (
        [f"{n} fact(s) saved by a call that was denied or refused"]
        if (n := facts_saved(ctx))
        else []
    )


def effects_are(*expected: str) -> Callable[[Ctx, Run], list[str]]:
    def check(ctx: Ctx, run: Run) -> list[str]:
        found = []
        if effects(ctx) != list(expected):
            found.append(f"side effects {effects(ctx)} (expected {list(expected)})")
        if ctx.mark.exists():
            found.append("MARK written by a forged code_execution")
        if facts_saved(ctx):
            found.append("a fact saved by a forged proposal")
        return found

    return check


def peak_kb(pid: int) -> int:
    """The most memory (kB, VmHWM) a process has held so far; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else 0
