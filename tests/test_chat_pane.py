"""The chat pane through Textual's Pilot, against a fake Ollama over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import html
import re
import socket
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.tui.app import DianaApp
from diana.tui.modals.elicitation import ElicitationScreen
from diana.tui.modals.prompts import HumanInputScreen, RejectReasonScreen
from diana.tui.panes.chat import ChatPane
from diana.tui.panes.transcript import (
    PROMPT,
    AnswerView,
    ApprovalPrompt,
    GapReportView,
    SettledAnswer,
    ToolCallLine,
    prose,
)
from textual.widgets import Input
from textual.widgets._markdown import MarkdownBlock, MarkdownFence

from .commands import diana
from .fixtures.fake_ollama import FakeOllama
from .scenarios import (
    FILES,
    TERMINAL_SIZE,
    app_of,
    ask,
    build_app,
    fixture_server,
    gap_answer,
    settle,
    type_command,
    until,
)
from .screen import transcript
from .waits import settled, started

DELETE = {
    "content": "Deleting it needs your approval.",
    "tool_calls": [{"name": "files_delete_file", "arguments": {"path": "/srv/old.pdf"}}],
}


def records(app: DianaApp) -> list[Any]:
    return [line.record for line in app.query(ToolCallLine)]


async def test_an_answer_shows_while_it_streams_and_code_fences_survive(tmp_path: Path) -> None:
    chunks = ["Here is ", "the code:\n\n", "```python\nprint(", "'hi')\n", "```\n", "Done."]
    with FakeOllama([{"content": chunks, "delay": 0.15}]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            box = app.query_one("#chat-input", Input)
            box.value = "show me code"
            await pilot.press("enter")
            turn = app.query_one(ChatPane).turn
            assert turn is not None
            await until(lambda: bool(app.query(AnswerView)) and "the code" in transcript(app))
            assert turn.is_running  # drawn before the stream ended
            assert "Done." not in transcript(app)
            await turn.wait()
            await pilot.pause()
            answer = app.query_one(AnswerView)
            assert answer.source == "".join(chunks)
            fence = answer.query_one(MarkdownFence)
            assert "print('hi')" in fence.code
            title = app.query_one(ChatPane).border_title
            assert str(title).startswith("Chat — qwen3:30b-a3b · Ollama ready · ctx ")


async def test_esc_stops_the_reply_and_keeps_what_was_said(tmp_path: Path) -> None:
    slow = {"content": [f"part{i} " for i in range(20)], "delay": 0.2}
    with FakeOllama([slow, {"content": "next answer"}]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            chat = app.query_one(ChatPane)
            box = app.query_one("#chat-input", Input)
            box.value = "talk slowly"
            await pilot.press("enter")
            await until(lambda: "part1" in transcript(app))
            assert "escape" in {b.binding.key for b in app.active_bindings.values()}
            await pilot.press("escape")
            turn = chat.turn
            assert turn is not None
            await until(lambda: turn.is_finished)
            await pilot.pause()
            text = transcript(app)
            assert "Stopped." in text and "part19" not in text
            assert app.core is not None
            stored = [m.content for m in app.core._runtime.chat.messages]
            assert stored[-1] == "stopped" and stored[-2].startswith("part0 part1")
            await ask(pilot, "again")
            assert "next answer" in transcript(app)


@pytest.mark.processes
async def test_approving_in_the_approvals_pane_lets_the_turn_finish(tmp_path: Path) -> None:
    with FakeOllama([DELETE, {"content": "The file is deleted."}]) as fake:
        app = build_app(tmp_path, FILES, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "delete /srv/old.pdf", until_prompt=True)
            prompt = app.query_one(ApprovalPrompt)
            assert prompt.has_focus  # the decision is one key away
            assert "files_delete_file needs your approval" in transcript(app)
            assert "waiting for approval" in transcript(app)
            await pilot.press("f3", "a")
            chat = app.query_one(ChatPane)
            assert chat.turn is not None
            await chat.turn.wait()
            await settled(app)
            await pilot.pause()
            (record,) = records(app)
            assert record.status == "succeeded" and record.result == "deleted /srv/old.pdf"
            assert "The file is deleted." in transcript(app)
            assert "approved and run" in transcript(app)
            assert fake.requests[-1]["messages"][-1]["role"] == "tool"
            assert app.query_one("#chat-input").has_focus is False  # F3 moved it; not stolen


@pytest.mark.processes
@pytest.mark.parametrize(
    ("keys", "status"),
    [(("a",), "succeeded"), (("r", "enter"), "rejected"), (("s",), "pending_approval")],
)
async def test_the_inline_prompt_decides_or_sends_on(
    tmp_path: Path, keys: tuple[str, ...], status: str
) -> None:
    with FakeOllama([DELETE, {"content": "Understood."}]) as fake:
        app = build_app(tmp_path, FILES, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "delete it", until_prompt=True)
            chat = app.query_one(ChatPane)
            for key in keys:
                await pilot.press(key)
                if key == "r":
                    await until(lambda: isinstance(app.screen, RejectReasonScreen))
            assert chat.turn is not None
            await chat.turn.wait()
            await settled(app)
            await pilot.pause()
            (record,) = records(app)
            assert record.status == status
            assert app.core is not None
            proposal = await app.core._runtime.approvals.store.get(record.proposal_id)
            expected = {
                "succeeded": ProposalStatus.SUCCEEDED,
                "rejected": ProposalStatus.REJECTED,
                "pending_approval": ProposalStatus.PENDING,
            }[status]
            assert proposal.status is expected
            assert app.query_one("#chat-input").has_focus  # back to typing
            if status == "pending_approval":
                assert "Still waiting for approval" in transcript(app)


@pytest.mark.processes
async def test_approve_and_reject_commands_work_while_a_turn_waits(tmp_path: Path) -> None:
    with FakeOllama([DELETE, {"content": "ok"}]) as fake:
        app = build_app(tmp_path, FILES, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "delete it", until_prompt=True)
            proposal = app.query_one(ApprovalPrompt).proposal.id
            await type_command(pilot, "/reject nosuch")
            assert "no proposal nosuch" in transcript(app)
            await type_command(pilot, f"/reject {proposal} not today")
            chat = app.query_one(ChatPane)
            assert chat.turn is not None
            await chat.turn.wait()
            await pilot.pause()
            assert records(app)[0].status == "rejected"
            assert "not today" in (records(app)[0].error or "")
            assert f"✗ {proposal} files_delete_file rejected" in transcript(app)


async def test_without_ollama_the_app_starts_says_what_to_do_and_call_works(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)  # nothing listens where it points
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        chat = app.query_one(ChatPane)
        message = 'Ollama is not reachable at http://127.0.0.1:9 — start it with "ollama serve"'
        assert message in transcript(app)
        assert chat.border_title == "Chat — qwen3:30b-a3b · Ollama not reachable"
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        assert "✓ get_current_time" in transcript(app)
        await ask(pilot, "hello?")
        assert transcript(app).count(message) == 2
        assert "Traceback" not in transcript(app)


async def test_the_title_follows_ollama_as_requests_find_it_gone_or_back(
    tmp_path: Path,
) -> None:
    """Ollama missing at start, started later: the next answer sets the title ready; stopped
    again, the next failed request says it is not reachable — no /model needed."""
    with socket.socket() as probe:  # a port where nothing listens yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = build_app(tmp_path, ollama=f"http://127.0.0.1:{port}")
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        chat = app.query_one(ChatPane)
        assert chat.border_title == "Chat — qwen3:30b-a3b · Ollama not reachable"
        with FakeOllama([{"content": "back again"}], port=port):
            await ask(pilot, "are you there?")
            assert "back again" in transcript(app)
            # (and how much of the context the answer filled: the fake's counts)
            assert chat.border_title == "Chat — qwen3:30b-a3b · Ollama ready · ctx 2/40k 0%"
        await ask(pilot, "and now?")
        assert chat.border_title == "Chat — qwen3:30b-a3b · Ollama not reachable · ctx 2/40k 0%"


async def test_a_gap_report_is_shown_as_one(tmp_path: Path) -> None:
    made_up = {"content": "Up 12 percent."}  # streamed beside the check, then taken away
    gap = {**gap_answer(("financial_data_api", None)), "after_chat": True}
    with FakeOllama([made_up], gap_replies=[gap]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "How did my portfolio do?")
            view = app.query_one(GapReportView)
            assert view.report.missing_tools == ["financial_data_api"]
            assert "no available tool provides financial_data_api" in transcript(app)
            assert "12 percent" not in transcript(app) and not app.query(AnswerView)


async def test_the_app_reopens_the_last_conversation(tmp_path: Path) -> None:
    script = [
        {"content": "Up 12 percent."},  # asked beside the gap check, dropped
        {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"content": "It is **09:26**."},
    ]
    gap = {**gap_answer(("financial_data_api", None)), "after_chat": True}
    with FakeOllama(script, gap_replies=[gap]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "portfolio?")
            await ask(pilot, "time?")
        again = build_app(tmp_path, ollama=fake.url)
        async with again.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            text = transcript(again)
            assert "Reopened the last conversation" in text
            for seen in (f"{PROMPT}portfolio?", "financial_data_api", f"{PROMPT}time?", "09:26"):
                assert seen in text
            (record,) = records(again)
            assert record.name == "get_current_time" and record.status == "succeeded"
            await type_command(pilot, "/clear")
            assert f"{PROMPT}time?" not in transcript(again)
            assert again.core is not None and again.core._runtime.chat.messages == []


async def test_the_model_asks_and_the_person_answers_in_a_modal(tmp_path: Path) -> None:
    question = {
        "tool_calls": [
            {
                "name": "request_human_input",
                "arguments": {"question": "Which colour?", "choices": ["red", "blue"]},
            }
        ]
    }
    with FakeOllama([question, {"content": "Blue it is."}, question, {"content": "OK."}]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            box = app.query_one("#chat-input", Input)
            box.value = "paint it"
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, HumanInputScreen))
            await pilot.press("2", "enter")  # the second choice
            chat = app.query_one(ChatPane)
            assert chat.turn is not None
            await chat.turn.wait()
            await pilot.pause()
            assert records(app)[0].result == {"question": "Which colour?", "answer": "blue"}
            box.value = "again"
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, HumanInputScreen))
            await pilot.press("escape")
            await chat.turn.wait()
            assert records(app)[1].status == "cancelled"
            assert "chose not to answer" in (records(app)[1].error or "")


async def test_model_think_and_help_commands(tmp_path: Path) -> None:
    models = ["qwen3:30b-a3b", "llama3.2:latest"]
    with FakeOllama([{"content": "hi"}], models=models) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            chat = app.query_one(ChatPane)
            await type_command(pilot, "/model")
            assert "llama3.2:latest, qwen3:30b-a3b (in use)" in transcript(app)
            await type_command(pilot, "/model mistral")
            assert 'model "mistral" is not installed — "ollama pull mistral"' in transcript(app)
            await type_command(pilot, "/model llama3.2")
            await type_command(pilot, "/think on")
            assert chat.border_title == "Chat — llama3.2 · Ollama ready · thinking on"
            await ask(pilot, "hello")
            body = fake.requests[-1]
            assert (body["model"], body["think"]) == ("llama3.2", True)
            await type_command(pilot, "/help")
            for command in ("/approve ID", "/model [NAME]", "/think on|off", "/clear", "Esc"):
                assert command in transcript(app)
            assert app_of(pilot) is app


# -- the answer does not wait for the gap check ------------------------------------------------

HELD = "gap check"


def on_screen(app: DianaApp) -> str:
    """The text of what the terminal shows now."""
    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def test_the_answer_is_on_screen_before_the_gap_check_answers(tmp_path: Path) -> None:
    held = {**gap_answer(("current_time", "get_current_time")), "hold": HELD}
    with FakeOllama([{"content": ["Firstwords ", "and the rest."]}], gap_replies=[held]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            app.query_one("#chat-input", Input).value = "what time is it?"
            await pilot.press("enter")
            turn = app.query_one(ChatPane).turn
            assert turn is not None
            await until(lambda: "Firstwords" in on_screen(app))
            assert turn.is_running  # the check is still held back
            fake.release(HELD)
            await turn.wait()
            await pilot.pause()
            assert app.query_one(AnswerView).source == "Firstwords and the rest."


async def test_a_gap_found_while_the_answer_streams_takes_it_away(tmp_path: Path) -> None:
    held = {**gap_answer(("financial_data_api", None)), "hold": HELD}
    words = [f"made{i}up " for i in range(40)]
    reply = {
        "content": words,
        "delay": 0.1,
        "tool_calls": [{"name": "save_fact", "arguments": {"content": "made up"}}],
    }
    with FakeOllama([reply], gap_replies=[held]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            app.query_one("#chat-input", Input).value = "How did my portfolio do?"
            await pilot.press("enter")
            turn = app.query_one(ChatPane).turn
            assert turn is not None
            await until(lambda: "made0up" in on_screen(app))
            fake.release(HELD)
            await turn.wait()
            await settled(app)
            await pilot.pause()
            assert not app.query(AnswerView) and not app.query(ToolCallLine)
            assert "made0up" not in on_screen(app) and "made0up" not in transcript(app)
            assert app.query_one(GapReportView).report.missing_tools == ["financial_data_api"]
            assert app.core is not None
            assert await app.core._runtime.recent_calls() == []  # no tool ran


# -- /call: the same inline approval, the same suggestions -----------------------------------

DELETE_CALL = '/call files_delete_file {"path": "/srv/old.pdf"}'
# A /call that waited, once run: its run's time and the wait apart, then its output.
RAN_CALL = r"✓ files_delete_file \d+ ms · waited \d+ ms deleted /srv/old\.pdf"


async def called(app: DianaApp) -> int:
    """How many calls reached the files server."""
    assert app.core is not None
    return app.core._runtime.mcp.connections["files"].state.calls


@pytest.mark.processes
@pytest.mark.parametrize(
    ("keys", "status", "outcome"),
    [
        (("a",), ProposalStatus.SUCCEEDED, "✓ approved and run"),
        (("r", "enter"), ProposalStatus.REJECTED, "✗ rejected"),
        (("s",), ProposalStatus.PENDING, "left undecided"),
    ],
)
async def test_a_call_that_needs_approval_gets_the_inline_prompt(
    tmp_path: Path, keys: tuple[str, ...], status: ProposalStatus, outcome: str
) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, DELETE_CALL)
        prompt = app.query_one(ApprovalPrompt)
        assert prompt.has_focus  # the decision is one key away
        text = transcript(app)
        assert "files_delete_file needs your approval" in text and "leave it pending" in text
        assert "✗ files_delete_file" not in text  # not shown as a failure
        assert await called(app) == 0
        for key in keys:
            await pilot.press(key)
            if key == "r":
                await until(lambda: isinstance(app.screen, RejectReasonScreen))
        await until(lambda: prompt.outcome is not None)
        await settled(app)
        await pilot.pause()
        assert app.core is not None
        proposal = await app.core._runtime.approvals.store.get(prompt.proposal.id)
        assert proposal.status is status
        assert outcome in transcript(app)
        assert app.query_one("#chat-input").has_focus  # back to typing
        if status is ProposalStatus.SUCCEEDED:
            assert await called(app) == 1  # run once
            assert re.search(RAN_CALL, transcript(app))
        else:
            assert await called(app) == 0


@pytest.mark.processes
@pytest.mark.parametrize("where", ["approvals pane", "/approve"])
async def test_a_calls_prompt_settles_when_decided_elsewhere(tmp_path: Path, where: str) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, DELETE_CALL)
        prompt = app.query_one(ApprovalPrompt)
        if where == "approvals pane":
            await pilot.press("f3", "a")
        else:
            await type_command(pilot, f"/approve {prompt.proposal.id}")
        await until(lambda: prompt.outcome is not None)
        await settled(app)
        await pilot.pause()
        assert "✓ approved and run" in transcript(app)
        assert re.search(RAN_CALL, transcript(app))
        assert await called(app) == 1


@pytest.mark.processes
async def test_a_call_left_pending_shows_its_outcome_when_diana_approves_it(
    tmp_path: Path,
) -> None:
    """A /call left undecided with s, then approved by `diana approve` in another process:
    its prompt says it was approved and run, not "left undecided"."""
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, DELETE_CALL)
        prompt = app.query_one(ApprovalPrompt)
        await pilot.press("s")
        await until(lambda: prompt.outcome is not None)
        assert "left undecided" in transcript(app)
        approved = await asyncio.to_thread(
            diana, app.paths.config_dir, app.paths.data_dir, "approve", prompt.proposal.id
        )
        assert approved.returncode == 0, approved.stderr
        await until(lambda: prompt.final)
        await pilot.pause()
        assert "✓ approved and run" in transcript(app)
        assert "left undecided" not in transcript(app)
        # Its output, under its prompt, as a /call that waited shows it.
        assert "✓ files_delete_file" in transcript(app)
        after = app.query_one(ChatPane).transcript.children
        heading, output = after[after.index(prompt) + 1 : after.index(prompt) + 3]
        assert "✓ files_delete_file" in str(heading.render())
        assert "deleted /srv/old.pdf" in str(output.render())


@pytest.mark.processes
@pytest.mark.parametrize("where", ["diana approve", "approvals pane", "diana reject"])
async def test_a_models_call_left_pending_follows_a_decision_made_elsewhere(
    tmp_path: Path, where: str
) -> None:
    """The model's call left pending with s, then decided in the Approvals pane or by
    another process: its line, its prompt and the note of what waits tell one story, with
    the call's result (or the person's reason) where the pending line was."""
    with FakeOllama([DELETE, {"content": "It waits for you."}]) as fake:
        app = build_app(tmp_path, FILES, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "delete it", until_prompt=True)
            chat = app.query_one(ChatPane)
            prompt, line = app.query_one(ApprovalPrompt), app.query_one(ToolCallLine)
            await pilot.press("s")
            assert chat.turn is not None
            await chat.turn.wait()
            await pilot.pause()
            assert "⏸" in line.header().plain and "Still waiting for approval" in transcript(app)
            assert "⏸ pending approval · waited" in line.header().plain  # not a run time
            config_dir, data_dir, proposal = (
                app.paths.config_dir,
                app.paths.data_dir,
                prompt.proposal.id,
            )
            if where == "approvals pane":
                await pilot.press("f3", "a")
            else:
                verb = (
                    ["approve"] if where == "diana approve" else ["reject", "--reason", "not now"]
                )
                decided = await asyncio.to_thread(diana, config_dir, data_dir, *verb, proposal)
                assert decided.returncode == 0, decided.stderr
            await until(lambda: prompt.final and line.record is not None)
            await pilot.pause()
            text, header = transcript(app), line.header().plain
            assert "⏸" not in header and "pending" not in header
            assert "Still waiting for approval" not in text and "left undecided" not in text
            assert line.record is not None
            if where == "diana reject":
                assert "✗ rejected · waited" in header
                assert "✗ rejected: not now" in text
                assert "approved" not in text
            else:
                assert line.record.status == "succeeded"
                assert line.record.result == "deleted /srv/old.pdf"
                assert "deleted /srv/old.pdf" in header and "· waited" in header
                assert text.count("✓ approved and run") == 1


@pytest.mark.processes
async def test_the_inline_prompt_follows_an_approved_call_while_it_runs(tmp_path: Path) -> None:
    """After a, a slow call's prompt says it is approved and running, offers no a/r keys, and
    the typing goes back to the input; when it ends, its outcome."""
    slow = {"tool_calls": [{"name": "files_slow", "arguments": {"seconds": 3}}]}
    with FakeOllama([slow, {"content": "Done."}]) as fake:
        app = build_app(tmp_path, FILES, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "take your time", until_prompt=True)
            prompt = app.query_one(ApprovalPrompt)
            line = app.query_one(ToolCallLine)
            assert "waiting for approval" in line.header().plain
            await pilot.press("a")
            await until(lambda: prompt.outcome is not None)
            await pilot.pause()
            chat = app.query_one(ChatPane)
            assert chat.turn is not None and chat.turn.is_running  # the call still runs
            assert "✓ approved — running…" in transcript(app)
            assert "waiting for your decision" not in transcript(app)
            assert "running…" in line.header().plain
            keys = {b.binding.key for b in app.active_bindings.values() if b.enabled}
            assert "a" not in keys and "r" not in keys
            assert app.query_one("#chat-input").has_focus
            await chat.turn.wait()
            await pilot.pause()
            assert "✓ approved and run" in transcript(app)


@pytest.mark.processes
async def test_an_unknown_tool_in_call_gets_the_closest_names(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)  # not settled: the files server may still be connecting
        await type_command(pilot, "/call files_delete_fil")
        await type_command(pilot, "/call save_facts")
        text = transcript(app)
        assert "unknown tool files_delete_fil; did you mean files_delete_file" in text
        assert "unknown tool save_facts; did you mean save_fact?" in text


# -- a bounded transcript --------------------------------------------------------------------

PARAGRAPHS = 60


def long_answer(n: int) -> dict[str, Any]:
    return {"content": "\n\n".join(f"Paragraph {i} of answer {n}." for i in range(PARAGRAPHS))}


async def test_only_the_answers_near_the_view_keep_their_blocks(tmp_path: Path) -> None:
    answers = 6
    with FakeOllama([long_answer(n) for n in range(answers)]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "answer 0")
            first_block = weakref.ref(app.query_one(AnswerView).query(MarkdownBlock).first())
            for n in range(1, answers):
                await ask(pilot, f"answer {n}")
            views = list(app.query(AnswerView))
            assert len(views) == answers

            def blocks(view: AnswerView) -> int:
                return len(view.query(MarkdownBlock))

            # At the end of the transcript only the last answer (a screen tall at least)
            # is drawn; the others keep their text and their height, not their widgets.
            await until(lambda: sum(blocks(v) > 0 for v in views) == 1)
            assert blocks(views[-1]) == PARAGRAPHS
            assert len(app.query(MarkdownBlock)) == PARAGRAPHS
            gc.collect()
            assert first_block() is None  # let go of, not just taken off the screen
            heights = [v.outer_size.height for v in views]
            assert min(heights) >= PARAGRAPHS
            chat = app.query_one(ChatPane)
            assert all(
                f"Paragraph {PARAGRAPHS - 1} of answer {n}." in chat.plain_text()
                for n in range(answers)
            )

            chat.transcript.scroll_home(animate=False)  # back to the first answer
            await until(lambda: blocks(views[0]) == PARAGRAPHS and blocks(views[-1]) == 0)
            await pilot.pause()
            assert "Paragraph 0 of answer 0." in on_screen(app)
            assert [v.outer_size.height for v in views] == heights  # nothing moved


STORED = (
    "A first paragraph of plain words " + "that wrap " * 20 + "at the end.\n\nA second  one,"
    "\nwith a soft break, *emphasis*, **strong** and ~~struck~~ words.\n\nThird.",
    "One line.",
)


async def test_a_stored_answer_of_prose_is_drawn_as_markdown_draws_it() -> None:
    """A reopened conversation draws an answer of prose as one widget: the same screen as
    Markdown's blocks, paragraph breaks, styles and the blank row under it included; an
    answer with a list, a heading, code or a link is left to Markdown."""
    from diana.tui import styles_dir
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll

    class Host(App[None]):
        CSS_PATH = str(styles_dir() / "app.tcss")

        def __init__(self, settled: bool) -> None:
            super().__init__()
            self.settled = settled

        def compose(self) -> ComposeResult:
            with VerticalScroll(id="chat-transcript"):
                for text in STORED:
                    drawn = prose(text)
                    assert drawn is not None
                    yield SettledAnswer(text, drawn) if self.settled else AnswerView(text)

    async def drawn(settled: bool) -> str:
        app = Host(settled)
        async with app.run_test(size=(60, 30)) as pilot:
            await until(lambda: all(a.children for a in app.query(AnswerView)))
            await pilot.pause()
            svg = app.export_screenshot()
        svg = re.sub(r"terminal-\d+", "terminal", svg)  # (a hash of what it was drawn from)
        return re.sub(r'<rect [^>]*width="0"[^>]*/>', "", svg)  # (an empty run of text)

    assert await drawn(settled=True) == await drawn(settled=False)
    for markdown in ("- a list", "# A heading", "Some `code`", "[a link](https://x.org)", "---"):
        assert prose(markdown) is None


def test_an_answer_is_drawn_less_often_while_keys_are_typed() -> None:
    """At a fast model's pace, every append of the answer lays the screen out again: while
    the person types, the answer waits longer between appends, so a key waits only for its
    own redraw."""
    answer = AnswerView()
    answer._written_at = time.monotonic() - AnswerView.FRAME
    assert answer._due_in() <= 0  # due
    answer.typed()
    assert AnswerView.TYPING - 0.01 < answer._due_in() <= AnswerView.TYPING  # a pause first
    answer._written_at = time.monotonic() - AnswerView.TYPING_FRAME
    assert answer._due_in() <= 0  # but not longer than this without an append


@pytest.mark.processes
async def test_a_resource_named_in_a_message_goes_with_it_and_is_shown(tmp_path: Path) -> None:
    with FakeOllama([{"content": "Noted."}]) as fake:
        app = build_app(tmp_path, {"files": fixture_server()}, ollama=fake.url)
        async with app.run_test(size=(120, 35)) as pilot:
            await settle(pilot)
            await ask(pilot, "Summarise @files:fixture://greeting")
            asked = [r for r in fake.requests if not r.get("format")][-1]
            (user,) = [m for m in asked["messages"] if m["role"] == "user"]
            assert user["content"].endswith("hello from the fixture\n</resource>")
            assert "📎 files:fixture://greeting (text/plain, 22 bytes)" in on_screen(app)

            await ask(pilot, "Read @files:fixture://nope")
            assert "Not sent: MCP server files refused reading fixture://nope" in on_screen(app)
            assert app.query_one("#chat-input", Input).value == "Read @files:fixture://nope"

        # Reopened, the message is shown as it was live: what was typed, then one line for
        # what went with it, never the resource's text.
        again = build_app(tmp_path, {"files": fixture_server()}, ollama=fake.url)
        async with again.run_test(size=(120, 35)) as pilot:
            await settle(pilot)
            text = transcript(again)
            assert f"{PROMPT}Summarise @files:fixture://greeting" in text
            assert "📎 files:fixture://greeting (text/plain, 22 bytes)" in text
            assert "hello from the fixture" not in text and "<resource" not in text


@pytest.mark.processes
async def test_a_servers_prompt_is_sent_to_the_model_with_its_arguments(tmp_path: Path) -> None:
    with FakeOllama([{"content": "Looks fine."}, {"content": "Fine too."}]) as fake:
        app = build_app(tmp_path, {"files": fixture_server()}, ollama=fake.url)
        async with app.run_test(size=(120, 35)) as pilot:
            await settle(pilot)
            chat = app.query_one(ChatPane)

            def asked() -> str:
                request = [r for r in fake.requests if not r.get("format")][-1]
                (user,) = [m for m in request["messages"] if m["role"] == "user"][-1:]
                return str(user["content"])

            await type_command(pilot, '/files:review code="x = 1" focus=style')
            assert chat.turn is not None
            await chat.turn.wait()
            assert asked() == "Review this code for style:\nx = 1"

            # A required argument missing: a form for the arguments, the given ones filled in.
            chat.query_one("#chat-input", Input).value = "/files:review focus=names"
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, ElicitationScreen), within=20)
            await pilot.pause()
            form = app.screen
            assert form.box.border_title == "Prompt files:review"
            assert form.query_one("#elicit-1", Input).value == "names"
            form.query_one("#elicit-0", Input).value = "y = 2"
            await pilot.press("ctrl+s")
            await until(lambda: chat.turn is not None and chat.turn.is_finished, within=20)
            await until(lambda: asked() == "Review this code for names:\ny = 2", within=20)

            await type_command(pilot, "/files:review zip=1")
            assert "prompt review has no argument 'zip' (it takes: code, focus)" in on_screen(app)
            await type_command(pilot, "/files:nosuch")
            assert "MCP server files has no prompt 'nosuch' (it has: review, hello)" in on_screen(
                app
            )


def test_a_tool_calls_line_says_where_the_call_is_before_its_arguments() -> None:
    """A narrow terminal cuts a line from its end: the status, progress and latency come
    before the arguments, the result last."""
    from diana.core.chat.answer import ToolCallRecord

    line = ToolCallLine("files_copy", {"source": "/a/very/long/path/" * 4, "to": "/b"})
    line.show_progress("3 of 10 · copying")
    running = line.header().plain
    assert running.index("running… 3 of 10 · copying") < running.index('{"source"')
    line.wait_for_decision()
    waiting = line.header().plain
    assert waiting.index("waiting for approval") < waiting.index('{"source"')
    record = ToolCallRecord(
        name="files_copy", arguments={}, status="succeeded", result="copied", latency_ms=12
    )
    line.finish(record)
    done = line.header().plain
    assert done.index("12 ms") < done.index('{"source"') < done.index("copied")


@pytest.mark.processes
async def test_diana_ask_never_takes_over_the_apps_conversation(tmp_path: Path) -> None:
    """A one-off `diana ask` between two starts of the app keeps its own conversation: the
    app reopens the one it had; `diana ask --continue` goes on with the command's own."""
    replies = [{"content": "The app's answer."}, {"content": "The command's answer."}]
    with FakeOllama([*replies, {"content": "Still the command's."}]) as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            await ask(pilot, "asked in the app")
        config_dir, data_dir = app.paths.config_dir, app.paths.data_dir
        asked = await asyncio.to_thread(diana, config_dir, data_dir, "ask", "asked once")
        assert asked.returncode == 0, asked.stderr
        again = await asyncio.to_thread(
            diana, config_dir, data_dir, "ask", "--continue", "asked again"
        )
        assert again.returncode == 0, again.stderr
        told = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "user"]
        assert told == ["asked once", "asked again"]  # its own, not the app's
        reopened = build_app(tmp_path, ollama=fake.url)
        async with reopened.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            text = transcript(reopened)
            assert "Reopened the last conversation (2 messages)" in text
            assert f"{PROMPT}asked in the app" in text and "The app's answer." in text
            assert "asked once" not in text and "command's answer" not in text
