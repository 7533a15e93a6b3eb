"""`diana tools`, `health`, `resources`, `prompts`, `read` and `prompt` beside a running
diana-tui on the same dirs: the app answers them on its live connections (the first line
says so) with what the command answers on its own servers; a command finding no app, or an
app that does not answer, connects itself. Only questions that change nothing are answered.

Beside an app on the test's loop the commands are processes of their own; beside an app in a
process of its own (tests/fixtures/live_app.py) they run in the test's process."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.tui.app import DianaApp, make_app

from .commands import diana, diana_here, diana_here_async, start_diana
from .configs import LARGE_SERVER, counted_server, starts_of
from .database import query
from .live_apps import NOW, app_running
from .scenarios import fixture_server, prepare_dirs, settle, until
from .waits import until as until_true

pytestmark = pytest.mark.processes  # every test here starts a process

ME = f"diana-tui (pid {os.getpid()})"
SAID = f"{ME} runs on this data dir: "

# Each question, as JSON and as a person reads it; beside it, the command whose answer
# without the app it must equal (None: the first line is checked, the rest is printed alike).
AS_JSON = [
    (("tools", "--json"), ("tools", "--json")),
    (("tools", "--refresh", "--json"), ("tools", "--json")),
    (("health", "--json"), ("health", "--json")),
    (("resources", "--json"), ("resources", "--json")),
    (("prompts", "fx", "--json"), ("prompts", "fx", "--json")),
    (("read", "fx", "fixture://settings.json", "--json"),) * 2,
    (("read", "fx", "fixture://pixel.png", "--json"), None),
    (("prompt", "fx", "review", "--arg", "code=x = 1", "--arg", "focus=names", "--json"),) * 2,
]
AS_TEXT = [
    (("tools",), None),
    (("health",), None),
    (("resources", "fx"), None),
    (("prompts",), None),
    (("read", "fx", "fixture://greeting"), None),
    (("read", "fx", "fixture://pixel.png"), None),
    (("prompt", "fx", "hello"), None),
]
# What differs by when it was asked: when a check ran, when a list was listed.
WHEN = ("last_checked", "listed_at")


def run_all(config_dir: Path, data_dir: Path, commands: list[tuple[str, ...]]) -> list[Any]:
    """Each command's (exit code, stdout, stderr), the commands run side by side."""
    started = [start_diana(config_dir, data_dir, *command) for command in commands]
    said = [process.communicate(timeout=120) for process in started]
    return [(p.returncode, out, err) for p, (out, err) in zip(started, said, strict=True)]


def without_when(value: Any) -> Any:
    if isinstance(value, list):
        return [without_when(item) for item in value]
    if isinstance(value, dict):
        return {k: without_when(v) for k, v in value.items() if k not in WHEN}
    return value


async def running(app: DianaApp, servers: list[str] | None = None) -> None:
    """Until the app runs, its servers (or these) have made their first attempt, and `diana`
    sees it."""
    assert app.core is not None
    await app.core._runtime.mcp.wait_ready(servers)
    db = sqlite3.connect(app.paths.data_dir / "diana.db")
    try:
        shared = "SELECT count(*) FROM live_apps WHERE servers_at IS NOT NULL"
        await until(lambda: db.execute(shared).fetchone() == (1,), within=30)
    finally:
        db.close()


async def test_each_question_is_answered_by_the_app_as_the_command_answers_it(
    tmp_path: Path,
) -> None:
    server, starts = counted_server(tmp_path / "srv")
    config_dir, data_dir = prepare_dirs(tmp_path, {"fx": server})
    cases = AS_JSON + AS_TEXT
    without_app = sorted({alone for _command, alone in cases if alone is not None})
    # No app yet: each command answers with its own servers, run in the test's process.
    answers = [await diana_here_async(config_dir, data_dir, *c) for c in without_app]
    alone = dict(
        zip(without_app, [(a.returncode, a.stdout, a.stderr) for a in answers], strict=True)
    )
    for command, (code, _out, err) in alone.items():
        assert code == 0, (command, err)
        assert SAID not in err
    app = make_app(config_dir, data_dir)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await running(app)
        assert app.core is not None
        connection = app.core._runtime.mcp.connections["fx"]
        before, calls = starts_of(starts), connection.state.calls

        asked = await asyncio.to_thread(run_all, config_dir, data_dir, [c for c, _ in cases])

        for (command, without), (code, out, err) in zip(cases, asked, strict=True):
            assert code == 0, (command, err)
            if "--json" in command or command[0] in ("read", "prompt"):
                # What is printed is the JSON, or what was read, as it is: said on stderr.
                assert err.startswith(f"diana: {SAID}"), (command, err)
                shown = out
            else:
                said, _, shown = out.partition("\n")
                assert said.startswith(SAID), (command, out)
            assert shown, command
            if command == ("tools",):
                assert f"fx      just now, by {ME}" in shown
            if without is None:
                continue
            out_alone = alone[without][1]
            if "--json" in command:
                assert without_when(json.loads(shown)) == without_when(json.loads(out_alone))
            else:
                assert shown == out_alone, command
        pixel = tmp_path / "pixel.png"  # and saved as it was read
        saved = await asyncio.to_thread(
            diana, config_dir, data_dir, "read", "fx", "fixture://pixel.png", "--out", str(pixel)
        )
        assert saved.returncode == 0, saved.stderr
        assert saved.stderr.splitlines() == [
            f"diana: {SAID}read on its connection to fx.",
            f"fixture://pixel.png: image/png, 67 bytes written to {pixel}",
        ]
        by_app = dict(zip([command for command, _ in cases], asked, strict=True))
        (part,) = json.loads(by_app["read", "fx", "fixture://pixel.png", "--json"][1])
        assert pixel.read_bytes() == base64.b64decode(part["blob"])
        # Answered on the app's own connection: no server started, no tool called.
        assert starts_of(starts) == before
        assert connection.state.calls == calls
    with sqlite3.connect(data_dir / "diana.db") as db:
        assert db.execute("SELECT count(*) FROM live_requests").fetchone() == (0,)


async def test_tools_refresh_has_the_app_list_its_servers_tools_again(tmp_path: Path) -> None:
    server, starts = counted_server(tmp_path / "srv")
    config_dir, data_dir = prepare_dirs(tmp_path, {"fx": server, "other": fixture_server()})
    app = make_app(config_dir, data_dir)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await running(app)
        assert app.core is not None
        connections = app.core._runtime.mcp.connections
        listed = {name: c.state.tools_listed_at for name, c in connections.items()}
        pids = {name: c.state.pid for name, c in connections.items()}

        done = await asyncio.to_thread(diana, config_dir, data_dir, "tools", "--refresh")

        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{SAID}the tools it offers, its servers' lists listed")
        for name, connection in connections.items():
            at, was = connection.state.tools_listed_at, listed[name]
            assert at is not None and was is not None and at > was  # listed again
            assert connection.state.pid == pids[name]  # on the same connection
        assert starts_of(starts) == 1  # the app's own start


async def test_a_server_not_ready_in_the_app_is_said_to_be_so_at_once(tmp_path: Path) -> None:
    """The server never finishes its handshake: a command of its own would wait its 30 s
    for it, then say it did not finish; the app says at once where it is."""
    servers = {"fx": fixture_server(), "mute": fixture_server("--never-answer", timeout=30)}
    config_dir, data_dir = prepare_dirs(tmp_path, servers)
    app = make_app(config_dir, data_dir)
    async with app.run_test(size=(120, 35)) as pilot:
        await until(lambda: app.core is not None, 30)
        await running(app, ["fx"])
        assert app.core is not None
        mute = app.core._runtime.mcp.connections["mute"]
        assert mute.state.status.value == "connecting"
        not_ready = "MCP server mute is not connected: server mute is connecting"

        read, prompt, resources, tools, health = await asyncio.to_thread(
            run_all,
            config_dir,
            data_dir,
            [
                ("read", "mute", "fixture://greeting"),
                ("prompt", "mute", "hello"),
                ("resources",),
                ("tools",),
                ("health", "--json"),
            ],
        )

        assert read[0] == 1 and read[2].splitlines()[1:] == [f"diana: {not_ready}"], read
        assert prompt[0] == 1 and prompt[2].splitlines()[1:] == [f"diana: {not_ready}"], prompt
        code, out, err = resources
        assert code == 1 and err.splitlines() == [f"diana: {not_ready}"], resources
        assert "fx      fixture://greeting" in out  # the ready server's, all the same
        code, out, err = tools
        assert code == 0, err
        assert "mute    not listed: server mute is connecting" in out
        code, out, err = health
        assert err.startswith(f"diana: {SAID}"), err
        agents = {agent["agent_id"]: agent for agent in json.loads(out)}
        assert code == 1  # an agent is unhealthy
        assert agents["mcp-mute"]["status"] == "unhealthy"
        assert agents["mcp-mute"]["message"] == "server mute is connecting"
        assert agents["mcp-fx"]["status"] == "healthy"
        assert mute.state.status.value == "connecting"
        await pilot.pause()


def test_a_resource_too_large_to_pass_on_is_read_by_the_command_itself(tmp_path: Path) -> None:
    """The app passes on an answer of at most 8 MiB: past that, the command reads it on a
    connection of its own; past the 64 MiB one message may hold, the app's answer is that
    it is too large, as the command's own would be."""
    entry = {"command": sys.executable, "args": [LARGE_SERVER, "--megabytes", "9"]}
    config_dir, data_dir = prepare_dirs(tmp_path, {"large": entry})
    with app_running(config_dir, data_dir) as app:
        done = diana_here(config_dir, data_dir, "read", "large", "big://text")

        assert done.returncode == 0, done.stderr
        assert done.stdout == "a" * 9_000_000 + "\n"
        (warning,) = done.stderr.splitlines()
        assert warning.startswith(f"diana: warning: {app.describe()} did not answer: its answer")
        assert warning.endswith(
            "past the 8,388,608 it passes on; answering with this command's own servers"
        )
        assert query(data_dir, "SELECT count(*) FROM live_requests") == [(0,)]


def test_a_resource_past_the_message_limit_is_refused_by_the_app(tmp_path: Path) -> None:
    entry = {"command": sys.executable, "args": [LARGE_SERVER, "--megabytes", "70"]}
    config_dir, data_dir = prepare_dirs(tmp_path, {"large": entry})
    with app_running(config_dir, data_dir) as app:
        done = diana_here(config_dir, data_dir, "read", "large", "big://text")

        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        said, refused = done.stderr.splitlines()
        assert (
            said
            == f"diana: {app.describe()} runs on this data dir: read on its connection to large."
        )
        assert refused == (
            "diana: MCP server large: resource big://text is larger than the 64 MiB limit; it "
            "was not read, and the server is still connected"
        )


def test_an_app_that_does_not_take_the_question_up_leaves_the_command_to_answer(
    tmp_path: Path,
) -> None:
    server, starts = counted_server(tmp_path / "srv")
    config_dir, data_dir = prepare_dirs(tmp_path, {"fx": server})
    with app_running(config_dir, data_dir) as app:
        assert starts_of(starts) == 1
        app.pause(data_dir)
        try:
            done = diana_here(config_dir, data_dir, "prompts", "--json")
        finally:
            app.resume()

        assert done.returncode == 0, done.stderr
        assert done.stderr == (
            f"diana: warning: {app.describe()} did not take the request up within 5 s; "
            "answering with this command's own servers\n"
        )
        assert [p["name"] for p in json.loads(done.stdout)] == ["review", "hello"]
        assert starts_of(starts) == 2  # the command's own
        assert query(data_dir, "SELECT count(*) FROM live_requests") == [(0,)]


def test_only_questions_are_carried_out_and_what_cannot_be_read_is_refused(
    tmp_path: Path,
) -> None:
    """Requests written by hand: a call or an approval not as a command writes them,
    parameters a kind does not take, a question about a server it is not about. Each is
    answered that it cannot be carried out, and nothing is called."""
    config_dir, data_dir = prepare_dirs(tmp_path, {"fx": fixture_server()})
    hostile: list[tuple[Any, Any, Any]] = [
        ("call", "fx", json.dumps({"tool": "fx_delete_file", "arguments": {"path": "/x"}})),
        ("approve", None, None),
        ("tools", None, json.dumps({"refresh": True, "call": "fx_delete_file"})),
        ("tools", None, json.dumps({"refresh": "yes"})),
        ("health", "fx", None),
        ("read", None, json.dumps({"uri": "fixture://greeting"})),
        ("read", "fx", None),
        ("read", "fx", json.dumps({"uri": "x" * 10_000})),
        ("prompt", "fx", json.dumps({"name": "review", "arguments": {"code": 1}})),
        ("prompt", "fx", "[1, 2]"),
        ("prompt", "fx", "{" * 100_000),
        ("resources", "fx", "x" * 100_000),
        ("call", None, json.dumps({"tool": "fx_delete_file", "arguments": {}, "origin": "app"})),
        ("approve", None, json.dumps({"proposal": "abc123", "by": "diana"})),
    ]
    with app_running(config_dir, data_dir) as app:
        with sqlite3.connect(data_dir / "diana.db", timeout=30) as db:
            db.executemany(
                "INSERT INTO live_requests (app_id, kind, server, params, requested_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [(app.app_id, kind, server, params, NOW) for kind, server, params in hostile],
            )
        waiting = "SELECT count(*) FROM live_requests WHERE finished_at IS NULL"
        until_true(lambda: query(data_dir, waiting) == [(0,)])
        rows = query(data_dir, "SELECT kind, outcome FROM live_requests ORDER BY id")
        outcomes = [json.loads(outcome) for _kind, outcome in rows]
        assert len(outcomes) == len(hostile)
        for outcome in outcomes:
            assert set(outcome) == {"error"}, outcome
            assert outcome["error"].startswith("diana-tui cannot read this request: ")
            assert len(outcome["error"]) < 400
        errors = [outcome["error"] for outcome in outcomes]
        assert "a call request names no server" in errors[0]  # a call is of no one server
        assert "proposal: Field required" in errors[1]
        assert "call: Extra inputs are not permitted" in errors[2]
        assert "refresh: Input should be a valid boolean" in errors[3]
        assert "a health request names no server" in errors[4]
        assert "a read request names a server" in errors[5]
        assert "uri: Field required" in errors[6]
        assert "uri: String should have at most 8192 characters" in errors[7]
        assert "arguments.code: Input should be a valid string" in errors[8]
        assert "params is not a JSON object" in errors[9]
        assert "params: String should have at most 65536 characters" in errors[10]
        assert "params: String should have at most 65536 characters" in errors[11]
        assert "origin: is not `cli` or `host:NAME`" in errors[12]  # no call passes for the app
        assert "by: Input should be 'cli'" in errors[13]
        done = diana_here(config_dir, data_dir, "health", "--json")  # and it goes on answering
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith(f"diana: {app.describe()} runs on this data dir")
        fx = next(a for a in json.loads(done.stdout) if a["agent_id"] == "mcp-fx")
        assert fx["status"] == "healthy"
        calls = query(data_dir, "SELECT count(*) FROM execution_log")
        assert calls == [(0,)]  # nothing was called
