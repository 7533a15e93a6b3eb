"""The workbench in the terminal sizes people have: what the person needs is on screen, and a
key acts on what is shown. Checked on the screen as drawn (the exported screenshot's text),
not on widget state that may be off screen."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.tui.app import DianaApp
from diana.tui.main_screen import MainScreen
from diana.tui.panes import ChatPane
from diana.tui.panes.approvals import ApprovalsPane
from diana.tui.panes.servers import ServerRow

from .scenarios import WORKBENCH, build_app, make_proposals, settle, type_command, until
from .screen import on_screen, screen_lines
from .waits import settled

pytestmark = pytest.mark.processes  # every test here starts a process

SMALL = [(80, 24), (100, 30), (120, 35)]


@pytest.mark.parametrize("size", SMALL)
async def test_f3_shows_the_proposals_and_a_approves_the_one_shown(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = build_app(tmp_path, WORKBENCH)
    async with app.run_test(size=size) as pilot:
        await make_proposals(pilot)
        await pilot.press("f3")
        await settle(pilot)
        pane = app.query_one(ApprovalsPane)
        selected = pane.selected_proposal()
        assert selected is not None
        assert await status_of(app, selected) is ProposalStatus.PENDING
        # Every pending proposal's id is drawn, the selected one among them.
        shown = [row.value for row in pane.table.rows if row.value is not None]
        assert len(shown) == 3
        for proposal in shown:
            assert on_screen(app, proposal), (proposal, screen_lines(app))

        await pilot.press("a")
        await settled(app)
        await settle(pilot)

        decided = {p: await status_of(app, p) for p in shown}
        assert decided.pop(selected) is ProposalStatus.SUCCEEDED
        assert set(decided.values()) == {ProposalStatus.PENDING}


@pytest.mark.parametrize("size", SMALL)
async def test_f4_shows_every_server_by_its_full_name(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = build_app(tmp_path, WORKBENCH)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f4")
        await settle(pilot)
        for name in WORKBENCH:
            assert on_screen(app, name), (name, screen_lines(app))


@pytest.mark.parametrize("size", SMALL)
async def test_one_pane_at_a_time_and_the_bar_keeps_the_pending_count_in_view(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = build_app(tmp_path, WORKBENCH)
    async with app.run_test(size=size) as pilot:
        await make_proposals(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen) and screen.compact
        assert screen.maximized is app.query_one(ChatPane)  # typing: the chat fills the screen
        assert on_screen(app, "F3 Approvals 3") and on_screen(app, "3 pending approvals")
        for key, pane in (("f4", "#servers"), ("f6", "#log"), ("f2", "#chat")):
            await pilot.press(key)
            await pilot.pause()
            assert screen.maximized is app.query_one(pane)
            assert on_screen(app, "F3 Approvals 3")


async def test_a_terminal_made_wide_shows_every_pane_and_small_again_one(tmp_path: Path) -> None:
    app = build_app(tmp_path, WORKBENCH)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MainScreen)
        await pilot.press("f4")
        await pilot.resize_terminal(200, 50)
        await until(lambda: not screen.compact)
        await pilot.pause()
        assert screen.maximized is None
        for title in ("Chat", "Approvals", "MCP Servers", "Agents", "Execution Log"):
            assert on_screen(app, title), title
        await pilot.resize_terminal(120, 35)
        await until(lambda: screen.compact)
        await pilot.pause()
        assert screen.maximized is app.query_one("#servers")  # the pane in use stays


async def status_of(app: DianaApp, proposal_id: str) -> ProposalStatus:
    assert app.core is not None
    return (await app.core._runtime.approvals.store.get(proposal_id)).status


async def test_words_on_screen_are_spaced_and_a_retry_counts_down(tmp_path: Path) -> None:
    """Separate pieces of a line never run together ('errorretry in', 'files_delete_file
    needs', 'p000001(irreversible)'), and a server's next attempt counts down each second."""
    app = build_app(tmp_path, WORKBENCH)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call files_delete_file {"path": "/srv/a.pdf"}')
        assert on_screen(app, "⏸ files_delete_file needs your approval — proposal p000001")
        assert on_screen(app, "(irreversible)")
        await pilot.press("f4")
        await pilot.pause()
        assert on_screen(app, "● error") and on_screen(app, "retry in 10 min · ")
        assert not any("errorretry" in line for line in screen_lines(app))
        assert on_screen(app, "10 tools") and not on_screen(app, "0 tool ")

        row = next(r for r in app.query(ServerRow) if r.server == "github-enterprise")
        row.retry_at = time.monotonic() + 30.5
        row.show_problem()
        await pilot.pause()
        assert on_screen(app, "retry in 31 s · command not found")

        def shown() -> int:
            for line in screen_lines(app):
                found = re.search(r"retry in (\d+) s · command not found", line)
                if found:
                    return int(found.group(1))
            return 0

        # It counts down by itself (each second, or as soon as a busy machine lets it).
        await until(lambda: 0 < shown() < 31, 30)
        before = shown()
        await until(lambda: 0 < shown() < before, 30)
