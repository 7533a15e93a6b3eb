"""The model says how sure it is of each call: a reversible-with-delay call it is sure of
(0.85 or more) runs at once, one it is less sure of (or silent about) waits for a person;
an irreversible call always waits. Through the chat, against the fake Ollama."""

from __future__ import annotations

from pathlib import Path

import pytest
from diana.core.approvals.proposal import ProposalStatus

from .chat_turns import Events, call, chat_requests, start
from .fixtures.fake_ollama import FakeOllama
from .structured_log import log_events


def daily_notes(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in sorted((tmp_path / "vault").rglob("*.md")))


async def test_a_call_the_model_is_sure_of_runs_and_one_below_085_waits(
    tmp_path: Path, config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(
        call("obsidian_log", entry="Finished the report", confidence=0.9),
        {"content": "Logged."},
        call("obsidian_log", entry="Exactly sure", confidence=0.85),
        {"content": "Logged."},
        call("obsidian_log", entry="Not so sure", confidence=0.84),
        {"content": "It waits for you."},
        call("obsidian_log", entry="Said nothing"),
        {"content": "It waits for you."},
    )
    async with await start(config_dir, data_dir, fake.url) as runtime:
        sure = await runtime.chat.run_turn("log that I finished the report", Events())
        edge = await runtime.chat.run_turn("log this", Events())
        events = Events()
        unsure = await runtime.chat.run_turn("log this too", events, wait_for_decisions=False)
        silent = await runtime.chat.run_turn("and this", Events(), wait_for_decisions=False)
        proposals = {p.arguments["entry"]: p for p in await runtime.approvals.store.select()}

    for outcome in (sure, edge):
        assert outcome.response is not None and outcome.pending == []
        (record,) = outcome.response.tool_calls
        assert record.status == "succeeded", record.error
    assert sure.response is not None and sure.response.tool_calls[0].confidence == 0.9
    # The tool got its own arguments: the confidence was the gate's, not the tool's.
    assert sure.response.tool_calls[0].arguments == {"entry": "Finished the report"}
    notes = daily_notes(tmp_path)
    assert "Finished the report" in notes and "Exactly sure" in notes

    for outcome in (unsure, silent):
        assert outcome.response is not None and len(outcome.pending) == 1
        assert outcome.response.tool_calls[0].status == "pending_approval"
    assert "Not so sure" not in daily_notes(tmp_path)
    assert proposals["Not so sure"].confidence == 0.84
    assert proposals["Not so sure"].arguments == {"entry": "Not so sure"}
    assert proposals["Not so sure"].status is ProposalStatus.PENDING
    assert proposals["Said nothing"].confidence is None

    # The model is offered the argument, and told what it means.
    first = chat_requests(fake)[0]
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert offered["obsidian_log"]["properties"]["confidence"]["type"] == "number"
    assert "0.85" in first["messages"][0]["content"]
    stated = log_events(data_dir, "llm.tool_call.confidence")
    logged = [(e["tool"], e["confidence"]) for e in stated]
    assert logged == [("obsidian_log", 0.9), ("obsidian_log", 0.85), ("obsidian_log", 0.84)]


async def test_a_stated_confidence_is_clamped_and_never_lets_an_irreversible_call_run(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(
        call("obsidian_log", entry="Very sure", confidence=7),
        {"content": "Logged."},
        call("obsidian_log", entry="Negative", confidence=-3),
        {"content": "Waiting."},
        call("code_execution", language="python", code="print(1)", confidence=1.0),
        {"content": "Waiting."},
    )
    async with await start(config_dir, data_dir, fake.url) as runtime:
        over = await runtime.chat.run_turn("log it", Events())
        under = await runtime.chat.run_turn("log it", Events(), wait_for_decisions=False)
        code = await runtime.chat.run_turn("run it", Events(), wait_for_decisions=False)

    assert over.response is not None and over.response.tool_calls[0].status == "succeeded"
    assert over.response.tool_calls[0].confidence == 1.0
    assert under.response is not None and under.response.tool_calls[0].confidence == 0.0
    assert under.response.tool_calls[0].status == "pending_approval"
    assert code.response is not None and code.response.tool_calls[0].status == "pending_approval"
    logged = log_events(data_dir, "llm.tool_call.confidence")
    assert [(e["stated"], e["confidence"]) for e in logged] == [
        ("7", 1.0),
        ("-3", 0.0),
        ("1.0", 1.0),
    ]


def test_only_a_number_is_a_confidence() -> None:
    from diana.core.chat.prompt import clamp_confidence

    assert clamp_confidence(0.5) == 0.5
    assert clamp_confidence(" 0.9 ") == 0.9
    assert clamp_confidence(2) == 1.0
    assert clamp_confidence(float("inf")) == 1.0
    for nothing in (None, True, "sure", float("nan"), {"a": 1}, [0.9]):
        assert clamp_confidence(nothing) is None


@pytest.mark.processes
async def test_a_call_waiting_for_want_of_confidence_says_so_wherever_it_is_shown(
    tmp_path: Path, config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    """The proposal's reason names the model's confidence and the bar it missed: the
    Approvals pane, its detail, `diana proposals`/`show` and the chat's prompt all show it."""
    from .commands import run_diana

    fake.add(
        call("obsidian_log", entry="Not so sure", confidence=0.6),
        {"content": "It waits for you."},
        call("obsidian_log", entry="Said nothing"),
        {"content": "It waits for you."},
    )
    async with await start(config_dir, data_dir, fake.url) as runtime:
        await runtime.chat.run_turn("log this", Events(), wait_for_decisions=False)
        await runtime.chat.run_turn("and this", Events(), wait_for_decisions=False)
        proposals = {p.arguments["entry"]: p for p in await runtime.approvals.store.select()}

    unsure = proposals["Not so sure"]
    assert unsure.reason.endswith("; the model's confidence 0.6 is below 0.85"), unsure.reason
    assert proposals["Said nothing"].reason.endswith(
        "; no confidence was stated (below 0.85 waits)"
    )
    shown = await run_diana(config_dir, data_dir, "show", unsure.id)
    assert "the model's confidence 0.6 is below 0.85" in shown.stdout, shown.stderr
