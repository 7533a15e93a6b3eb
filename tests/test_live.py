"""A running diana-tui and `diana` beside it on one data dir: `diana servers` shows the app's
servers as the app sees them, and `diana reconnect` has the app reconnect its own."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path

import pytest
from diana.core.runtime import Profile, Runtime
from diana.core.shared.live import LOCKS_DIR
from diana.tui.app import make_app

from .commands import diana_here, diana_here_async, run_diana, start_diana
from .configs import counted_server, starts_of
from .conftest import stepping_clock
from .live_apps import read_log
from .scenarios import build_app, fixture_server, prepare_dirs, settle, until
from .screen import record_notifications
from .waits import settled

pytestmark = pytest.mark.processes  # every test here starts a process

ME = f"diana-tui (pid {os.getpid()})"


async def test_reconnect_has_the_running_app_reconnect_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, starts = counted_server(tmp_path / "srv")
    app = build_app(tmp_path, servers={"srv": server, "other": fixture_server()})
    config_dir, data_dir = app.paths.config_dir, app.paths.data_dir
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        connection = app.core._runtime.mcp.connections["srv"]
        before = connection.state.pid
        assert before is not None and starts_of(starts) == 1
        told = record_notifications(app, monkeypatch)

        done = await run_diana(config_dir, data_dir, "reconnect", "srv")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"{ME} runs on this data dir: it reconnected its servers.",
            f"srv: ready, {len(connection.state.tools)} tools",
        ]
        assert connection.state.pid not in (None, before)  # the app's own server, anew
        await settled(app)  # and the app says why it reconnected
        assert ("information", "`diana reconnect`: reconnecting MCP server srv") in told
        assert starts_of(starts) == 2  # and the command started none of its own

        await until(lambda: published_pid(data_dir, "srv") == connection.state.pid)
        shown = await run_diana(config_dir, data_dir, "servers", "--json")
        servers = {s["name"]: s for s in json.loads(shown.stdout)}
        assert list(servers) == ["srv", "other"]  # the app's order
        assert servers["srv"]["pid"] == connection.state.pid
        assert {s["seen_by"] for s in servers.values()} == {ME}
        table = await run_diana(config_dir, data_dir, "servers")
        assert table.stdout.startswith(f"{ME} runs on this data dir: its servers, as it saw")
        assert starts_of(starts) == 2

        unknown = await run_diana(config_dir, data_dir, "reconnect", "nosuch")
        assert unknown.returncode == 2
        assert "no MCP server named nosuch (configured: srv, other)" in unknown.stderr
    # The app has stopped: the commands start their own servers again, and say so.
    after = await diana_here_async(config_dir, data_dir, "servers")
    assert after.stdout.startswith("No diana-tui runs on this data dir")
    with sqlite3.connect(data_dir / "diana.db") as db:
        assert db.execute("SELECT count(*) FROM live_apps").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM live_servers").fetchone() == (0,)


async def test_many_commands_at_once_each_get_one_answer_and_each_request_is_done_once(
    tmp_path: Path,
) -> None:
    servers = {"a": fixture_server(), "b": fixture_server()}
    config_dir, data_dir = prepare_dirs(tmp_path, servers)
    app = make_app(config_dir, data_dir)  # the system clock: its log is today's, as the CLI's
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        attempts = {n: c.state.attempts for n, c in app.core._runtime.mcp.connections.items()}
        commands = [start_diana(config_dir, data_dir, "reconnect", "--all") for _ in range(4)]
        readers = [start_diana(config_dir, data_dir, "servers", "--json") for _ in range(4)]
        outputs = await asyncio.to_thread(lambda: [p.communicate(timeout=120) for p in commands])
        shown = await asyncio.to_thread(lambda: [p.communicate(timeout=120) for p in readers])
        for process, (out, err) in zip(commands, outputs, strict=True):
            assert process.returncode == 0, err
            lines = out.splitlines()
            assert lines[0] == f"{ME} runs on this data dir: it reconnected its servers."
            assert sorted(line.split(":")[0] for line in lines[1:]) == ["a", "b"]
        for out, _err in shown:  # the servers are written whole, never half
            assert [s["name"] for s in json.loads(out)] == ["a", "b"]
        # Each request was answered once. Identical requests are answered by one action,
        # and those asked for while one is under way by the one that follows them all.
        for name, connection in app.core._runtime.mcp.connections.items():
            assert 1 <= connection.state.attempts - attempts[name] <= 4
        done = [e for e in read_log(data_dir) if e.get("event") == "live.request_done"]
        assert 1 <= len(done) <= 4
        assert sum(int(e["requests"]) for e in done) == 4  # type: ignore[call-overload]
    with sqlite3.connect(data_dir / "diana.db") as db:
        assert db.execute("SELECT count(*) FROM live_requests").fetchone() == (0,)


def published_pid(data_dir: Path, name: str) -> object:
    """The pid of a server as the app last wrote it (the app writes shortly after a change)."""
    with sqlite3.connect(data_dir / "diana.db") as db:
        for (text,) in db.execute("SELECT diagnostics FROM live_servers"):
            server = json.loads(text)
            if server["name"] == name:
                return server["pid"]
    return None


async def test_an_app_that_stops_while_reconnecting_is_reported(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"mute": fixture_server("--never-answer", timeout=5)}})
    )
    runtime = await Runtime.open(
        Profile.APP.but(watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    closed = False
    try:
        await runtime.mcp.wait_ready()
        command = start_diana(config_dir, data_dir, "reconnect", "mute")
        db = sqlite3.connect(data_dir / "diana.db")
        picked = "SELECT count(*) FROM live_requests WHERE picked_at IS NOT NULL"
        await until(lambda: db.execute(picked).fetchone() == (1,), within=30)
        db.close()
        await runtime.close()
        closed = True
        _out, err = await asyncio.to_thread(command.communicate, timeout=60)
        assert command.returncode == 1
        assert err == f"diana: {ME}: it stopped before carrying this out\n"
    finally:
        if not closed:
            await runtime.close()


def test_an_app_that_was_killed_is_not_taken_for_a_running_one(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    assert diana_here(config_dir, data_dir, "proposals").returncode == 0  # makes the database
    (data_dir / LOCKS_DIR).mkdir()
    (data_dir / LOCKS_DIR / "1-00dead00.lock").write_text("")  # nobody holds it
    with sqlite3.connect(data_dir / "diana.db") as db:
        db.execute(
            "INSERT INTO live_apps (app_id, pid, config_dir, started_at) VALUES (?, ?, ?, ?)",
            ("1-00dead00", 1, str(config_dir.resolve()), "2026-01-01T00:00:00+00:00"),
        )
    done = diana_here(config_dir, data_dir, "servers")
    assert done.stdout.startswith("No diana-tui runs on this data dir")
    with sqlite3.connect(data_dir / "diana.db") as db:
        assert db.execute("SELECT count(*) FROM live_apps").fetchone() == (0,)
    assert not (data_dir / LOCKS_DIR / "1-00dead00.lock").exists()


async def test_the_app_runs_when_it_cannot_share(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Sharing is an aid to `diana`: a data dir where the lock cannot be made (here a file
    is where its folder would be) leaves the app running, and `diana` on its own."""
    data_dir.mkdir(parents=True)
    (data_dir / LOCKS_DIR).write_text("not a folder")
    async with await Runtime.open(
        Profile.APP.but(watch=False), config_dir, data_dir
    ):  # the log is today's
        done = await run_diana(config_dir, data_dir, "servers")
        assert done.stdout.startswith("No diana-tui runs on this data dir")
    logged = [e for e in read_log(data_dir) if e.get("event") == "live.share_failed"]
    assert len(logged) == 1
