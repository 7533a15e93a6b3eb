"""A theme chosen in the command palette reaches every pane and dialog: each colour that means
something is drawn in the theme's own colour for that meaning, and changes with the theme."""

from __future__ import annotations

from pathlib import Path

import pytest
from diana.tui.modals.proposal_detail import ProposalDetailScreen
from diana.tui.modals.tool_form import ToolFormScreen
from diana.tui.panes import AgentsPane, ApprovalsPane
from diana.tui.panes.transcript import ToolCallLine
from textual.pilot import Pilot
from textual.widgets import Input

from .colours import drawn_colours, theme_colour
from .fixtures.fake_ollama import FakeOllama
from .scenarios import FILES, app_of, ask, build_app, fixture_server, settle, type_command, until
from .waits import settled

pytestmark = pytest.mark.processes  # every test here starts a process

SERVERS = {
    "files": fixture_server(),
    "github": {"command": "github-mcp-server", "args": ["stdio"]},  # not installed: an error
}
# The model calls a tool with arguments its schema refuses: the call fails.
BAD_CALL = {"tool_calls": [{"name": "files_echo", "arguments": {"words": 3}}]}
THEMES = ["textual-dark", "gruvbox", "catppuccin-latte"]  # each its own red and amber
SIZE = (160, 60)  # tall enough for every agent's row


async def use_theme(pilot: Pilot[int], theme: str) -> None:
    app_of(pilot).theme = theme
    for _ in range(3):  # the CSS first, then whatever draws again for the new theme
        await pilot.pause()


async def test_every_pane_draws_in_the_chosen_themes_colours(tmp_path: Path) -> None:
    with FakeOllama([BAD_CALL, {"content": "That did not work."}]) as fake:
        app = build_app(tmp_path, SERVERS, ollama=fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "say three")
            for path in ("/srv/a.pdf", "/srv/b.pdf"):
                await type_command(pilot, f'/call files_delete_file {{"path": "{path}"}}')
            app.query_one(AgentsPane).refresh_health()
            await settled(app)
            app.query_one(ApprovalsPane).table.move_cursor(row=0)  # p000001's row: no cursor
            await settle(pilot)
            line = app.query_one(ToolCallLine)
            drawn = []
            for theme in THEMES:
                await use_theme(pilot, theme)
                bad = theme_colour(app, "error")
                assert drawn_colours(app, "irreversible", row="p000001") == {bad}  # Approvals
                assert drawn_colours(app, "● error", row="github") == {bad}  # MCP Servers
                assert drawn_colours(app, "● unhealthy", row="mcp-github") == {bad}  # Agents
                assert drawn_colours(app, "✗", row="files_echo") == {bad}  # the chat's tool call
                muted = theme_colour(app, "foreground-muted", over=line.background_colors[1])
                assert drawn_colours(app, '{"words": 3}', row="files_echo") == {muted}
                caution = theme_colour(app, "warning")  # the Execution Log, off the cursor
                assert drawn_colours(app, "refused", row="c0ffee000001") == {caution}
                assert drawn_colours(app, "pending approval", row="c0ffee000003") == {caution}
                drawn.append(bad)
            assert len(set(drawn)) == len(THEMES)  # so a fixed colour could not pass


async def test_dialogs_draw_in_the_chosen_themes_colours(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call files_delete_file {"path": "/srv/a.pdf"}')
        await pilot.press("f3", "enter")
        await until(lambda: isinstance(app.screen, ProposalDetailScreen))
        for theme in THEMES:  # switched while the dialog is open
            await use_theme(pilot, theme)
            assert drawn_colours(app, "irreversible", row="risk") == {theme_colour(app, "error")}
        await pilot.press("escape", "ctrl+t")
        await until(lambda: isinstance(app.screen, ToolFormScreen))
        app.screen.query_one("#tool-timeout", Input).value = "soon"
        await pilot.press("ctrl+s")
        await pilot.pause()
        for theme in THEMES:
            await use_theme(pilot, theme)
            error = drawn_colours(app, "timeout: 'soon' is not a number of seconds")
            assert error == {theme_colour(app, "error")}
