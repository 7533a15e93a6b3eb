"""The run: every case of every family, two at a time, and the figures printed."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .cases import (
    ESCAPE_BYTES,
    MEMORY_LIMIT,
    ROOT_USER,
    WORKERS,
    Case,
    Ctx,
    Result,
    Run,
    SetupFailed,
    classify,
    live_processes_naming,
    printable_bytes,
    shown,
)
from .checks import orphans_of, secret_leaks
from .fakes import ESCAPED_ERROR, GARBAGE, serve
from .families.arguments import arguments_cases
from .families.chat_flow import chat_flow_cases
from .families.clashes import clash_cases
from .families.command_views import command_view_cases
from .families.commands import command_cases
from .families.config_edits import config_edit_cases
from .families.config_files import config_cases
from .families.conversations import conversations_cases
from .families.data_dir import data_cases
from .families.hostile_servers import hostile_server_cases
from .families.hosts import hosts_cases
from .families.http_hosts import http_hosts_cases
from .families.identity import identity_cases
from .families.images import images_cases
from .families.interrupts import interrupt_cases
from .families.memory import memory_cases
from .families.models import models_cases
from .families.one_instance import one_instance_cases
from .families.outside_bytes import outside_bytes_cases
from .families.private_files import private_file_cases
from .families.proposals import proposal_cases
from .families.records import record_cases
from .families.registry import registry_cases
from .families.rug_pull import rug_pull_cases
from .families.running_app import running_app_cases
from .families.secrets import secret_cases
from .families.server_requests import request_cases
from .families.sign_in import OAuthServer, sign_in_cases
from .families.views import views_cases


def run_case(index: int, case: Case, base: Path) -> Result:
    # short: a socket's path must fit in 108 bytes
    slug = re.sub(r"[^a-z0-9]+", "-", f"{case.family}-{case.name}".lower()).strip("-")[:32]
    ctx = Ctx(base / f"{index:04d}-{slug}", umask=case.umask)
    for sub in ("config", "tmp", "home"):
        (ctx.dir / sub).mkdir(parents=True)
    start, cpu_start = time.monotonic(), cpu_seconds()
    tried = False  # the attack itself ran: only then can its checks find a bypass
    try:
        if case.setup is not None:
            case.setup(ctx)
        args = case.args(ctx) if callable(case.args) else case.args
        with alongside(ctx, case.during):
            run = ctx.diana(
                *args,
                config=case.config(ctx) if case.config else None,
                data=case.data(ctx) if case.data else None,
                signals=case.signals,
                terminal=case.terminal,
            )
        tried = True
        outcome, detail = classify(case, run)
    except SetupFailed as exc:
        hung = bool(ctx.runs) and ctx.runs[-1].hung
        outcome, detail = ("hang" if hung else "unclear"), str(exc)
        run = ctx.runs[-1] if ctx.runs else Run((), None, b"", b"", 0.0, False)
    except Exception as exc:  # the bench's own setup failed: say so, go on
        outcome, detail = "unclear", f"bench setup error: {type(exc).__name__}: {exc}"
        run = ctx.runs[-1] if ctx.runs else Run((), None, b"", b"", 0.0, False)
    if outcome not in ("hang", "traceback"):
        for earlier in ctx.runs[:-1]:  # a setup step that printed a traceback counts too
            if classify(Case("", "", ()), earlier)[0] == "traceback":
                outcome, detail = "traceback", f"in setup `{shown(earlier.args)[:50]}`"
    result = Result(case, outcome, detail, index=index, seconds=time.monotonic() - start)
    for cleanup in reversed(ctx.cleanups):  # what the setup left running (an app, a lock)
        with contextlib.suppress(Exception):
            cleanup()
    result.orphans = orphans_of(ctx)
    result.escaped = any(m in r.out + r.err for r in ctx.runs for m in ESCAPE_BYTES)
    result.broken = [
        f"`{shown(r.args)[:40]}` left the terminal with echo off"
        for r in ctx.runs
        if r.echo_left_off
    ]
    try:
        result.leaks = secret_leaks(ctx)
        if case.check is not None and tried:
            result.bypasses += case.check(ctx, run)
        if case.verify is not None and tried:
            result.broken += case.verify(ctx, run)
    except Exception as exc:  # the bench's own check failed: say so, go on
        result.outcome, result.detail = "unclear", f"bench check error: {exc!r}"
    result.cpu = cpu_seconds() - cpu_start
    return result


def cpu_seconds() -> float:
    """User and system CPU of the bench and of every process it has waited for so far."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


@contextlib.contextmanager
def alongside(ctx: Ctx, during: Callable[[Ctx, threading.Event], object] | None) -> Iterator[None]:
    """``during`` runs in a thread for as long as the block does."""
    if during is None:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=during, args=(ctx, stop), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


# What `--short` runs (the suite runs it on every change): one case of each family, named
# here or marked `short=True` in its family, chosen as the cheapest in CPU (`--times` with
# `--part=1/1`) of the cases that attack what the family is about. A promise no test but
# this bench proves keeps a case here: a tool held after its definition changed (rug pull:
# described anew mid-session), an HTTP body past 4 MiB never held whole (http hosts: a 1 GiB
# body). Every other promise a case checks is proven in the suite by its own test as well
# (docs/promises.md, the README's safety promises); the full run keeps every case.
SHORT = {
    ("config files", "policy.json dangling symlink: call save_fact (denied by policy)"),
    ("data dir", "diana.db is a directory: call save_fact"),
    ("arguments", "tool name with ANSI/OSC escapes"),
    ("commands", "show an id with escapes"),
    ("proposals", "tool swapped for code_execution, then approve"),
    ("hostile servers", "escape sequences everywhere: servers"),
    ("secrets", "password in a URL: servers --json"),
    ("ctrl-c", "SIGTERM once the server runs"),
    ("server requests", "60 questions at once, no terminal"),
    ("sign-in", "client credentials: call a tool"),
    ("running app", "live_servers holding JSON that is not: servers"),
}


def figures(count: dict[str, int], what: str) -> str:
    return (
        f"{count['n']} {what} — clear errors {count['clear']}, ok {count['ok']}, "
        f"hangs {count['hang']}, tracebacks {count['traceback']}, orphans {count['orphans']}, "
        f"bypasses {count['bypass']}, secret leaks {count['leak']}, "
        f"broken promises {count['broken']}, escapes leaked {count['escaped']}, "
        f"unclear {count['unclear']}"
    )


def problems_of(result: Result) -> list[str]:
    problems = []
    if result.outcome in ("hang", "traceback", "unclear"):
        problems.append(f"{result.outcome}: {result.detail}")
    if result.orphans:
        problems.append(f"{result.orphans} orphan(s)")
    problems += [f"bypass: {b}" for b in result.bypasses]
    problems += [f"leak: {b}" for b in result.leaks]
    problems += [f"broken: {b}" for b in result.broken]
    if result.escaped:
        problems.append("escape leaked")
    return problems


def failed(result: Result) -> bool:
    """What `--short` fails on: everything but an unclear outcome (a wording or exit code a
    fix may rightly change)."""
    return bool(
        result.outcome in ("hang", "traceback")
        or result.orphans
        or result.bypasses
        or result.leaks
        or result.broken
        or result.escaped
    )


def main() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    started = time.monotonic()
    base_dir = Path(tempfile.mkdtemp(prefix="diana-attack-"))
    silent, stop_silent = serve(None)
    garbage, stop_garbage = serve(GARBAGE)
    escapes, stop_escapes = serve(ESCAPED_ERROR)
    sign_in = OAuthServer(base_dir)
    families = [
        config_cases(),
        data_cases(),
        arguments_cases(),
        command_cases({"silent": silent, "garbage": garbage, "escapes": escapes}),
        proposal_cases(),
        hostile_server_cases(f"{silent}/mcp", f"{garbage}/mcp"),
        secret_cases(),
        interrupt_cases(),
        clash_cases(),
        request_cases(),
        sign_in_cases(sign_in),
        private_file_cases(sign_in),
        record_cases(),
        running_app_cases(),
        config_edit_cases(),
        outside_bytes_cases(),
        memory_cases(),
        command_view_cases(),
        registry_cases(),
        chat_flow_cases(),
        identity_cases(),
        views_cases(),
        models_cases({"silent": silent, "garbage": garbage, "escapes": escapes}),
        conversations_cases(),
        hosts_cases(),
        images_cases(),
        rug_pull_cases(),
        http_hosts_cases(),
        one_instance_cases(),
    ]
    # --short: a few cases of every family, and every case marked short. Words on the command
    # line keep only the cases whose family or name holds one of them.
    short = "--short" in sys.argv[1:]
    listing = "--list" in sys.argv[1:]
    timing = "--times" in sys.argv[1:]
    # --part K/N: the K-th of N shares of the chosen cases (every N-th, from the K-th), for
    # runs side by side; each share runs its cases one at a time.
    part = next((a.removeprefix("--part=") for a in sys.argv[1:] if a.startswith("--part=")), "")
    words = [
        w
        for w in sys.argv[1:]
        if w not in ("--short", "--list", "--times") and w != f"--part={part}"
    ]
    cases = [
        case
        for family in families
        for case in family
        if (not short or case.short or (case.family, case.name) in SHORT)
        and (not words or any(w in f"{case.family}: {case.name}" for w in words))
    ]
    workers = WORKERS
    if part:
        share, shares = (int(n) for n in part.split("/"))
        cases, workers = cases[share - 1 :: shares], 1
    if listing:  # what would run, one case a line: family, name, whether --short runs it
        sign_in.stop()
        stop_silent()
        stop_garbage()
        stop_escapes()
        shutil.rmtree(base_dir, ignore_errors=True)
        for case in cases:
            short_mark = "short" if case.short or (case.family, case.name) in SHORT else "-"
            print(f"{case.family}\t{printable_bytes(case.name.encode(), 200)}\t{short_mark}")
        return 0
    print(f"{len(cases)} cases, {workers} at a time (Ctrl-C cases alone); scratch: {base_dir}")
    if ROOT_USER:
        print("running as root: unreadable-file cases (chmod 000) are left out, root reads them")
    indexed = list(enumerate(cases))
    results: list[Result] = []
    try:
        with ThreadPoolExecutor(workers) as pool:
            results += pool.map(
                lambda ic: run_case(ic[0], ic[1], base_dir),
                [ic for ic in indexed if not ic[1].serial],
            )
        results += [run_case(i, c, base_dir) for i, c in indexed if c.serial]
    finally:
        sign_in.stop()
    # Late orphans: anything still naming a case directory now.
    late = live_processes_naming(f"{base_dir}/")
    by_dir = {f"{base_dir}/{r.index:04d}-": r for r in results}
    for pid in late:
        try:
            blob = (
                Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
            )
        except OSError:
            continue
        for prefix, result in by_dir.items():
            if prefix.encode() in blob:
                result.orphans += 1
                result.detail += " (late orphan)"
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    stop_silent()
    stop_garbage()
    stop_escapes()
    elapsed = time.monotonic() - started

    order = list(dict.fromkeys(f[0].family for f in families if f))
    order = [family for family in order if any(c.family == family for c in cases)]
    kinds = ("n", "clear", "ok", "hang", "traceback", "unclear", "orphans", "bypass", "leak")
    totals = dict.fromkeys((*kinds, "broken", "escaped"), 0)
    for family in order:
        mine = [r for r in results if r.case.family == family]
        count = {
            "n": len(mine),
            **{
                k: sum(r.outcome == k for r in mine)
                for k in ("clear", "ok", "hang", "traceback", "unclear")
            },
            "orphans": sum(r.orphans for r in mine),
            "bypass": sum(bool(r.bypasses) for r in mine),
            "leak": sum(bool(r.leaks) for r in mine),
            "broken": sum(bool(r.broken) for r in mine),
            "escaped": sum(r.escaped for r in mine),
        }
        for key, value in count.items():
            totals[key] += value
        slowest = max(mine, key=lambda r: r.seconds)
        print()
        print(f"{family}: {figures(count, 'cases')}  (slowest {slowest.seconds:.1f} s)")
        for r in mine:
            problems = problems_of(r)
            if problems:
                print(f"  ✗ {printable_bytes(r.case.name.encode(), 90)}: {'; '.join(problems)}")
    print()
    print(f"total: {figures(totals, 'bad inputs tried')}")
    slowest_five = sorted(results, key=lambda r: -r.seconds)[:5]
    print("slowest: " + ", ".join(f"{r.case.name} {r.seconds:.0f} s" for r in slowest_five))
    print(f"took {elapsed:.0f} s")
    if timing:  # each case's seconds, slowest first; its CPU too when one ran at a time
        print()
        alone = workers == 1  # else the CPU of cases side by side mixes
        for r in sorted(results, key=lambda r: -(r.cpu if alone else r.seconds)):
            cpu = f"{r.cpu:6.1f} cpu-s  " if alone else ""
            print(
                f"{r.seconds:6.1f} s  {cpu}{r.case.family}: "
                f"{printable_bytes(r.case.name.encode(), 90)}"
            )
    shutil.rmtree(base_dir, ignore_errors=True)
    if not short:
        return 0
    failures = [r for r in results if failed(r)]
    if failures:
        print()
        print(f"--short: {len(failures)} of {len(results)} cases failed:")
        for r in failures:
            print(f"  {r.case.family}: {printable_bytes(r.case.name.encode(), 90)}")
        return 1
    print("--short: no bypass, traceback, hang, orphan, secret leak, broken promise or escape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
