"""A long call shows how far it has got (the server's progress notifications) and can be
cancelled while it runs: it ends `cancelled`, and nothing waits for it."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest
from diana.core.events import CallProgress
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.panes import ExecutionLogPane
from diana.tui.panes.chat import ChatPane
from diana.tui.panes.transcript import ToolCallLine
from textual.pilot import Pilot
from textual.widgets import Input

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .scenarios import app_of, build_app, fixture_server, settle, until
from .waits import settled

pytestmark = pytest.mark.processes  # every test here starts a process

COUNTING = {"fx": fixture_server("--host-tools")}


def allow_counting(config_dir: Path) -> None:
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"fx_count": "allow"}}))


async def test_progress_is_published_and_a_running_call_is_cancelled(
    config_dir: Path, data_dir: Path
) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": COUNTING}))
    allow_counting(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        events = runtime.bus.subscribe()
        done = await runtime.call_tool("fx_count", {"steps": 3, "pause": 0.05}, origin="test")
        assert done.data == "counted to 3"
        seen = []
        while not events.queue.empty():
            event = await events.get()
            if isinstance(event, CallProgress):
                seen.append(event.describe())
        assert seen == [
            "███░░░░░░░ 1 of 3 (33%) · step 1",
            "███████░░░ 2 of 3 (67%) · step 2",
            "██████████ 3 of 3 (100%) · step 3",
        ]

        call = asyncio.create_task(
            runtime.call_tool("fx_count", {"steps": 50, "pause": 0.1}, origin="test")
        )
        progress = await asyncio.wait_for(next_progress(events), 20)
        assert runtime.orchestrator.cancel(progress.call_id)
        result = await asyncio.wait_for(call, 5)
        assert result.error_code is ErrorCode.CANCELLED
        assert not runtime.orchestrator.cancel(progress.call_id)  # it has ended
        # The server goes on serving: the cancelled call did not take it down.
        again = await runtime.call_tool("fx_count", {"steps": 1, "pause": 0}, origin="test")
        assert again.data == "counted to 1"


async def next_progress(events: object) -> CallProgress:
    while True:
        event = await events.get()  # type: ignore[attr-defined]
        if isinstance(event, CallProgress):
            return event


async def test_the_log_shows_progress_and_x_cancels_the_selected_call(tmp_path: Path) -> None:
    app = build_app(tmp_path, COUNTING)
    allow_counting(app.paths.config_dir)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        call = asyncio.create_task(
            runtime.call_tool("fx_count", {"steps": 50, "pause": 0.1}, origin="test")
        )
        log = app.query_one(ExecutionLogPane)
        await until(lambda: any(" of 50 (" in c.summary for c in log.calls.values()))
        await pilot.press("f6")
        log.table.focus()
        await pilot.press("end")
        await pilot.press("x")
        result = await asyncio.wait_for(call, 10)
        assert result.error_code is ErrorCode.CANCELLED
        await until(lambda: [c.status for c in log.calls.values()] == ["cancelled"])
        assert any("Cancelling fx_count" in n.message for n in app._notifications)


async def first_tool_call(pilot: Pilot[int], text: str) -> tuple[ChatPane, ToolCallLine]:
    """``text`` sent in the chat; the pane, and the line of the first tool call it makes."""
    await settle(pilot)
    chat = pilot.app.query_one(ChatPane)
    chat.query_one("#chat-input", Input).value = text
    await pilot.press("enter")
    await until(lambda: bool(chat.query(ToolCallLine)), within=20)
    return chat, chat.query_one(ToolCallLine)


async def test_the_chat_shows_progress_on_the_tool_call_line(tmp_path: Path) -> None:
    count = {"tool_calls": [{"name": "fx_count", "arguments": {"steps": 20, "pause": 0.1}}]}
    with FakeOllama([count, {"content": "Counted."}]) as fake:
        app = build_app(tmp_path, COUNTING, ollama=fake.url)
        allow_counting(app.paths.config_dir)
        async with app.run_test(size=(120, 35)) as pilot:
            chat, line = await first_tool_call(pilot, "count to twenty")
            await until(lambda: " of 20 (" in line.progress, within=20)
            assert "running… " in str(line.header())
            assert chat.turn is not None
            await chat.turn.wait()
            assert line.record is not None and line.record.succeeded
            assert "running" not in str(line.header())


async def test_esc_in_the_chat_stops_the_reply_and_cancels_its_running_call(
    tmp_path: Path,
) -> None:
    count = {"tool_calls": [{"name": "fx_count", "arguments": {"steps": 50, "pause": 0.1}}]}
    with FakeOllama([count, {"content": "never asked"}]) as fake:
        app = build_app(tmp_path, COUNTING, ollama=fake.url)
        allow_counting(app.paths.config_dir)
        async with app.run_test(size=(120, 35)) as pilot:
            chat, line = await first_tool_call(pilot, "count to fifty")
            await until(lambda: " of 50 (" in line.progress, within=20)
            await pilot.press("escape")
            turn = chat.turn
            assert turn is not None
            await until(lambda: turn.is_finished)  # cancelled, as Esc asks
            log = app.query_one(ExecutionLogPane)
            await until(lambda: [c.status for c in log.calls.values()] == ["cancelled"])
            assert "Stopped." in chat.plain_text()


async def test_o_on_a_tool_call_opens_the_image_its_result_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = tmp_path / "opened.txt"
    viewer = f"import sys; open({str(opened)!r}, 'a').write(sys.argv[1])"
    monkeypatch.setenv("BROWSER", f"{sys.executable} -c {shlex.quote(viewer)} %s")
    picture = {"tool_calls": [{"name": "fx_picture", "arguments": {}}]}
    with FakeOllama([picture, {"content": "Here it is."}]) as fake:
        app = build_app(tmp_path, COUNTING, ollama=fake.url)
        (app.paths.config_dir / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))
        async with app.run_test(size=(120, 35)) as pilot:
            chat, line = await first_tool_call(pilot, "show me the picture")
            assert chat.turn is not None
            await chat.turn.wait()
            assert line.check_action("open_media", ()) is True
            await settled(app)  # the turn's end has given the input its focus back
            line.focus()
            await until(lambda: app.focused is line)  # not the input, which the turn refocuses
            await pilot.press("o")
            await until(lambda: opened.exists(), within=30)
            (path,) = line.media()
            assert opened.read_text() == path.as_uri()
            assert path.read_bytes()[:4] == b"\x89PNG"
