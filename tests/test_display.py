"""Safe display: text from servers, tools, models and files never drives the terminal.

A real MCP server (tests/fixtures/escape_server.py) puts escape sequences and control
characters in its tool names, descriptions, results, errors and stderr; `diana` prints all
of it, and the app draws it, without one of them reaching the terminal.
"""

from __future__ import annotations

import json
import re

import pytest

from core.text import json_printable, printable

# What a terminal would obey: every C0 control but newline and tab, DEL, the C1 controls,
# and the bidi controls that reorder what is shown.
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
OBEYED_ON_SCREEN = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assert_shown_safely(text: str) -> None:
    found = OBEYED.search(text)
    assert found is None, f"{found.group()!r} at {found.start()}: {text[:2000]!r}"


# -- printable -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "block", "line"),
    [
        ("plain text, é, 漢字, emoji 🙂", "plain text, é, 漢字, emoji 🙂", None),
        ("a\x1b]0;pwned\x07b", "ab", None),  # OSC ending in BEL: removed whole
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb", None),  # ending in ST
        ("a\x1bP1$r\x1b\\b", "ab", None),  # DCS
        ("\x1b[2J\x1b[H\x1b[1;31mred\x1b[0m", "red", None),  # CSI
        ("\x1b[?1049h\x1b[38;2;1;2;3mx", "x", None),  # private modes, colours
        ("a\x1bcb\x1b7c\x1b(Bd", "abcd", None),  # other ESC sequences
        ("cut\x1b]0;no end", "cut0;no end", None),  # no terminator: what follows is shown
        ("cut\x1b[12", "cut12", None),  # a CSI with no final byte
        ("end\x1b", "end", None),
        ("a\x9b31mb\x9d0;t\x9cc", "a31mb0;tc", None),  # C1 controls go one by one
        ("x\x07\x08\x7f\x00y", "xy", None),
        ("over\rwrite", "overwrite", None),
        ("two\nlines\tand tab\r\n", "two\nlines\tand tab\n", "two lines and tab "),
        ("bidi \u202eevil\u202c \u2066x\u2069", "bidi evil x", None),
    ],
)
def test_printable_removes_what_a_terminal_would_obey(
    raw: str, block: str, line: str | None
) -> None:
    assert printable(raw) == block
    assert printable(raw, multiline=False) == (block if line is None else line)
    assert_shown_safely(printable(raw))
    assert OBEYED_ON_SCREEN.search(printable(raw, multiline=False)) is None


def test_json_printable_escapes_what_json_dumps_leaves_raw() -> None:
    value = {"k\x9b": "\x1b]0;t\x07 \x9d0;t\x9c \x7f \u202e é"}
    document = json_printable(json.dumps(value, ensure_ascii=False))
    assert_shown_safely(document)
    assert "é" in document  # non-ASCII text stays as it is
    assert json.loads(document) == value  # the same value, nothing lost
