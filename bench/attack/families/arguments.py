"""The attack bench's family of `arguments_cases()`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..cases import ALLOW_ALL, CLEAR, FACT, TITLE, Case, Ctx, Run
from ..checks import no_fact
from ..configs import base


def arguments_cases() -> list[Case]:
    def allow(ctx: Ctx) -> None:
        base(ctx, policy=ALLOW_ALL)

    def deny(ctx: Ctx) -> None:
        base(ctx)

    def refused_and_nothing_saved(ctx: Ctx, run: Run) -> list[str]:
        return [] if run.rc == 0 else no_fact(ctx, run)

    deep900 = '{"content": "x", "tags": ' + "[" * 900 + "]" * 900 + "}"
    deep60k = '{"content": ' + "[" * 60_000 + "]" * 60_000 + "}"
    big_arg = json.dumps({"content": "a" * (127 * 1024)})
    args: list[tuple[str, str | bytes, Sequence[int]]] = [
        ("a lone surrogate escape in a value", '{"content": "a\\ud800b"}', ()),
        ("a lone surrogate escape in a name", '{"content": "x", "\\udc80": 1}', ()),
        ("raw non-UTF-8 bytes in a value", b'{"content": "caf\xe9 \xff\xfe"}', ()),
        ("raw non-UTF-8 bytes in a name", b'{"content": "x", "ta\xffgs": []}', ()),
        ("900-deep nesting", deep900, ()),
        ("60,000-deep nesting (argv's limit)", deep60k, ()),
        ("a 127 KiB string (10 MB cannot pass argv)", big_arg, ()),
        ("a 5,000-digit number", '{"content": "x", "tags": [1' + "0" * 5000 + "]}", ()),
        ("1e999 (infinity)", '{"content": 1e999}', ()),
        ("NaN", '{"content": NaN}', ()),
        ("a JSON array", '["content", "x"]', ()),
        ("a JSON string", '"content"', ()),
        ("JSON null", "null", ()),
        ("not JSON", "not json", ()),
        ("an empty string", "", ()),
        ("a NUL as \\u0000", '{"content": "a\\u0000b"}', (0,)),
        ("a NUL as \\u0000 in a name", '{"content": "x", "a\\u0000": 1}', ()),
        (
            "raw ANSI/OSC escapes in a value",
            json.dumps({"content": f"x{TITLE}{CLEAR}y"}, ensure_ascii=False),
            (0,),
        ),
        ("JSON-escaped ANSI in a value", json.dumps({"content": f"x{TITLE}{CLEAR}\x9b31my"}), (0,)),
        (
            "raw escapes in a bad field's name",
            json.dumps({"content": "x", f"{CLEAR}evil": 1}, ensure_ascii=False),
            (),
        ),
        (
            "escapes in a value failing the schema",
            json.dumps({"content": "x", "tags": [f"a{TITLE}"]}, ensure_ascii=False),
            (),
        ),
        (
            "a newline forging a second line",
            json.dumps({"content": "x", "tags": ["a\ndiana: all good"]}),
            (),
        ),
        ("10,000 tags", json.dumps({"content": "x", "tags": ["t"] * 10_000}), ()),
        ("duplicate keys", '{"content": "first", "content": "second"}', (0,)),
    ]
    with_json = ("a lone surrogate escape in a value", "900-deep nesting", "not JSON")
    cases = []
    for what, value, ok in args:
        cases.append(
            Case(
                "arguments",
                f"--args {what}",
                ["call", "save_fact", "--args", value],
                ok=ok,
                setup=allow,
                check=refused_and_nothing_saved,
                max_lines=1,
            )
        )
        if what not in with_json:
            continue
        cases.append(
            Case(
                "arguments",
                f"--args {what} --json",
                ["call", "save_fact", "--json", "--args", value],
                ok=(0,) if ok else (),
                # --json prints the failed ToolResult on stdout; argument errors still exit 2
                quiet_ok=True,
                setup=allow,
                check=refused_and_nothing_saved,
                max_lines=1,
            )
        )
    # Tool names: save_fact is denied, so a name that reaches it any other way is a bypass.
    names: list[tuple[str, str | bytes]] = [
        ("non-UTF-8", b"save_\xff\xfe"),
        ("with ANSI/OSC escapes", f"{TITLE}save_fact{CLEAR}"),
        ("10,000 characters", "s" * 10_000),
        ("empty", ""),
        ("upper case SAVE_FACT", "SAVE_FACT"),
        ("save-fact (hyphen)", "save-fact"),
        ("with a leading space", " save_fact"),
        ("with a trailing newline", "save_fact\n"),
        ("with a Cyrillic a", "save_f\u0430ct"),
        ("with a zero-width space", "save\u200b_fact"),
        ("a path", "../../etc/passwd"),
        ("forging a second line", "nope\ndiana: save_fact ran fine"),
        ("a lone surrogate", "save_\udcff"),
    ]
    for what, name in names:
        cases.append(
            Case(
                "arguments",
                f"tool name {what}",
                ["call", name, "--args", FACT],
                ok=(1,),  # reached save_fact: denied by policy, rightly
                setup=deny,
                check=no_fact,
                max_lines=1,
            )
        )

    # A 10 MB string where one can be given: a tools.json entry file, and a local tool's result.
    def big_entry(ctx: Ctx) -> None:
        base(ctx)
        entry = {"name": "big", "description": "d" * 10_000_000, "script": "big.py"}
        (ctx.dir / "entry.json").write_text(json.dumps(entry))

    cases.append(
        Case(
            "arguments",
            "tools add with a 10 MB description",
            lambda ctx: ["tools", "add", str(ctx.dir / "entry.json")],
            setup=big_entry,
            max_lines=1,
        )
    )

    def big_result(ctx: Ctx) -> None:
        tool = {
            "name": "big",
            "description": "A 10 MB answer.",
            "parameters": {"type": "object", "properties": {}},
            "script": "big.py",
            "timeout": 20,
            "risk": "reversible",
        }
        base(ctx, tools=[tool])
        (ctx.config / "tools").mkdir()
        (ctx.config / "tools" / "big.py").write_text(
            "def run(arguments):\n    return 'x' * 10_000_000 + '\\x1b[2J'\n"
        )

    cases.append(
        Case(
            "arguments", "a local tool answering 10 MB", ["call", "big"], ok=(0,), setup=big_result
        )
    )
    return cases
