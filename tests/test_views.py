"""Views opened inside a pane (policy, Memory, usage, a server's detail, a form) go when the
person switches panes: the keys never act on a view the screen no longer shows. F1 (or ?)
shows the keys of what is in use and the global ones, built from the bindings."""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal_store import ProposalStore
from diana.tui import main_screen
from diana.tui.app import DianaApp
from diana.tui.footer import KeysFooter
from diana.tui.main_screen import MainScreen
from diana.tui.modals.clients import ClientsScreen
from diana.tui.modals.dialogs import Dialog
from diana.tui.modals.help import HelpScreen, key_name
from diana.tui.modals.memory import MemoryScreen
from diana.tui.modals.policy import PolicyScreen
from diana.tui.modals.prompts import HumanInputScreen
from diana.tui.modals.registry import RegistryInstallScreen
from diana.tui.modals.server_detail import ServerDetailScreen
from diana.tui.modals.server_form import ServerFormScreen
from diana.tui.modals.usage import UsageScreen
from diana.tui.panes import ApprovalsPane, ChatPane, ServersPane
from diana.tui.panes.approvals import ProposalTable
from diana.tui.panes.base import Pane
from diana.tui.panes.servers import ServerRow
from textual.widgets import Input, OptionList, Static
from textual.widgets._footer import FooterKey

from .conftest import new_proposal
from .fixtures.fake_registry import FakeRegistry
from .scenarios import FILES, build_app, fixture_server, settle, type_command, until

SMALL = (80, 24)
# The smallest terminal that shows every pane: the wide layout, with the fewest cells to draw.
WIDE = (main_screen.WIDE, main_screen.TALL)

# Each view a person opens inside a pane: the pane's key, the key that opens it, its screen.
VIEWS = [
    ("f3", "p", PolicyScreen),
    ("f3", "c", ClientsScreen),
    ("f5", "m", MemoryScreen),
    ("f5", "u", UsageScreen),
    ("f4", "enter", ServerDetailScreen),
    ("f4", "a", ServerFormScreen),
]
PANE_OF_KEY = {"f2": "chat", "f3": "approvals", "f4": "servers", "f5": "agents", "f6": "log"}


def pane_in_use(app: DianaApp) -> Pane | None:
    focused = app.main.focused
    return MainScreen._pane_of(focused)


@pytest.mark.processes
@pytest.mark.parametrize("size", [SMALL, WIDE], ids=["one pane", "every pane"])
async def test_a_view_inside_a_pane_goes_when_another_pane_takes_the_screen(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        assert app.main.compact is (size == SMALL)
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


@pytest.mark.processes
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


def help_lines(app: DianaApp) -> dict[str, dict[str, list[str]]]:
    screen = app.screen
    assert isinstance(screen, HelpScreen)
    return {section.title: section.keys for section in screen.sections}


def shown_text(app: DianaApp) -> str:
    """The words the terminal shows now (the screenshot's text, without its markup)."""
    text = re.sub(r"<[^>]+>", "", app.export_screenshot())
    return html.unescape(text).replace("\xa0", " ")


@pytest.mark.processes
async def test_f1_shows_the_keys_of_the_pane_in_use_and_the_global_ones(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        # At 80 columns the footer says how to find the keys.
        footer = app.main.query_one(KeysFooter)
        offered = [(k.key_display, k.description) for k in footer.query(FooterKey) if k.display]
        assert ("F1", "Help") in offered, offered

        await pilot.press("f4", "f1")
        await pilot.pause()
        keys = help_lines(app)
        assert list(keys) == ["MCP Servers (F4)", "Everywhere"]
        # Made from the pane's bindings: every key diana binds there, hidden ones too.
        servers = app.main.query_one(ServersPane)
        for bindings in servers._bindings.key_to_bindings.values():
            # Each key offered here now (e: Disable or Enable, by the server; i only for a
            # server that asks for a sign-in) is listed with what it does.
            for one in bindings:
                if app._check_action_state(one.action, servers) is not False:
                    shown = keys["MCP Servers (F4)"][one.description]
                    assert shown == [key_name(app, one)], one
        assert keys["MCP Servers (F4)"]["Find server"] == ["f"]
        everywhere = keys["Everywhere"]
        assert everywhere["Help"] == ["F1", "?"]
        assert everywhere["Add tool"] == ["Ctrl+T"]
        assert [everywhere[name] for name in ("Chat", "Approvals", "Agents")] == [
            ["F2"],
            ["F3"],
            ["F5"],
        ]
        assert "Find server" in shown_text(app)
        await pilot.press("f1")  # F1 again closes it
        await pilot.pause()
        assert app.screen is app.main

        # ? where it types nothing: the Agents pane's keys (usage, Memory) are listed.
        await pilot.press("f5", "question_mark")
        await pilot.pause()
        keys = help_lines(app)
        agents = next(title for title in keys if title.startswith("Agents"))
        assert {"u", "m"} <= {key for shown in keys[agents].values() for key in shown}
        await pilot.press("escape")
        # In a view, its own keys and the F-keys that reach past it.
        await pilot.press("f3", "p", "f1")
        await pilot.pause()
        keys = help_lines(app)
        assert list(keys) == ["Approval policy", "Everywhere"]
        assert keys["Approval policy"]["Remove rule"] == ["d", "Del"]
        assert "F4" in keys["Everywhere"]["MCP Servers"]
        assert "Add tool" not in keys["Everywhere"]  # Ctrl+T does not reach past a view

        # ? in the chat's input types a question mark; /help names F1.
        await pilot.press("f2", "question_mark")
        await pilot.pause()
        assert app.screen is app.main
        assert app.query_one("#chat-input", Input).value == "?"
        await type_command(pilot, "/help")
        assert "F1" in app.query_one(ChatPane).plain_text()
        # Ctrl+C where nothing copies still says how to quit, at this size too.
        await pilot.press("f3", "ctrl+c")
        await pilot.pause()
        assert any("Ctrl+Q" in str(n.message) for n in app._notifications)


@pytest.mark.processes
@pytest.mark.parametrize("size", [SMALL, (120, 35)], ids=["80x24", "120x35"])
async def test_the_help_fits_the_terminal(tmp_path: Path, size: tuple[int, int]) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f3", "f1")
        await pilot.pause()
        text = shown_text(app)
        for line in ("Approvals (F3)", "Policy", "Everywhere", "Ctrl+Q", "Quit"):
            assert line in text, line


# -- adding a server from the registry, and what the pane says of it ---------------------------

RAW = str(Path(__file__).parent / "fixtures" / "raw_mcp_server.py")


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        yield fake


def request_text(app: DianaApp) -> str:
    """The sub-agent's panel as the terminal shows it, its lines joined."""
    panel = app.main.query_one("#subagent-requests", Static)
    lines = [panel.render_line(y).text for y in range(panel.size.height)]
    return " ".join(" ".join(lines).split())


@pytest.mark.processes
async def test_the_install_form_suggests_a_name_no_server_has(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    taken = {"time-keyed": fixture_server(), "time-keyed-2": fixture_server(disabled=True)}
    app = build_app(tmp_path, taken, settings={"registry": {"url": registry.url}})
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("f4", "f", *"keyed", "enter")
        results = app.screen.query_one("#registry-results", OptionList)
        await until(lambda: results.option_count == 1)
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, RegistryInstallScreen))
        name = app.screen.query_one("#registry-install-name", Input).value
        assert name == "time-keyed-3"


@pytest.mark.processes
async def test_why_an_add_failed_is_shown_whole_at_80_columns(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert app.core is not None
        missing = "a-server-command-that-is-not-installed-anywhere-on-this-machine"
        failed = app.core._runtime.subagent.add_server("broken", {"command": missing})
        await app.core._runtime.subagent.wait(failed.id)
        assert failed.state.value == "failed"
        assert len(failed.message) > 80  # longer than a line at 80 columns
        await pilot.press("f4")
        await settle(pilot)
        # the pane is laid out anew once shown: its panel may be read while still narrow
        await until(lambda: " ".join(failed.message.split()) in request_text(app), within=30)


@pytest.mark.processes
async def test_an_install_test_lists_the_tools_diana_gets_once_it_is_added(
    tmp_path: Path,
) -> None:
    """A server may offer a tool only to a client that lets it ask the model (sampling): the
    test connection declares what diana's own connection declares, so the count it reports
    is the count the pane then shows."""
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert app.core is not None
        raw = {"command": sys.executable, "args": [RAW, "--by-capability"]}
        added = app.core._runtime.subagent.add_server("every", raw)
        await app.core._runtime.subagent.wait(added.id)
        assert added.state.value == "completed", added.message
        assert added.tools is not None
        assert sorted(t["name"] for t in added.tools) == ["echo", "summarize"]
        await until(
            lambda: "every" in app.core._runtime.mcp.connections if app.core._runtime else False
        )
        await app.core._runtime.mcp.wait_ready()
        await pilot.press("f4")
        await settle(pilot)
        row = next(r for r in app.main.query(ServerRow) if r.server == "every")
        assert row.info.tool_count == 2
        assert "added every: 2 tools" in request_text(app)


# -- F3 with many pending ---------------------------------------------------------------------


@pytest.mark.paints
async def test_f3_shows_the_approvals_pane_without_drawing_its_rows_anew(tmp_path: Path) -> None:
    """On a small terminal a pane comes back at the size it had, and the table its focus
    restyles keeps the lines it drew focused and blurred: F3 neither measures the rows
    listed again nor draws one anew. A new theme draws them anew, in its colours."""
    app = build_app(tmp_path)
    store = await ProposalStore.open(app.paths.data_dir / "diana.db")
    try:
        for n in range(120):
            await new_proposal(store, path=f"file-{n}")
    finally:
        await store.close()
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        table = app.main.query_one(ProposalTable)
        drawn: list[int] = []
        draw = table._render_line_in_row

        def counted(*args: Any, **kwargs: Any) -> Any:
            drawn.append(1)
            return draw(*args, **kwargs)

        table._render_line_in_row = counted  # type: ignore[method-assign]
        await pilot.press("f3")
        await pilot.pause()
        for _ in range(3):
            await pilot.press("f2")
            await pilot.pause()
            measured, drawn[:] = table._update_count, []
            await pilot.press("f3")
            await pilot.pause()
            await pilot.pause()
            assert app.main.maximized is app.main.query_one(ApprovalsPane)
            assert table.row_count == 120
            # The rows' measures are kept (an update would measure all 120 again)...
            assert table._update_count == measured
            # ... and no row is drawn again.
            assert drawn == []
        cursor = table.get_component_rich_style("datatable--cursor")
        app.theme = "nord" if app.theme == "gruvbox" else "gruvbox"
        await pilot.pause()
        await pilot.pause()
        assert 0 < len(drawn) <= table.size.height
        assert table.get_component_rich_style("datatable--cursor") != cursor


@pytest.mark.paints
async def test_the_approvals_table_keeps_its_lines_as_the_focus_comes_and_goes(
    tmp_path: Path,
) -> None:
    """Every pane on screen: the table is drawn focused (F3) and blurred (F2) in turn, and
    after one round of each draws no row anew."""
    app = build_app(tmp_path)
    store = await ProposalStore.open(app.paths.data_dir / "diana.db")
    try:
        for n in range(30):
            await new_proposal(store, path=f"file-{n}")
    finally:
        await store.close()
    async with app.run_test(size=WIDE) as pilot:
        await settle(pilot)
        table = app.main.query_one(ProposalTable)
        drawn: list[int] = []
        draw = table._render_line_in_row

        def counted(*args: Any, **kwargs: Any) -> Any:
            drawn.append(1)
            return draw(*args, **kwargs)

        table._render_line_in_row = counted  # type: ignore[method-assign]
        for key in ("f3", "f2"):
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
        assert drawn  # drawn once focused and once blurred
        for key in ("f3", "f2", "f3"):
            drawn.clear()
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            assert table.has_focus is (key == "f3")
            assert drawn == []
