"""The server detail view asks the server for its resources and prompts: a resource is read
with Enter (a template filled in first) and saved with s; the server's log is filtered by
level with l."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from diana.tui.modals.elicitation import ElicitationScreen
from diana.tui.modals.prompts import SavePathScreen
from diana.tui.modals.resource import ResourceScreen
from diana.tui.modals.server_detail import ServerDetailScreen
from textual.widgets import Input, Static

from .configs import RAW
from .scenarios import app_of, build_app, catalog_loaded, fixture_server, servers_pane, until
from .screen import on_screen

pytestmark = pytest.mark.processes  # every test here starts a process


def text_of(screen: object, selector: str) -> str:
    widget = screen.query_one(selector, Static)  # type: ignore[attr-defined]
    return str(widget.render())


async def test_a_resource_is_read_from_the_detail_view_and_saved(tmp_path: Path) -> None:
    app = build_app(tmp_path, {"files": fixture_server()})
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        await pilot.press("enter")
        await catalog_loaded(pilot)
        detail = app.screen
        assert isinstance(detail, ServerDetailScreen)
        assert [r.uri for r in detail.resources][:2] == [
            "fixture://greeting",
            "fixture://settings.json",
        ]
        assert "review(code, focus?)" in text_of(detail, "#detail-prompts")

        await pilot.press("tab", "down", "enter")
        await catalog_loaded(pilot)
        assert isinstance(app.screen, ResourceScreen)
        assert on_screen(app, "hello from the fixture")

        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, SavePathScreen)
        assert app.screen.query_one(Input).value == "greeting"  # the URI's last part
        target = tmp_path / "saved.txt"
        app.screen.query_one(Input).value = str(target)
        await pilot.press("enter")
        await until(target.exists)
        assert target.read_text() == "hello from the fixture"
        assert any(f"to {target}" in n.message for n in app_of(pilot)._notifications)


async def test_a_template_is_filled_in_before_it_is_read(tmp_path: Path) -> None:
    app = build_app(tmp_path, {"files": fixture_server()})
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        await pilot.press("enter")
        await catalog_loaded(pilot)
        await pilot.press("tab", "end", "enter")  # the template is listed last
        await pilot.pause()
        # One field for each of the template's variables, never its raw braces.
        assert isinstance(app.screen, ElicitationScreen)
        (field,) = app.screen.query(Input)
        assert field.value == "" and on_screen(app, "Read fixture://items/{item}")
        await pilot.press(*"lamp post", "enter")
        await catalog_loaded(pilot)
        assert isinstance(app.screen, ResourceScreen)
        assert app.screen.info["uri"] == "fixture://items/lamp%20post"  # encoded as it says
        assert on_screen(app, "item lamp post")


async def test_the_server_log_is_shown_by_level(tmp_path: Path) -> None:
    raw = {"command": sys.executable, "args": [RAW, "--host"], "logLevel": "debug"}
    app = build_app(tmp_path, {"raw": raw})
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        assert (await runtime.call_tool("raw_roots", {}, origin="test")).success
        await pilot.press("enter")
        await catalog_loaded(pilot)
        detail = app.screen
        assert isinstance(detail, ServerDetailScreen)
        await until(lambda: "roots were asked for" in text_of(detail, "#detail-log"))
        assert "log level set to debug" in text_of(detail, "#detail-log")

        await pilot.press("l")  # notice and above
        assert "notice and above" in text_of(detail, "#detail-log-heading")
        shown = text_of(detail, "#detail-log")
        assert "log level set to debug" in shown and "roots were asked for" not in shown
        await pilot.press("l")  # warning and above
        assert text_of(detail, "#detail-log") == "nothing logged"


async def test_a_resource_the_server_watches_is_read_again_at_each_change(
    tmp_path: Path,
) -> None:
    raw = {"command": sys.executable, "args": [RAW, "--host"]}
    app = build_app(tmp_path, {"raw": raw})
    async with app.run_test(size=(120, 35)) as pilot:
        await servers_pane(pilot)
        await pilot.press("enter")
        await catalog_loaded(pilot)
        await pilot.press("tab", "down", "enter")  # the clock
        await until(lambda: isinstance(app.screen, ResourceScreen), within=10)
        screen = app.screen
        live = screen.query_one("#resource-live", Static)
        await until(lambda: "changed 2 times" in str(live.render()), within=10)
        assert on_screen(app, "tick 2")
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, ResourceScreen))
