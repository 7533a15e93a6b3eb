"""Views opened inside a pane (policy, Memory, usage, a server's detail, a form) go when the
person switches panes: the keys never act on a view the screen no longer shows. F1 (or ?)
shows the keys of what is in use and the global ones, built from the bindings."""

from __future__ import annotations

from pathlib import Path

import pytest
from diana.tui.app import DianaApp
from diana.tui.main_screen import MainScreen
from diana.tui.modals.dialogs import Dialog
from diana.tui.modals.memory import MemoryScreen
from diana.tui.modals.policy import PolicyScreen
from diana.tui.modals.prompts import HumanInputScreen
from diana.tui.modals.server_detail import ServerDetailScreen
from diana.tui.modals.server_form import ServerFormScreen
from diana.tui.modals.usage import UsageScreen
from diana.tui.panes.base import Pane

from .scenarios import FILES, build_app, settle

SMALL = (80, 24)
WIDE = (160, 45)

# Each view a person opens inside a pane: the pane's key, the key that opens it, its screen.
VIEWS = [
    ("f3", "p", PolicyScreen),
    ("f5", "m", MemoryScreen),
    ("f5", "u", UsageScreen),
    ("f4", "enter", ServerDetailScreen),
    ("f4", "a", ServerFormScreen),
]
PANE_OF_KEY = {"f2": "chat", "f3": "approvals", "f4": "servers", "f5": "agents", "f6": "log"}


def pane_in_use(app: DianaApp) -> Pane | None:
    focused = app.main.focused
    return MainScreen._pane_of(focused)


@pytest.mark.parametrize("size", [SMALL, WIDE], ids=["80x24", "160x45"])
async def test_a_view_inside_a_pane_goes_when_another_pane_takes_the_screen(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for pane_key, opens, view in VIEWS:
            for then in PANE_OF_KEY:
                await pilot.press(pane_key, opens)
                await pilot.pause()
                assert isinstance(app.screen, view), (pane_key, opens)
                await pilot.press(then)
                await pilot.pause()
                # The workbench is on top again, nothing left over it, and the pane asked
                # for holds the focus (and, one pane at a time, the screen).
                assert app.screen is app.main, (pane_key, opens, then, app.screen_stack)
                assert len(app.screen_stack) == 1
                pane = pane_in_use(app)
                assert pane is not None and pane.id == PANE_OF_KEY[then], (opens, then)
                if size == SMALL:
                    assert app.main.maximized is pane
        # The policy view, then F4, then Esc: nothing is left to close, and p in Approvals
        # opens one view, not a second one over a stale first.
        await pilot.press("f3", "p", "f4", "escape", "f3", "p")
        await pilot.pause()
        assert [type(s) for s in app.screen_stack] == [MainScreen, PolicyScreen]


async def test_a_question_the_core_waits_on_keeps_the_keys(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        asked = pilot.app.run_worker(app.ask_person("Which colour?", ["red", "blue"]))
        await pilot.pause()
        assert isinstance(app.screen, HumanInputScreen)
        await pilot.press("f4")
        await pilot.pause()
        assert isinstance(app.screen, HumanInputScreen)  # still asked, still answerable
        assert isinstance(app.screen, Dialog) and app.screen.held
        await pilot.press("1", "enter")
        assert await asked.wait() == "red"
