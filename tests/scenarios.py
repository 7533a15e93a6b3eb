"""Scenarios shared by the snapshot tests and screenshots/generate.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from tui.app import DianaApp, make_app
from tui.panes import ChatPane

from .conftest import counting_ids, stepping_clock

TERMINAL_SIZE = (160, 48)
FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
# Long enough that a failed server keeps its state while a snapshot is taken.
SNAPSHOT_BACKOFF = 600.0


def fixture_server(*extra: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FIXTURE, *extra], **fields}


TIME_AND_BROKEN = {
    "time": {"command": "mcp-server-time"},
    "github": {"command": "github-mcp-server", "args": ["stdio"]},
}
MIXED_STATES = {
    "files": fixture_server(),
    "notes": fixture_server("--exit-at-start", "1"),
    "github": {"command": "github-mcp-server", "args": ["stdio"]},
}
SLOW_TO_ANSWER = {"files": fixture_server(), "mute": fixture_server("--never-answer", timeout=2)}


def prepare_dirs(root: Path, servers: dict[str, Any] | None = None) -> tuple[Path, Path]:
    config_dir, data_dir = root / "config", root / "data"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "settings.json").write_text(
        json.dumps({"obsidian": {"vault": str(root / "vault"), "daily_folder": "Daily"}})
    )
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers or {}}))
    return config_dir, data_dir


def build_app(root: Path, servers: dict[str, Any] | None = None) -> DianaApp:
    config_dir, data_dir = prepare_dirs(root, servers)
    return make_app(
        config_dir,
        data_dir,
        clock=stepping_clock(),
        new_id=counting_ids(),
        mcp_backoff_start=SNAPSHOT_BACKOFF,
        proposal_ids=counting_ids("p"),
    )


def app_of(pilot: Pilot[int]) -> DianaApp:
    assert isinstance(pilot.app, DianaApp)
    return pilot.app


async def settle(pilot: Pilot[int]) -> None:
    """Wait until every MCP server made its first attempt and the panes show it all."""
    app = app_of(pilot)
    await app.ready.wait()
    assert app.runtime is not None
    await app.runtime.mcp.wait_ready()
    await app.events_settled()
    await pilot.pause()


async def type_command(pilot: Pilot[int], text: str) -> None:
    """Type a line into the chat input, submit it and wait until its result is on screen."""
    app = app_of(pilot)
    await app.ready.wait()
    chat_input = app.query_one("#chat-input", Input)
    chat_input.focus()
    chat_input.value = text
    await pilot.press("enter")
    command = app.query_one(ChatPane).last_command
    assert command is not None
    await command.wait()
    await app.events_settled()
    await pilot.pause()


async def main_screen(pilot: Pilot[int]) -> None:
    """The workbench with two MCP servers, after a fact is saved and the time asked for."""
    await settle(pilot)
    await type_command(pilot, '/call save_fact {"content": "Ada prefers tea", "tags": ["drinks"]}')
    await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
    await type_command(pilot, '/call get_current_time {"timezone": 5}')
    await settle(pilot)


async def servers_pane(pilot: Pilot[int]) -> None:
    """F4: one server ready, one that exits at start, one whose command is missing."""
    await settle(pilot)
    await pilot.press("f4")
    await pilot.pause()


async def server_detail(pilot: Pilot[int]) -> None:
    """Enter on a failed server opens its detail view."""
    await servers_pane(pilot)
    await pilot.press("down", "down", "enter")
    await pilot.pause()


async def server_reconnecting(pilot: Pilot[int]) -> None:
    """r on a server that failed: connecting again, the last error still in view."""
    await settle(pilot)
    await pilot.press("f4", "down")
    app = app_of(pilot)
    assert app.runtime is not None
    await pilot.press("r")
    await app.events_settled()
    await pilot.pause()


FILES = {"files": fixture_server()}


async def make_proposals(pilot: Pilot[int]) -> None:
    """Three calls that wait for a person: two irreversible, one reversible with delay."""
    await settle(pilot)
    await type_command(pilot, '/call files_delete_file {"path": "/srv/reports/2025.pdf"}')
    await type_command(pilot, '/call obsidian_log {"entry": "Shipped the release"}')
    await type_command(pilot, '/call files_echo {"text": "~/.ssh/id_ed25519"}')


async def approvals_pane(pilot: Pilot[int]) -> None:
    """F3 with pending proposals of mixed risk: the newest is selected."""
    await make_proposals(pilot)
    await pilot.press("f3")
    await pilot.pause()


async def proposal_detail(pilot: Pilot[int]) -> None:
    """Enter on the newest proposal: its arguments, risk reason, origin, correlation id."""
    await approvals_pane(pilot)
    await pilot.press("enter")
    await pilot.pause()


SCENARIOS = {
    "main": (TIME_AND_BROKEN, main_screen),
    "servers": (MIXED_STATES, servers_pane),
    "server_detail": (MIXED_STATES, server_detail),
    "server_reconnecting": (SLOW_TO_ANSWER, server_reconnecting),
    "approvals": (FILES, approvals_pane),
    "proposal_detail": (FILES, proposal_detail),
}
