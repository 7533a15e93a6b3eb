"""Safe display: text from servers, tools, models and files never drives the terminal.

A real MCP server (tests/fixtures/escape_server.py) puts escape sequences and control
characters in its tool names, descriptions, results, errors and stderr; `diana` prints all
of it, and the app draws it, without one of them reaching the terminal.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.content.text import json_printable, printable
from diana.tui.app import PRINTABLE_LINES, DianaApp
from diana.tui.modals.server_detail import ServerDetailScreen
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.widgets import DataTable

from .commands import diana_here
from .fixtures.fake_ollama import FakeOllama
from .scenarios import TERMINAL_SIZE, build_app, settle, type_command

ESCAPE_SERVER = str(Path(__file__).parent / "fixtures" / "escape_server.py")
SERVERS = {"esc": {"command": sys.executable, "args": [ESCAPE_SERVER]}}
SHOUT = "esc_shout_2j_h"  # the server's "shout\x1b[2J\x1b[H", normalised
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


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def escape_server(config_dir: Path) -> Path:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": SERVERS}))
    return config_dir


def run(config_dir: Path, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    done = diana_here(config_dir, data_dir, *args, env=env)
    assert_shown_safely(done.stdout)
    assert_shown_safely(done.stderr)
    assert "Traceback" not in done.stderr
    return done


@pytest.mark.processes  # the escape server diana starts
def test_tools_and_servers_print_names_descriptions_and_stderr_safely(
    escape_server: Path, data_dir: Path
) -> None:
    tools = run(escape_server, data_dir, "tools")
    assert tools.returncode == 0, tools.stderr
    (row,) = [line for line in tools.stdout.splitlines() if line.startswith(SHOUT)]
    assert row.endswith("  Says things loudly second line (MCP server esc)")  # one row, one line

    listed = json.loads(run(escape_server, data_dir, "tools", "--json").stdout)
    (shout,) = [t for t in listed if t["name"] == SHOUT]
    assert shout["description"] == (
        "Says\x1b]0;pwned\x07 things \x1b[31mloudly\nsecond line (MCP server esc)"
    )

    servers = run(escape_server, data_dir, "servers")
    assert servers.returncode == 0, servers.stderr
    assert re.search(r"^esc\s+ready\s+stdio\s+3\s*$", servers.stdout, re.MULTILINE)

    (server,) = json.loads(run(escape_server, data_dir, "servers", "--json").stdout)
    assert "starting\x1b]0;pwned\x07\x1b[2J\x1b[Hstderr line\x1b[31m" in server["stderr_tail"]
    assert {t["server_tool"] for t in server["tools"]} >= {"shout\x1b[2J\x1b[H"}


@pytest.mark.processes  # the escape server diana starts
def test_call_results_errors_and_the_log_print_safely(escape_server: Path, data_dir: Path) -> None:
    called = run(escape_server, data_dir, "call", SHOUT)
    assert called.returncode == 0, called.stderr
    assert called.stdout.startswith("beforemiddleafterredover31mend link")
    assert "pwned" not in called.stdout and "evil.example" not in called.stdout

    as_json = run(escape_server, data_dir, "call", SHOUT, "--json")
    assert "\\u009b31m" in as_json.stdout  # escaped, not dropped: the value is whole
    assert json.loads(as_json.stdout)["data"].startswith("before\x1b]0;pwned\x07middle")

    failed = run(escape_server, data_dir, "call", "esc_explode")
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()  # one line: the error cannot forge another
    assert line.startswith("diana: ") and "boom" in line and "pwned" not in line

    log = run(escape_server, data_dir, "log")
    assert [line.split()[3] for line in log.stdout.splitlines()[1:]] == [
        SHOUT,
        SHOUT,
        "esc_explode",
    ]
    logged = json.loads(run(escape_server, data_dir, "log", "--json").stdout)
    assert len(logged) == 3


@pytest.mark.processes  # the escape server diana starts
def test_proposals_show_hidden_arguments_escaped_not_removed(
    escape_server: Path, data_dir: Path
) -> None:
    # A payload behind an 8-bit OSC would vanish if it were removed whole: the person
    # deciding must see every character of what would run.
    path = "/tmp/safe\x9d0;; rm -rf ~ ;\x9c\x1b]0;x\x07"
    arguments = json.dumps({"path": path})
    pending = run(escape_server, data_dir, "call", "esc_remove", "--args", arguments)
    assert pending.returncode == 3, pending.stderr
    proposal_id = pending.stdout.strip()

    listed = run(escape_server, data_dir, "proposals")
    assert "/tmp/safe\\u009d0;; rm -rf ~ ;" in listed.stdout  # the controls shown as escapes

    shown = run(escape_server, data_dir, "show", proposal_id)
    assert "rm -rf ~" in shown.stdout and "\\u001b]0;x\\u0007" in shown.stdout
    (stored,) = json.loads(run(escape_server, data_dir, "proposals", "--json").stdout)
    assert stored["arguments"] == {"path": path}


def test_a_config_error_naming_a_bad_server_name_prints_safely(
    config_dir: Path, data_dir: Path
) -> None:
    bad = {"mcpServers": {"x\x1b]0;pwned\x07\x1b[2J": {"command": "true"}}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(bad))
    done = run(config_dir, data_dir, "servers")
    assert done.returncode == 2
    assert done.stderr.startswith("diana: config error in ") and "pwned" not in done.stderr


@pytest.mark.processes  # diana-tui's own start, ended before any screen
def test_the_app_names_a_bad_server_name_safely(config_dir: Path, data_dir: Path) -> None:
    bad = {"mcpServers": {"x\x1b]0;pwned\x07\x1b[2J": {"command": "true"}}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(bad))
    argv = [sys.executable, "-m", "diana.tui.app", "--config-dir", str(config_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert_shown_safely(done.stderr)
    assert done.stderr.startswith("diana-tui: config error in ") and "pwned" not in done.stderr


@pytest.mark.processes  # the escape server diana starts
def test_ask_streams_the_model_and_tool_output_safely(escape_server: Path, data_dir: Path) -> None:
    with FakeOllama() as fake:
        fake.add(
            {"thinking": ["think\x1b]0;pw", "ned\x07 more"], "tool_calls": [{"name": SHOUT}]},
            {"content": ["It is \x1b]0;pw", "ned\x07 fine\x1b[2", "J, done\x9b31m."]},
        )
        done = run(escape_server, data_dir, "ask", "shout for me", env={"OLLAMA_HOST": fake.url})
    assert done.returncode == 0, done.stderr
    assert "It is" in done.stdout and "done" in done.stdout
    assert f"⚙ {SHOUT}" in done.stderr


# -- the app ---------------------------------------------------------------------------------


def screen_lines(app: DianaApp) -> list[str]:
    """Every row of the screen as the terminal would be sent it, text only."""
    strips = app.screen._compositor.render_strips()
    return ["".join(segment.text for segment in strip) for strip in strips]


def assert_screen_safe(app: DianaApp) -> str:
    lines = screen_lines(app)
    for number, line in enumerate(lines):
        found = OBEYED_ON_SCREEN.search(line)
        assert found is None, f"row {number}: {found.group()!r} in {line!r}"
    return "\n".join(lines)


def test_the_line_filter_keeps_each_line_as_wide_as_it_was() -> None:
    red = Style(color="red")
    line = [Segment("a\x1b[2Jb", red), Segment("\x1b]0;t"), Segment("c\td"), Segment("ok é")]
    shown = PRINTABLE_LINES.apply(line, Color(0, 0, 0))
    assert [(s.text, s.style) for s in shown] == [
        ("ab   ", red),  # "[2J" took three cells: three spaces keep the line's width
        ("0;t ", None),
        ("cd", None),
        ("ok é", None),
    ]
    assert [cell_len(s.text) for s in shown] == [s.cell_length for s in line]
    clean = [Segment("nothing to take out"), Segment("│")]
    assert PRINTABLE_LINES.apply(clean, Color(0, 0, 0)) is clean


@pytest.mark.processes
async def test_the_app_draws_results_names_and_stderr_without_their_escapes(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, SERVERS)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, f"/call {SHOUT} {{}}")
        await type_command(pilot, "/call esc_explode {}")
        # The execution log pane and the chat transcript, with the result and the error.
        table = app.query_one("#log-table", DataTable)
        assert table.row_count == 2
        screen = assert_screen_safe(app)
        assert "[2J" not in screen and "31m" in screen  # CSI whole; a C1 payload shown
        # In the transcript and in the log. (Rich drops an OSC's BEL before the line filter
        # sees it: the escape goes, its text may stay.)
        assert len(re.findall("before(0;pwned)?middleafter", screen)) == 2
        # The tool-call line opened: arguments and the whole result.
        await pilot.press("shift+tab")
        await pilot.press("enter")
        await pilot.pause()
        assert_screen_safe(app)

        # The server's detail view: its tools' names and descriptions, and stderr.
        await pilot.press("f4", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ServerDetailScreen)
        screen = assert_screen_safe(app)
        assert "stderr line" in screen and "Says" in screen
