"""`diana` as a person runs it: one command after another over the same data dir; Ctrl-C
while a process starts."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .commands import diana_here, start_diana
from .processes import read_all


def test_tools_json_lists_the_builtin_tools_with_schemas(config_dir: Path, data_dir: Path) -> None:
    done = diana_here(config_dir, data_dir, "tools", "--json")
    assert done.returncode == 0, done.stderr
    tools = {t["name"]: t for t in json.loads(done.stdout)}
    assert set(tools) >= {"save_fact", "search_memory", "obsidian_log", "get_current_time"}
    for tool in tools.values():
        assert {"name", "agent", "description", "parameters", "risk"} <= set(tool)
        assert tool["parameters"]["type"] == "object"
    assert tools["save_fact"]["parameters"]["required"] == ["content"]
    assert tools["get_current_time"]["agent"] == "clock"


def test_a_fact_saved_by_one_command_is_found_by_another_and_both_are_logged(
    config_dir: Path, data_dir: Path
) -> None:
    saved = diana_here(
        config_dir,
        data_dir,
        "call",
        "save_fact",
        "--args",
        '{"content": "Ada prefers tea to coffee", "tags": ["drinks"]}',
        "--json",
    )
    assert saved.returncode == 0, saved.stderr
    assert json.loads(saved.stdout)["success"] is True

    found = diana_here(
        config_dir, data_dir, "call", "search_memory", "--args", '{"query": "tea"}', "--json"
    )
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert set(result) == {"success", "data", "error", "error_code"}
    assert [r["content"] for r in result["data"]["results"]] == ["Ada prefers tea to coffee"]

    log = diana_here(config_dir, data_dir, "log", "--json")
    assert log.returncode == 0, log.stderr
    calls = json.loads(log.stdout)
    assert [c["tool"] for c in calls] == ["save_fact", "search_memory"]
    assert all(c["status"] == "succeeded" and c["origin"] == "cli" for c in calls)
    assert len({c["correlation_id"] for c in calls}) == 2


def test_unknown_tool_exits_2_with_the_closest_names(config_dir: Path, data_dir: Path) -> None:
    done = diana_here(config_dir, data_dir, "call", "save_facts", "--args", "{}")
    assert done.returncode == 2
    assert "unknown tool save_facts; did you mean save_fact" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ('{"content": 3}', "argument \"content\": 3 is not of type 'string'"),
        ("{}", 'missing required argument "content"'),
        ('{"content": "x", "tags": ["ok", 5]}', 'argument "tags[1]"'),
        ("{not json", "--args: not valid JSON"),
        ("[1, 2]", "--args: must be a JSON object"),
        ("[" + "1" * 5000 + "]", "--args: a number has more than 4,300 digits"),
    ],
)
def test_bad_arguments_exit_2_naming_the_field(
    config_dir: Path, data_dir: Path, args: str, message: str
) -> None:
    done = diana_here(config_dir, data_dir, "call", "save_fact", "--args", args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    search = diana_here(
        config_dir, data_dir, "call", "search_memory", "--args", '{"query": "x"}', "--json"
    )
    assert json.loads(search.stdout)["data"]["results"] == []  # nothing was saved


def test_a_tool_that_runs_and_fails_exits_1(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the vault should be")
    (config_dir / "settings.json").write_text(json.dumps({"obsidian": {"vault": str(blocker)}}))
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"obsidian_log": "allow"}}))
    done = diana_here(
        config_dir, data_dir, "call", "obsidian_log", "--args", '{"entry": "hi"}', "--json"
    )
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["error_code"] == "tool_execution_failed"
    assert str(blocker) in result["error"]


def test_a_bad_time_zone_is_bad_input(config_dir: Path, data_dir: Path) -> None:
    done = diana_here(
        config_dir, data_dir, "call", "get_current_time", "--args", '{"timezone": "Mars/Base"}'
    )
    assert done.returncode == 2
    assert 'argument "timezone": unknown time zone "Mars/Base"' in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"tools": {"default_timeout": "soon"}}', "tools.default_timeout"),
        ('{"obsidian": {"vault": "/x", "colour": 1}}', "obsidian.colour"),
        ('{"tools": ', "not valid JSON at line 1"),
    ],
)
def test_malformed_config_exits_2_naming_file_and_field_and_writes_nothing(
    config_dir: Path, data_dir: Path, content: str, message: str
) -> None:
    settings = config_dir / "settings.json"
    settings.write_text(content)
    done = diana_here(config_dir, data_dir, "tools")
    assert done.returncode == 2
    assert str(settings) in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr
    assert not data_dir.exists()


def test_health_lists_every_builtin_agent(config_dir: Path, data_dir: Path) -> None:
    done = diana_here(config_dir, data_dir, "health", "--json")
    assert done.returncode == 0, done.stderr
    reports = {r["agent_id"]: r for r in json.loads(done.stdout)}
    assert set(reports) == {
        "memory",
        "obsidian",
        "clock",
        "web",
        "human",
        "code",
        "local-tools",
        "mcp-admin",
        "sampling",
    }
    assert all(r["status"] == "healthy" for r in reports.values())


def test_environment_variables_choose_the_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from diana.tui.cli import main

    monkeypatch.setenv("DIANA_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("DIANA_DATA_DIR", str(tmp_path / "d"))
    code = main(["call", "save_fact", "--args", '{"content": "env dirs work"}'])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "d" / "diana.db").exists()


def test_an_unusable_data_dir_is_named_without_a_traceback(
    config_dir: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    done = diana_here(config_dir, blocker / "data", "tools")
    assert done.returncode == 2
    assert f"cannot open the database {blocker / 'data' / 'diana.db'}" in done.stderr
    assert "Traceback" not in done.stderr


FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


@pytest.mark.processes  # the MCP servers diana starts
def test_mcp_tools_are_listed_and_called_and_a_broken_server_is_explained(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            [
                {"name": "time", "command": "mcp-server-time", "args": []},
                {"name": "broken", "command": "no-such-mcp-command-xyz", "args": []},
            ]
        )
    )
    listed = diana_here(config_dir, data_dir, "tools", "--json")
    assert listed.returncode == 0, listed.stderr
    names = {t["name"] for t in json.loads(listed.stdout)}
    assert {"time_get_current_time", "time_convert_time"} <= names

    called = diana_here(
        config_dir,
        data_dir,
        "call",
        "time_get_current_time",
        "--args",
        '{"timezone": "UTC"}',
        "--json",
    )
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["data"]["timezone"] == "UTC"

    servers = diana_here(config_dir, data_dir, "servers", "--json")
    assert servers.returncode == 1  # one server is not ready
    by_name = {s["name"]: s for s in json.loads(servers.stdout)}
    for field in (
        "name",
        "status",
        "transport",
        "tool_count",
        "last_error",
        "exit_code",
        "stderr_tail",
    ):
        assert field in by_name["time"]
    assert by_name["time"]["status"] == "ready" and by_name["time"]["tool_count"] == 2
    assert by_name["broken"]["status"] == "error"
    assert 'command not found: "no-such-mcp-command-xyz"' in by_name["broken"]["last_error"]


@pytest.mark.processes  # the MCP servers diana starts
def test_list_available_tools_starts_servers_it_never_listed_in_a_command(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            [
                {"name": "time", "command": "mcp-server-time", "args": []},
                {"name": "broken", "command": "no-such-mcp-command-xyz", "args": []},
            ]
        )
    )
    # No app, no `diana tools` before: nothing in the tool cache.
    listed = diana_here(config_dir, data_dir, "call", "mcp_list_available_tools", "--json")
    assert listed.returncode == 0, listed.stderr
    time_server, broken = json.loads(listed.stdout)["data"]["servers"]
    assert time_server["status"] == "ready"
    assert [t["name"] for t in time_server["tools"]] == [
        "time_get_current_time",
        "time_convert_time",
    ]
    assert broken["status"] == "error" and broken["tools"] == []
    assert 'command not found: "no-such-mcp-command-xyz"' in broken["error"]


@pytest.mark.processes  # the MCP servers diana starts
def test_a_claude_desktop_style_file_works_unchanged(config_dir: Path, data_dir: Path) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "fixture": {
                        "command": sys.executable,
                        "args": [FIXTURE],
                        "env": {"FIXTURE_TOKEN": "abc"},
                    },
                }
            }
        )
    )
    done = diana_here(
        config_dir, data_dir, "call", "fixture_echo", "--args", '{"text": "hi"}', "--json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data"] == "hi"
    servers = diana_here(config_dir, data_dir, "servers", "--json")
    assert "abc" not in servers.stdout  # env values are never shown


@pytest.mark.processes  # the MCP servers diana starts
def test_reconnect_reports_each_server(config_dir: Path, data_dir: Path) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            [
                {"name": "fixture", "command": sys.executable, "args": [FIXTURE]},
                {"name": "broken", "command": "no-such-mcp-command-xyz"},
            ]
        )
    )
    one = diana_here(config_dir, data_dir, "reconnect", "fixture")
    assert one.returncode == 0 and "fixture: ready, 10 tools" in one.stdout
    every = diana_here(config_dir, data_dir, "reconnect", "--all")
    assert every.returncode == 1
    assert "broken: failed: command not found" in every.stderr
    unknown = diana_here(config_dir, data_dir, "reconnect", "nope")
    assert unknown.returncode == 2 and "no MCP server named nope" in unknown.stderr


def test_malformed_mcp_config_exits_2_naming_server_and_field(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text('{"mcpServers": {"fs": {"command": 7}}}')
    done = diana_here(config_dir, data_dir, "tools")
    assert done.returncode == 2
    assert 'mcp-servers.json: server "fs": command' in done.stderr
    assert not data_dir.exists()


# -- Ctrl-C ----------------------------------------------------------------------------------


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (a zombie's is empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


def mute_server(config_dir: Path, marker: str) -> None:
    """A server that never answers: start-up waits for it (at most 10 s)."""
    server = {"command": sys.executable, "args": [FIXTURE, "--never-answer", "--stderr", marker]}
    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"mute": {**server, "timeout": 10}}})
    )


def wait_for(condition: Callable[[], object], limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


@pytest.mark.processes  # the process's own start and SIGINT
@pytest.mark.parametrize("moment", ["0", "0.2", "0.9", "server started"])
def test_ctrl_c_at_any_moment_of_start_up_exits_130_in_one_line(
    config_dir: Path, data_dir: Path, tmp_path: Path, moment: str
) -> None:
    """While Python imports, while the runtime opens, while a server is being connected:
    one line, exit 130, and no server left running. A moment counts from when diana's own
    imports began (before that, Python itself is still starting: a loaded machine can take
    longer than any fixed moment)."""
    marker = f"mute-server-{tmp_path.name}"
    mute_server(config_dir, marker)
    process = start_diana(config_dir, data_dir, "tools", forked=False)
    try:
        if moment == "server started":
            wait_for(lambda: processes_with(marker))
        else:
            wait_for(lambda pid=process.pid: importing_compiled_modules(pid))
            time.sleep(float(moment))  # fixed wait: the moment of start-up is the subject
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, err, out) == (130, "diana: interrupted\n", "")
    assert processes_with(marker) == []


@pytest.mark.processes  # the process's own start and SIGINT
def test_ctrl_c_while_the_app_starts_exits_130_in_one_line(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    """diana-tui on a terminal: SIGINT while it imports, and once it runs and is connecting a
    server (Ctrl-C from the keyboard is a key then; SIGINT comes from kill -INT)."""
    marker = f"mute-server-{tmp_path.name}"
    mute_server(config_dir, marker)
    for started in (False, True):
        terminal, app_side = pty.openpty()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "diana.tui.app",
                "--config-dir",
                str(config_dir),
                "--data-dir",
                str(data_dir),
            ],
            stdin=app_side,
            stdout=app_side,
            stderr=subprocess.PIPE,  # where Textual draws, then our last line
            env=dict(os.environ, TERM="xterm-256color"),
        )
        os.close(app_side)
        drawn: list[bytes] = []
        threads = [
            threading.Thread(target=read_all, args=(terminal, []), daemon=True),
            threading.Thread(target=read_all, args=(process.stderr.fileno(), drawn), daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            if started:
                wait_for(lambda: processes_with(marker))
            else:  # importing: past our handler, into the rest (its first compiled module)
                wait_for(lambda pid=process.pid: importing_compiled_modules(pid))
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 130
        finally:
            process.kill()
            process.wait()
            threads[1].join(timeout=10)
            os.close(terminal)
        err = b"".join(drawn).decode(errors="replace")
        assert "Traceback" not in err
        assert err.endswith("diana-tui: interrupted\n") and err.count("interrupted") == 1
        if not started:
            assert err == "diana-tui: interrupted\n"  # nothing was drawn yet
        assert processes_with(marker) == []


def importing_compiled_modules(pid: int) -> bool:
    """Whether the process has loaded a compiled module from site-packages: `diana.tui` is
    imported first and installs the Ctrl-C handler, before anything of the kind loads (a
    fixed wait instead raced the interpreter's own start on a busy machine)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return any("site-packages" in line and ".so" in line for line in maps.splitlines())


@pytest.mark.parametrize(
    "command",
    [("show",), ("approve",), ("reject",), ("log", "--tool")],
)
def test_an_id_or_name_that_is_not_utf8_is_not_found_rather_than_a_failure(
    config_dir: Path, data_dir: Path, command: tuple[str, ...]
) -> None:
    not_utf8 = os.fsdecode(b"\xff\xfe")  # as Python receives such bytes in argv
    done = diana_here(config_dir, data_dir, *command, not_utf8)
    assert "unexpected error" not in done.stderr and "Traceback" not in done.stderr
    if command[0] == "log":
        assert done.returncode == 0 and done.stderr == ""
    else:
        assert done.returncode == 2
        assert done.stderr.startswith("diana: no proposal \ufffd\ufffd")


@pytest.mark.parametrize("since", ["9999-12-31T23:59-11:00", "9999-12-31T23:59:59.999999-00:01"])
def test_a_since_past_the_last_date_is_bad_input(
    config_dir: Path, data_dir: Path, since: str
) -> None:
    done = diana_here(config_dir, data_dir, "log", "--since", since)
    assert done.returncode == 2
    assert done.stderr == f"diana: --since: {since!r} is past the last date a time can have\n"
