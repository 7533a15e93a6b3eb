"""The attack bench's family of `conversations_cases()`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ..cases import ALLOW_ALL, CLEAR, TITLE, Case, Ctx, Run
from ..configs import base, make_fifo, make_loop
from .proposals import edit
from .running_app import database, made_by_diana


def conversations_cases() -> list[Case]:
    """`diana chats` and `diana ask --chat/--system` on hostile input: search text full of
    FTS5 syntax, huge, not UTF-8 or with escapes; titles the same (given, or stored by hand);
    ids that do not exist; exports to a link, a FIFO, a directory, a device, a file that is
    there already."""
    kept = "c0ffee000001"

    def chat(title: str | bytes = "a trip to Lisbon") -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx, policy=ALLOW_ALL)
            made_by_diana(ctx)
            at = "2026-01-01T00:00:00+00:00"
            stored = sqlite3.Binary(title) if isinstance(title, bytes) else title
            edit(
                ctx,
                "INSERT INTO conversations (id, title, model, created_at, updated_at, origin) "
                "VALUES (?, CAST(? AS TEXT), 'attack', ?, ?, 'cli')",
                kept,
                stored,
                at,
                at,
            )
            for role, text in (("user", "plan a trip to Lisbon"), ("assistant", "Alfama first")):
                edit(
                    ctx,
                    "INSERT INTO messages (conversation_id, role, kind, content, created_at) "
                    "VALUES (?, ?, 'chat', ?, ?)",
                    kept,
                    role,
                    text,
                    at,
                )

        return setup

    def still_kept(ctx: Ctx, _run: Run) -> list[str]:
        with database(ctx) as db:
            (count,) = db.execute("SELECT COUNT(*) FROM messages").fetchone()
        return [] if count == 2 else [f"{2 - count} message(s) gone without a yes"]

    def untouched(name: str) -> Callable[[Ctx, Run], list[str]]:
        def verify(ctx: Ctx, _run: Run) -> list[str]:
            text = (ctx.dir / name).read_text()
            return [] if text == "keep me\n" else [f"{name} was written through: {text[:40]!r}"]

        return verify

    def exported_to(name: str) -> Callable[[Ctx, Run], list[str]]:
        def verify(ctx: Ctx, _run: Run) -> list[str]:
            text = (ctx.dir / name).read_text()
            return [] if text.startswith("# ") and "Alfama first" in text else ["not exported"]

        return verify

    def with_target(make: Callable[[Ctx], object]) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            chat()(ctx)
            (ctx.dir / "kept.txt").write_text("keep me\n")
            make(ctx)

        return setup

    cases: list[Case] = []
    for what, text in (
        ("a lone quote", '"'),
        ("NEAR(...)", 'NEAR("trip" "lisbon", 2)'),
        ("AND/OR/NOT", "trip OR NOT lisbon AND"),
        ("a star", "*"),
        ("a leading minus", "-trip"),
        ("a column filter", "content:trip"),
        ("a caret", "^trip"),
        ("parentheses", "(trip"),
        ("a 100 kB search", "trip " * 20_000),
        ("escapes", f"{TITLE}trip{CLEAR}"),
    ):
        cases.append(
            Case(
                "conversations",
                f"search with {what}",
                ["chats", "search", text],
                ok=(0,),
                setup=chat(),
            )
        )
    cases.append(
        Case(
            "conversations",
            "search that is not UTF-8",
            ["chats", "search", b"\xff\xfetrip"],
            ok=(0,),
            setup=chat(),
        )
    )
    for what, title in (
        ("with escapes", f"{TITLE}Lisbon{CLEAR}".encode()),
        ("of 1 MB", b"x" * 1_000_000),
        ("that is not UTF-8", b"trip \xff\xfe to Lisbon"),
    ):
        for command in (["chats"], ["chats", "show", kept], ["chats", "export", kept]):
            cases.append(
                Case(
                    "conversations",
                    f"{' '.join(command[:2])} a stored title {what}",
                    command,
                    ok=(0,),
                    setup=chat(title),
                )
            )
    for what, title in (
        ("a 120 kB title", "x" * 120_000),
        ("an empty title", " "),
        ("a title of newlines", "\n\n"),
    ):
        cases.append(
            Case(
                "conversations",
                f"rename to {what}",
                ["chats", "rename", kept, title],
                setup=chat(),
                max_lines=1,
            )
        )
    for what, title in (
        ("escapes", f"{TITLE}Lisbon{CLEAR}"),
        ("bytes that are not UTF-8", b"Lisbon \xff\xfe"),
    ):
        cases.append(
            Case(
                "conversations",
                f"rename to a title with {what}",
                ["chats", "rename", kept, title],
                ok=(0,),
                setup=chat(),
            )
        )
    for what, chat_id in (
        ("an unknown id", "nosuch"),
        ("a 100 kB id", "x" * 100_000),
        ("an id that is not UTF-8", b"\xff\xfe"),
        ("an id with escapes", f"{TITLE}x{CLEAR}"),
        ("an empty id", ""),
    ):
        for command in ("show", "rm", "export"):
            cases.append(
                Case(
                    "conversations",
                    f"{command} {what}",
                    ["chats", command, chat_id, *(["--yes"] if command == "rm" else [])],
                    setup=chat(),
                    verify=still_kept,
                    max_lines=1,
                )
            )
    cases.append(
        Case(
            "conversations",
            "rm without --yes and no terminal",
            ["chats", "rm", kept],
            setup=chat(),
            verify=still_kept,
            max_lines=1,
        )
    )
    for what, make, verify, ok in (
        (
            "a symlink to a file",
            lambda c: (c.dir / "out.md").symlink_to(c.dir / "kept.txt"),
            untouched("kept.txt"),
            False,
        ),
        ("a FIFO", lambda c: make_fifo(c.dir / "out.md"), None, False),
        ("a directory", lambda c: (c.dir / "out.md").mkdir(), None, False),
        ("a link to /dev/null", lambda c: (c.dir / "out.md").symlink_to("/dev/null"), None, False),
        ("a link loop", lambda c: make_loop(c.dir / "out.md"), None, False),
        ("a missing folder", lambda c: None, None, False),
        (
            "a file that is there",
            lambda c: (c.dir / "out.md").write_text("old\n"),
            exported_to("out.md"),
            True,
        ),
    ):
        target: Callable[[Ctx], str] = (
            (lambda c: str(c.dir / "nowhere" / "out.md"))
            if what == "a missing folder"
            else (lambda c: str(c.dir / "out.md"))
        )
        cases.append(
            Case(
                "conversations",
                f"export --out {what}",
                lambda c, target=target: ["chats", "export", kept, "--out", target(c)],
                ok=(0,) if ok else (),
                setup=with_target(make),
                verify=verify,
                max_lines=1,
                short=what == "a FIFO",
            )
        )
    cases.append(
        Case(
            "conversations",
            "export --out /proc/self/mem",
            ["chats", "export", kept, "--out", "/proc/self/mem"],
            setup=chat(),
            max_lines=1,
        )
    )
    for what, command in (
        ("ask --chat an unknown id", ["ask", "hello", "--chat", "nosuch"]),
        ("ask --chat and --continue", ["ask", "hello", "--chat", kept, "--continue"]),
        ("ask --system of 40 kB", ["ask", "hello", "--chat", kept, "--system", "x" * 40_000]),
        ("list --limit 0", ["chats", "--limit", "0"]),
    ):
        cases.append(
            Case("conversations", what, command, setup=chat(), verify=still_kept, max_lines=1)
        )
    return cases
