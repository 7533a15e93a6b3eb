"""How the app carries the core's news to the screen: it starts the core after the first
paint (keys work meanwhile), hands each core event to the pane that shows that data (slow
work in that pane's own workers, bursts read once), and keeps a config file that could not
be applied in sight until it is fixed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from diana.core.config.mcp_servers import MCP_SERVERS_FILE
from diana.core.events import ToolsChanged
from diana.tui.main_screen import ConfigAlert
from diana.tui.panes import ChatPane, ExecutionLogPane

from .scenarios import build_app, fixture_server, settle, type_command, until
from .screen import on_screen
from .waits import settled

TERMINAL_SIZE = (160, 48)


async def test_ctrl_q_quits_while_the_core_is_still_starting(tmp_path: Path) -> None:
    """Another process holds the database's write lock, so the core waits to open it: the
    screen is drawn at once, says it is starting, and Ctrl+Q quits without waiting."""
    app = build_app(tmp_path)
    database = app.paths.data_dir / "diana.db"
    database.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as holder:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("BEGIN EXCLUSIVE")
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await pilot.pause()
            assert app.phase == "starting"
            assert app.query_one(ChatPane).border_title == "Chat — starting…"
            assert on_screen(app, "starting…")
            await pilot.press("ctrl+q")
            async with asyncio.timeout(5):  # well before the lock is let go
                while app.is_running:  # noqa: ASYNC110 - the app's own state
                    await asyncio.sleep(0.02)
        assert app.core is None
        holder.execute("ROLLBACK")


async def test_a_slow_health_check_does_not_hold_up_the_log_and_a_burst_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        runtime = app.core._runtime
        assert runtime is not None
        orchestrator = runtime.orchestrator
        health = orchestrator.health
        checks = {"started": 0, "running": 0}
        release = asyncio.Event()

        async def slow_health() -> Any:
            checks["started"] += 1
            checks["running"] += 1
            try:
                await release.wait()
                return await health()
            finally:
                checks["running"] -= 1

        monkeypatch.setattr(orchestrator, "health", slow_health)
        for n in range(50):
            runtime.bus.publish(ToolsChanged("memory", [f"tool_{n}"]))
        await until(lambda: checks["running"] == 1)
        # A call made while a health check waits reaches the log at once.
        await type_command_without_settling(pilot, '/call get_current_time {"timezone": "UTC"}')
        log = app.query_one(ExecutionLogPane)
        await until(lambda: any(c.tool == "get_current_time" for c in log.calls.values()))
        assert checks["running"] == 1, "the log waited for the health check"
        release.set()
        await settled(app)
        # Fifty changes, but the checks that were cut short by a newer one never finish:
        # at most the first (cancelled) and the last ran.
        assert checks["running"] == 0
        assert checks["started"] <= 3, checks


async def type_command_without_settling(pilot: Any, text: str) -> None:
    chat_input = pilot.app.query_one("#chat-input")
    chat_input.focus()
    chat_input.value = text
    await pilot.press("enter")


@pytest.mark.processes
async def test_a_config_file_that_cannot_be_applied_stays_shown_until_fixed(
    tmp_path: Path,
) -> None:
    servers = {"files": fixture_server()}
    app = build_app(tmp_path, servers)
    config_file = app.paths.config_dir / MCP_SERVERS_FILE
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        alert = app.query_one(ConfigAlert)
        assert not alert.display

        good = config_file.read_text()
        config_file.write_text(good.replace('"command"', '"comand"', 1))
        await until(lambda: bool(alert.display), 15)
        await pilot.pause(0.2)  # longer than nothing, shorter than any toast
        assert on_screen(app, "⚠ mcp-servers.json not applied")
        # What is wrong, naming the server and the field.
        assert alert.problems == {
            MCP_SERVERS_FILE: 'server "files": a stdio server needs "command" '
            '(or give "url" for a remote one)'
        }
        assert any("mcp-servers.json not applied" in n.message for n in app._notifications)
        # Still broken long after the toast has faded: still shown.
        app.clear_notifications()
        await pilot.pause()
        assert on_screen(app, "⚠ mcp-servers.json not applied")

        config_file.write_text(json.dumps(json.loads(good)))
        await until(lambda: not alert.display, 15)
        assert not on_screen(app, "not applied")


@pytest.mark.processes
async def test_a_new_proposal_reaches_the_header_whichever_pane_is_shown(tmp_path: Path) -> None:
    app = build_app(tmp_path, {"files": fixture_server()})
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f6")  # the log fills the screen
        await type_command(pilot, '/call files_delete_file {"path": "/tmp/x"}')
        await settled(app)
        assert app.main.sub_title == "1 pending approval"
        assert on_screen(app, "1 pending approval")
