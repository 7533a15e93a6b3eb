"""`diana` starts only what a command needs: no MCP SDK or ollama client for commands that use
neither, no server a call does not run on (the tool cache answers for it), and a running
diana-tui is asked rather than copied."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .commands import diana_args, diana_here, start_diana
from .configs import counted_server, starts_of, write_servers

pytestmark = pytest.mark.processes  # every test here starts a process (a server, at least)

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
# Runs each `diana` command given (one JSON list of arguments a line) in a process of its own,
# then says which of these modules each imported. Each is forked from one interpreter that has
# imported what every command imports first (the command table, the runtime) and none of them:
# a module of theirs a command imports, it imports in its own process, as a fresh
# `python -m diana.tui.cli` would (and the commands' start-up is imported once, not per command).
IMPORTS = """
import json, os, sys
from diana.tui.cli import main
import diana.tui.cli.commands, diana.core.runtime
HEAVY = ("mcp", "mcp_types", "ollama", "httpx")
results = []
assert not [m for m in HEAVY if m in sys.modules], "imported before any command ran"
for line in open(sys.argv[1]).read().splitlines():
    out = sys.argv[2] + "." + str(len(results))
    pid = os.fork()
    if pid == 0:
        try:
            try:
                code = main(sys.argv[3:] + json.loads(line))
            except SystemExit as exc:
                code = exc.code
            with open(out, "w") as file:
                json.dump({"code": code, "imported": [m for m in HEAVY if m in sys.modules]}, file)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    results.append(json.load(open(out)))
with open(sys.argv[2], "w") as file:
    json.dump(results, file)
"""


def cached_server(tmp_path: Path, config_dir: Path, data_dir: Path) -> Path:
    """The only server is `srv`, started once to fill the tool cache; its record of starts."""
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    assert diana_here(config_dir, data_dir, "tools", "--refresh").returncode == 0
    return starts


def imports_of(
    tmp_path: Path, config_dir: Path, data_dir: Path, *commands: tuple[str, ...]
) -> list[dict[str, object]]:
    """What each command imported, each run in a process of its own that started as a fresh
    interpreter that has imported diana's command line."""
    script, listed, out = tmp_path / "imports.py", tmp_path / "commands", tmp_path / "imports.json"
    script.write_text(IMPORTS)
    listed.write_text("".join(json.dumps(list(args)) + "\n" for args in commands))
    argv = diana_args(config_dir, data_dir)
    done = subprocess.run(
        [sys.executable, str(script), str(listed), str(out), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0 and out.exists(), done.stderr
    result: list[dict[str, object]] = json.loads(out.read_text())
    return result


def test_commands_that_use_no_server_import_neither_the_mcp_sdk_nor_ollama(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    cached_server(tmp_path, config_dir, data_dir)
    expected = (
        (("proposals",), 0),
        (("show", "nosuch"), 2),
        (("reject", "nosuch"), 2),
        (("log",), 0),
        (("cost",), 0),
        (("tools", "remove", "nosuch"), 2),
        (("--help",), 0),
        (("--version",), 0),
        (("call", "get_current_time"), 0),
        (("call", "no_such_tool"), 2),
        (("call", "srv_echo", "--args", '{"txt": "a"}'), 2),  # its schema from the cache
        # The check sees an import when there is one: a call that runs on the server.
        (("call", "srv_echo", "--args", '{"text": "a"}'), 0),
    )
    seen = imports_of(tmp_path, config_dir, data_dir, *(args for args, _code in expected))
    assert len(seen) == len(expected)
    *quiet, ran = zip(expected, seen, strict=True)
    for (args, code), imported in quiet:
        assert imported == {"code": code, "imported": []}, args
    (_args, code), imported = ran
    assert imported["code"] == code and "mcp" in imported["imported"]  # type: ignore[operator]


def test_a_server_starts_only_for_a_call_that_runs_on_it(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server, "other": counted_server(tmp_path / "o")[0]})
    assert diana_here(config_dir, data_dir, "tools", "--refresh").returncode == 0
    assert starts_of(starts) == 1

    bad = diana_here(config_dir, data_dir, "call", "srv_echo", "--args", '{"txt": "a"}')
    assert bad.returncode == 2
    assert 'invalid arguments for srv_echo: missing required argument "text"' in bad.stderr
    unknown = diana_here(config_dir, data_dir, "call", "srv_ech")
    assert unknown.returncode == 2
    assert "unknown tool srv_ech; did you mean srv_echo" in unknown.stderr
    assert "MCP server srv's tools as listed just now" in unknown.stderr
    held = diana_here(config_dir, data_dir, "call", "srv_delete_file", "--args", '{"path": "a"}')
    assert held.returncode == 3, held.stderr  # the proposal is made from the cached tool
    assert starts_of(starts) == 1  # none of the three started it

    approved = diana_here(config_dir, data_dir, "approve", held.stdout.strip())
    assert (approved.returncode, approved.stdout.strip()) == (0, "deleted a"), approved.stderr
    ran = diana_here(config_dir, data_dir, "call", "srv_echo", "--args", '{"text": "hi"}')
    assert (ran.returncode, ran.stdout.strip()) == (0, "hi"), ran.stderr
    assert starts_of(starts) == 3  # once for each call that ran
    assert starts_of(tmp_path / "o" / "starts.txt") == 1  # the other server: only --refresh

    # The server's entry changed: its cached tools no longer stand for it.
    write_servers(config_dir, {"srv": {**server, "env": {"CHANGED": "1"}}})
    again = diana_here(config_dir, data_dir, "call", "srv_echo", "--args", '{"txt": "a"}')
    assert again.returncode == 2
    assert starts_of(starts) == 4


def test_a_cache_entry_that_cannot_be_read_is_connected_past_and_written_anew(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    starts = cached_server(tmp_path, config_dir, data_dir)
    with sqlite3.connect(data_dir / "diana.db") as db:
        db.execute("UPDATE tool_cache SET tools = '[{\"definition\": 7}]'")
    bad = diana_here(config_dir, data_dir, "call", "srv_echo", "--args", '{"txt": "a"}')
    assert bad.returncode == 2 and "missing required argument" in bad.stderr
    assert starts_of(starts) == 2  # connected, since the entry was no use
    bad = diana_here(config_dir, data_dir, "call", "srv_echo", "--args", '{"txt": "a"}')
    assert bad.returncode == 2 and starts_of(starts) == 2  # written anew by that connection


def test_tools_lists_from_the_cache_and_says_how_old_each_entry_is(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server, "gone": {"command": "no-such-mcp-command-xyz"}})
    refreshed = diana_here(config_dir, data_dir, "tools")  # no entry yet: connects
    assert refreshed.returncode == 0, refreshed.stderr
    assert "srv     just now, connected for this command" in refreshed.stdout
    assert 'gone    not listed: command not found: "no-such-mcp-command-xyz"' in refreshed.stdout
    listed = diana_here(config_dir, data_dir, "tools", "--json")
    tools = {t["name"]: t for t in json.loads(listed.stdout)}
    assert "srv_echo" in tools and tools["srv_echo"]["listed_at"]
    assert starts_of(starts) == 1  # the second listing came from the cache
    table = diana_here(config_dir, data_dir, "tools").stdout
    assert "srv     just now, from the tool cache" in table
    assert diana_here(config_dir, data_dir, "tools", "--refresh").returncode == 0
    assert starts_of(starts) == 2


def test_commands_that_use_no_server_charge_none(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    cached_server(tmp_path, config_dir, data_dir)

    def server_units() -> float:
        cost = json.loads(diana_here(config_dir, data_dir, "cost", "--json").stdout)
        units: float = cost["servers"]["srv"]
        return units

    charged = server_units()
    assert charged > 0  # connecting is the server's work
    for args in (
        ("call", "get_current_time"),
        ("call", "srv_echo", "--args", "{}"),
        ("proposals",),
        ("tools",),
    ):
        assert diana_here(config_dir, data_dir, *args).returncode in (0, 2)
    assert server_units() == charged


def test_version(config_dir: Path, data_dir: Path) -> None:
    from importlib.metadata import version

    done = diana_here(config_dir, data_dir, "--version")
    assert (done.returncode, done.stdout) == (0, f"diana {version('diana-tui')}\n")


@pytest.mark.parametrize("command", ["servers", "reconnect"])
def test_with_no_app_running_the_command_says_it_started_the_servers(
    tmp_path: Path, config_dir: Path, data_dir: Path, command: str
) -> None:
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    done = diana_here(config_dir, data_dir, command, *(["srv"] if command == "reconnect" else []))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No diana-tui runs on this data dir")
    assert starts_of(starts) == (1 if command == "servers" else 2)


def test_processes_writing_the_cache_together_leave_one_whole_entry(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Four commands with no cache entry, each connecting and writing it at once, then four
    answered from it: every call right, one entry, read back whole."""
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    for round_ in range(2):
        calls = [
            start_diana(config_dir, data_dir, "call", "srv_echo", "--args", f'{{"text": "{n}"}}')
            for n in range(4)
        ]
        for n, process in enumerate(calls):
            out, err = process.communicate(timeout=120)
            assert (process.returncode, out.strip()) == (0, str(n)), err
        assert starts_of(starts) == 4 * (round_ + 1)  # each call ran: each started it
        listed = diana_here(config_dir, data_dir, "tools", "--json")
        assert "srv_echo" in {t["name"] for t in json.loads(listed.stdout)}, round_
    with sqlite3.connect(data_dir / "diana.db") as db:
        rows = db.execute("SELECT server, tools FROM tool_cache").fetchall()
    assert [server for server, _tools in rows] == ["srv"]
    assert len(json.loads(rows[0][1])) == 10  # every tool the fixture lists
    assert starts_of(starts) == 8  # `diana tools` listed from the cache
