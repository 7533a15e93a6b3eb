"""The attack bench's family of `command_cases()`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases import ALLOW_ALL, CLEAR, FACT, FIXTURE, TITLE, Case, Ctx
from ..checks import no_fact
from ..configs import base, make_fifo, python_server


def command_cases(ollama: dict[str, str]) -> list[Case]:
    def plain(ctx: Ctx) -> None:
        base(ctx, policy=ALLOW_ALL)

    def entry_file(content: bytes | str | Callable[[Path], object]) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx, policy=ALLOW_ALL)
            path = ctx.dir / "entry.json"
            if callable(content):
                content(path)
            else:
                path.write_bytes(content if isinstance(content, bytes) else content.encode())

        return setup

    def entry(**fields: Any) -> str:
        value = {"name": "t", "description": "A tool.", "script": "t.py", **fields}
        return json.dumps(value, ensure_ascii=False)

    cases: list[Case] = []
    simple: list[tuple[str, list[str | bytes]]] = [
        ("log --limit 0", ["log", "--limit", "0"]),
        ("log --limit -5", ["log", "--limit", "-5"]),
        ("log --limit 10**30", ["log", "--limit", "1" + "0" * 30]),
        ("log --since garbage", ["log", "--since", "garbage"]),
        ("log --since 99999999999999d", ["log", "--since", "99999999999999d"]),
        ("log --since 0001-01-01", ["log", "--since", "0001-01-01"]),
        ("log --since 9999-99-99", ["log", "--since", "9999-99-99"]),
        ("log --since empty", ["log", "--since", ""]),
        ("log --since with escapes", ["log", "--since", f"{TITLE}2h"]),
        ("log --status with escapes", ["log", "--status", f"ok{CLEAR}"]),
        ("show an empty id", ["show", ""]),
        ("show an SQL injection", ["show", "x' OR '1'='1"]),
        ("show an id with escapes", ["show", f"{TITLE}abc"]),
        ("show a non-UTF-8 id", ["show", b"\xff\xfe"]),
        ("approve a non-UTF-8 id", ["approve", b"\xff\xfe"]),
        ("reject a non-UTF-8 id", ["reject", b"\xff\xfe"]),
        ("log --tool non-UTF-8", ["log", "--tool", b"\xff\xfe"]),
        ("approve an unknown id", ["approve", "zzzzzzzz"]),
        ("reject unknown with an escaped reason", ["reject", "zzzz", "--reason", f"{TITLE}why"]),
        ("reconnect an empty name", ["reconnect", ""]),
        ("reconnect a name with escapes", ["reconnect", f"{CLEAR}time"]),
        ("tools remove an empty name", ["tools", "remove", ""]),
        ("tools remove a name with escapes", ["tools", "remove", f"{TITLE}x"]),
        ("tools add a missing file", ["tools", "add", "/nonexistent/entry.json"]),
        ("tools add /dev/zero", ["tools", "add", "/dev/zero"]),
        ("tools add a directory", ["tools", "add", "/tmp"]),
        ("an unknown command", ["frobnicate"]),
        ("ask with Ollama unreachable", ["ask", "hello"]),
        ("ask --json with Ollama unreachable", ["ask", "--json", "hello"]),
        ("ask a prompt with escapes", ["ask", f"{TITLE}{CLEAR}hello"]),
    ]
    for what, command in simple:
        cases.append(
            Case(
                "commands",
                what,
                command,
                # a year-1 --since is a valid date (all calls since then); a non-UTF-8 --tool
                # is a name no call has (no rows)
                ok=(0,) if what.endswith(("0001-01-01", "--tool non-UTF-8")) else (),
                quiet_ok="--json" in what,
                setup=plain,
                max_lines=1 if not command[0] == "ask" else 5,
            )
        )
    entries: list[tuple[str, Callable[[Ctx], object]]] = [
        ("tools add a FIFO", entry_file(make_fifo)),
        ("tools add a symlink to /dev/zero", entry_file(lambda p: os.symlink("/dev/zero", p))),
        ("tools add 100,000-deep nesting", entry_file("[" * 100_000 + "]" * 100_000)),
        ("tools add a JSON array", entry_file("[]")),
        ("tools add non-UTF-8", entry_file(b'{"name": "\xff"}')),
        ("tools add a script outside tools/", entry_file(entry(script="../../../bin/sh"))),
        ("tools add an absolute script", entry_file(entry(script="/bin/sh"))),
        ("tools add a name with escapes", entry_file(entry(name=f"t{CLEAR}"))),
        ("tools add the name save_fact", entry_file(entry(name="save_fact"))),
        ("tools add an empty name", entry_file(entry(name=""))),
        (
            "tools add a timeout of 1e999",
            entry_file(entry(timeout=1e999).replace("Infinity", "1e999")),
        ),
        ("tools add risk 'none'", entry_file(entry(risk="none"))),
    ]
    for what, setup in entries:
        cases.append(
            Case(
                "commands",
                what,
                lambda ctx: ["tools", "add", str(ctx.dir / "entry.json")],
                # a local tool named like a built-in one is written, and never registered:
                # the built-in keeps the name
                ok=(0,) if what.endswith("save_fact") else (),
                setup=setup,
                max_lines=1,
            )
        )

    def ollama_env(host: str) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            plain(ctx)
            ctx.env["OLLAMA_HOST"] = host

        return setup

    for what, setup, with_host in (
        ("OLLAMA_HOST=http://[::1, then proposals", ollama_env("http://[::1"), ["proposals"]),
        ("OLLAMA_HOST=http://[::1, then ask", ollama_env("http://[::1"), ["ask", "hi"]),
        (
            "llm.host http://[::1 in settings.json, then proposals",
            lambda ctx: base(ctx, llm={"host": "http://[::1"}),
            ["proposals"],
        ),
        (
            "llm.host http://[::1 in settings.json, then call save_fact",
            lambda ctx: base(ctx, llm={"host": "http://[::1"}),
            ["call", "save_fact", "--args", FACT],
        ),
    ):
        cases.append(
            Case("commands", what, with_host, expect=(2,), setup=setup, check=no_fact, max_lines=5)
        )

    def zone(tz: str) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            plain(ctx)
            ctx.env["TZ"] = tz

        return setup

    # Dates at the ends of the calendar, read as local time far from UTC.
    for what, tz, since in (
        ("log --since 0001-01-01 at UTC+14", "Pacific/Kiritimati", "0001-01-01"),
        ("log --since 9999-12-31T23:59 at UTC-11", "Pacific/Pago_Pago", "9999-12-31T23:59"),
        ("log --since 9999-12-31T23:59-11:00", "UTC", "9999-12-31T23:59-11:00"),
    ):
        cases.append(
            Case("commands", what, ["log", "--since", since], ok=(0,), setup=zone(tz), max_lines=1)
        )

    def llm_at(host: str) -> Callable[[Ctx], object]:
        return lambda ctx: base(ctx, policy=ALLOW_ALL, llm={"host": host})

    for what, host in (
        ("a silent listener", ollama["silent"]),
        ("a server answering garbage", ollama["garbage"]),
        ("a server answering an error with escapes", ollama["escapes"]),
        ("a host that is not a URL", "not a url \x1b[2J"),
        ("a file:// URL", "file:///etc/passwd"),
    ):
        cases.append(
            Case(
                "commands",
                f"ask with Ollama at {what}",
                ["ask", "hello"],
                expect=(2, 1),
                setup=llm_at(host),
                max_lines=5,
            )
        )

    # Saving a resource where no file can hold it.
    def fixture(ctx: Ctx) -> None:
        servers = {"fx": python_server(FIXTURE, timeout=10)}
        base(ctx, servers=servers, policy={"tools": {}, "servers": {"fx": "allow"}})

    for out, short in (
        ("/proc/self/mem", False),
        ("/proc/self/environ", False),
        ("/dev/full", False),
    ):
        cases.append(
            Case(
                "commands",
                f"read --out {out}",
                ["read", "fx", "fixture://greeting", "--out", out],
                expect=(1, 2),
                setup=fixture,
                max_lines=1,
                short=short,
            )
        )
    return cases
