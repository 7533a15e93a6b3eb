"""The attack bench's family of `request_cases()`."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import secrets
import sqlite3
from collections.abc import Callable
from typing import Any

from ..cases import Case, Ctx, Run, Typist, last_line, printable_bytes
from ..checks import stored_files
from ..configs import base
from .clashes import demanding, recorded, sent


def answering(secret: str = "", value: str = "Ada", choice: str = "1", final: str = "y") -> Typist:
    """A person at the terminal: a secret where a password is asked, ``choice`` for a choice,
    ``value`` for any other field, ``final`` at "send it?" / "done?"."""

    def type_at(shown: bytes) -> bytes | None:
        last = shown.rsplit(b"\n", 1)[-1]
        if last.endswith(b"(Enter): "):
            return final.encode() + b"\n"
        if not last.endswith(b": "):
            return None
        if b"password" in last.lower():
            return secret.encode() + b"\n"
        if b"one of:" in last:
            return choice.encode() + b"\n"
        return value.encode() + b"\n"

    return type_at


def answered_all(n: int) -> Callable[[Ctx, Run], list[str]]:
    def verify(ctx: Ctx, run: Run) -> list[str]:
        answers = sum("answer" in entry for entry in recorded(ctx))
        return [] if answers >= n else [f"{n - answers} of {n} requests never had an answer"]

    return verify


def asked_one_at_a_time(ctx: Ctx, run: Run) -> list[str]:
    """Each question's fields and its "send it?" come before the next question is shown."""
    steps = re.findall(rb"\? MCP server \S+ asks|send it\?", run.err)
    kinds = ["ask" if step.startswith(b"?") else "send" for step in steps]
    if any(a == b == "ask" for a, b in itertools.pairwise(kinds)):
        return ["questions asked at once were shown interleaved on the terminal"]
    return []


def printed_at_most(limit: int) -> Callable[[Ctx, Run], list[str]]:
    def verify(ctx: Ctx, run: Run) -> list[str]:
        size = len(run.out) + len(run.err)
        return [f"printed {size:,} bytes of a server's request whole"] if size > limit else []

    return verify


def data_at_most(megabytes: int) -> Callable[[Ctx, Run], list[str]]:
    def verify(ctx: Ctx, run: Run) -> list[str]:
        size = sum(p.stat().st_size for p in stored_files(ctx.data))
        if size > megabytes << 20:
            return [f"the data dir grew to {size / (1 << 20):.0f} MiB"]
        return []

    return verify


def pending_sampling(ctx: Ctx) -> int:
    try:
        with contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=2)) as db:
            row = db.execute(
                "SELECT count(*) FROM proposals WHERE tool = 'mcp_sampling' AND status = 'pending'"
            ).fetchone()
            return int(row[0])
    except (OSError, sqlite3.Error):
        return 0


def no_sampling_left(ctx: Ctx, run: Run) -> list[str]:
    left = pending_sampling(ctx)
    return [f"{left} sampling proposal(s) left pending, nobody waiting"] if left else []


def polled_gently(seconds: float) -> Callable[[Ctx, Run], list[str]]:
    """No more than a tasks/get each 0.05 s (and a few more): however fast the server asks to
    be polled, its pace is bounded; and the task cancelled when the call ends without it."""

    def verify(ctx: Ctx, run: Run) -> list[str]:
        found = []
        polls = sent(ctx, "tasks/get")
        if polls > seconds / 0.05 + 10:
            found.append(f"{polls} tasks/get in {seconds:g} s")
        if not sent(ctx, "tasks/cancel"):
            found.append("the task was not cancelled (no tasks/cancel)")
        return found

    return verify


def names_a_size(ctx: Ctx, run: Run) -> list[str]:
    if run.rc == 0 or re.search(rb"\d+(\.\d+)? ?(bytes|[KMG]i?B)\b", run.err):
        return []
    return [f"a failure that does not name the limit: {last_line(run.err)}"]


# What diana writes on a terminal while it asks: its questions, and the fields, indented.
TERMINAL_PREFIXES = ("diana:", "?")


OFFERED_URL = re.compile(rb"open this URL: (?!https?://)(\S*)")


def no_odd_url_offered(ctx: Ctx, run: Run) -> list[str]:
    """Only a web page (http, https) is put to a person to open."""
    found = OFFERED_URL.search(run.err)
    return [] if found is None else [f"offered {printable_bytes(found.group(1), 60)} to open"]


def request_cases() -> list[Case]:
    def server(*extra: str, **fields: Any) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            entry = demanding(ctx, *extra, **fields)
            base(ctx, servers={"demanding": entry}, policy={"servers": {"demanding": "allow"}})

        return setup

    typed = "pw-" + secrets.token_hex(8)

    def secret_typed(ctx: Ctx) -> None:
        server()(ctx)
        ctx.secrets.append(typed)  # typed where no one sees it, and stored nowhere

    def call(tool: str, **arguments: Any) -> list[str]:
        return ["call", f"demanding_{tool}", "--args", json.dumps(arguments)]

    cases = [
        Case(
            "server requests",
            "60 questions at once, no terminal",
            call("ask_many", n=60),
            expect=(1,),
            ok=(0,),
            setup=server(toolTimeout=20),
            verify=answered_all(60),
            max_lines=200,
            short=True,
        ),
        Case(
            "server requests",
            "3 secret questions at once, on a terminal",
            call("ask_many", n=3, secret=True),
            expect=(1,),
            ok=(0,),
            setup=secret_typed,
            terminal=answering(secret=typed),
            verify=lambda c, r: asked_one_at_a_time(c, r) + answered_all(3)(c, r),
            prefixes=TERMINAL_PREFIXES,
            max_lines=400,
        ),
        Case(
            "server requests",
            "8 questions at once, on a terminal",
            call("ask_many", n=8),
            expect=(1,),
            ok=(0,),
            setup=server(toolTimeout=30),
            terminal=answering(),
            verify=lambda c, r: asked_one_at_a_time(c, r) + answered_all(8)(c, r),
            prefixes=TERMINAL_PREFIXES,
            max_lines=400,
        ),
        Case(
            "server requests",
            "a 5 MB question, no terminal",
            call("ask_big", message_size=5_000_000),
            expect=(1,),
            ok=(0,),
            setup=server(),
            verify=printed_at_most(1 << 20),
        ),
        Case(
            "server requests",
            "a choice among 200,000 values, on a terminal",
            call("ask_big", enum_size=200_000),
            expect=(1,),
            ok=(0,),
            setup=server(),
            terminal=answering(final="n"),
            verify=printed_at_most(1 << 20),
            prefixes=TERMINAL_PREFIXES,
            max_lines=400,
        ),
        Case(
            "server requests",
            "sampling: 3 requests of 10 MB",
            call("sample_many", n=3, size=10_000_000),
            expect=(1,),
            ok=(0,),
            setup=server(toolTimeout=8),
            verify=data_at_most(16),
            max_lines=5,
            prefixes=("diana:", "?"),
        ),
        Case(
            "server requests",
            "sampling: 10 requests of 10 MB",
            call("sample_many", n=10, size=10_000_000),
            expect=(1,),
            ok=(0,),
            setup=server(toolTimeout=15),
            verify=data_at_most(16),
            max_lines=12,
            prefixes=("diana:", "?"),
        ),
        Case(
            "server requests",
            "sampling: 60 requests, then the call runs out of time",
            call("sample_many", n=60),
            expect=(1,),
            setup=server(toolTimeout=3),
            verify=no_sampling_left,
            max_lines=62,
            prefixes=("diana:", "?"),
        ),
        Case(
            "server requests",
            "sampling: the server exits with 5 requests waiting",
            call("sample_many", n=5, exit_after=1),
            expect=(1,),
            setup=server(toolTimeout=20),
            verify=no_sampling_left,
            max_lines=7,
            prefixes=("diana:", "?"),
        ),
    ]
    for interval, short in (("-1", False), ("1", False), ("-1000", False)):
        cases.append(
            Case(
                "server requests",
                f"a task whose pollInterval is {interval} ms, past toolTimeout",
                call("research", seconds=600),
                expect=(1,),
                setup=server("--poll-interval", interval, toolTimeout=3),
                verify=polled_gently(3),
                max_lines=1,
                short=short,
            )
        )
    cases.append(
        Case(
            "server requests",
            "a task whose tasks/get fails",
            call("research", seconds=600),
            expect=(1,),
            setup=server("--fail-get", toolTimeout=10),
            verify=lambda c, r: [] if sent(c, "tasks/cancel") else ["no tasks/cancel"],
            max_lines=1,
        )
    )
    cases.append(
        Case(
            "server requests",
            "a 100 MB resource: read it",
            ["read", "demanding", "demanding://huge"],
            expect=(1,),
            ok=(0,),
            setup=server("--resource-mb", "100", toolTimeout=20),
            verify=names_a_size,
            max_lines=2,
        )
    )
    for what, url, short in (
        ("javascript:", "javascript:alert(document.cookie)", False),
        ("file:", "file:///etc/passwd", False),
        ("a browser option", "--gpu-launcher=touch /tmp/pwned", False),
    ):
        cases.append(
            Case(
                "server requests",
                f"a URL to open that is {what}, on a terminal",
                call("ask_many", n=1, url=url),
                expect=(1,),
                ok=(0,),
                setup=server(),
                terminal=answering(final="n"),
                verify=no_odd_url_offered,
                prefixes=TERMINAL_PREFIXES,
                max_lines=400,
                short=short,
            )
        )
    return cases
