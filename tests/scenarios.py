"""Scenarios shared by the snapshot tests and screenshots/generate.py."""

from __future__ import annotations

import json
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input

from tui.app import DianaApp, make_app
from tui.panes import ChatPane

from .conftest import counting_ids, stepping_clock

TERMINAL_SIZE = (160, 48)


def prepare_dirs(root: Path) -> tuple[Path, Path]:
    config_dir, data_dir = root / "config", root / "data"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "settings.json").write_text(
        json.dumps({"obsidian": {"vault": str(root / "vault"), "daily_folder": "Daily"}})
    )
    (config_dir / "mcp-servers.json").write_text("[]")
    return config_dir, data_dir


def build_app(root: Path) -> DianaApp:
    config_dir, data_dir = prepare_dirs(root)
    return make_app(config_dir, data_dir, clock=stepping_clock(), new_id=counting_ids())


async def type_command(pilot: Pilot[int], text: str) -> None:
    """Type a line into the chat input, submit it and wait until its result is on screen."""
    app = pilot.app
    assert isinstance(app, DianaApp)
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
    """The workbench after a fact is saved and the time is asked for."""
    await type_command(pilot, '/call save_fact {"content": "Ada prefers tea", "tags": ["drinks"]}')
    await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
    await type_command(pilot, '/call get_current_time {"timezone": 5}')


SCENARIOS = {"main": main_screen}
