"""The chat session against a fake Ollama over real HTTP, with the real ollama client, real
MCP servers and the real database: tool rounds, approvals inside a turn, tool gaps, Ollama's
failures, cancelling, persistence, request_human_input and the rounds limit."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.core.chat.conversation import Kind
from diana.core.chat.gaps import CAPABILITIES_SCHEMA
from diana.core.chat.turn_events import (
    ApprovalPending,
    Delta,
    GapFound,
    Progress,
    ToolCallFinished,
    ToolCallStarted,
    TurnCancelled,
    TurnFailed,
    TurnFinished,
    TurnOutcome,
    TurnStarted,
)
from diana.core.ports import Ports
from diana.core.runtime import Profile, Runtime

from .chat_turns import Events, call, chat_requests, configure, start, tool_messages
from .configs import write_servers as with_servers
from .conftest import START
from .fixtures.fake_ollama import FakeOllama
from .network import closed_port

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
MCP_SERVER_TIME = str(Path(sys.executable).parent / "mcp-server-time")
BUILTIN_TOOLS = [
    "code_execution",
    "get_current_time",
    "mcp_cancel_subagent_work",
    "mcp_check_subagent_status",
    "mcp_list_available_tools",
    "mcp_request_server_addition",
    "mcp_request_server_change",
    "mcp_request_server_removal",
    "mcp_search_servers",
    "mcp_test_server",
    "obsidian_log",
    "request_human_input",
    "save_fact",
    "search_memory",
]


def files_server(config_dir: Path) -> None:
    """The fixture MCP server as "files": its delete_file is destructive, so it needs approval."""
    with_servers(config_dir, {"files": {"command": sys.executable, "args": [FIXTURE]}})


# -- tool rounds ---------------------------------------------------------------------------------


async def test_a_builtin_tool_call_round_trip(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(call("get_current_time", timezone="UTC"), {"content": ["It is ", "09:26 UTC."]})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("what time is it?", events)
        tools = [d.name for d in runtime.orchestrator.model_tools()]
        calls = await runtime.recent_calls()
        stored = [(m.role, m.tool_name) for m in runtime.chat.messages]

    assert outcome.problem is None and outcome.gap is None and outcome.pending == []
    response = outcome.response
    assert response is not None
    assert response.answer == "It is 09:26 UTC."
    (record,) = response.tool_calls
    assert (record.name, record.arguments, record.status) == (
        "get_current_time",
        {"timezone": "UTC"},
        "succeeded",
    )
    assert record.result["iso"] == START.isoformat()  # the clock agent really ran
    assert record.result["timezone"] == "UTC"
    assert response.confidence == 0.9
    assert "get_current_time succeeded" in response.reasoning

    assert events.kinds() == [
        "TurnStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "Delta",
        "Delta",
        "TurnFinished",
    ]
    assert events.of(TurnStarted)[0].correlation_id == outcome.correlation_id
    assert "".join(d.text for d in events.of(Delta)) == "It is 09:26 UTC."

    first, second = chat_requests(fake)
    assert first["stream"] is True
    assert first["messages"][0]["role"] == "system"
    assert "You are DIANA" in first["messages"][0]["content"]
    assert ", ".join(tools) in first["messages"][0]["content"]
    assert first["messages"][1:] == [{"role": "user", "content": "what time is it?"}]
    assert sorted(t["function"]["name"] for t in first["tools"]) == tools == BUILTIN_TOOLS
    assert tool_messages(first) == []
    (told,) = tool_messages(second)
    assert told["tool_name"] == "get_current_time"
    assert json.loads(told["content"]) == {"ok": True, "result": record.result}
    assert second["messages"][2]["tool_calls"] == [
        {"function": {"name": "get_current_time", "arguments": {"timezone": "UTC"}}}
    ]

    (logged,) = calls
    assert logged.tool == "get_current_time"
    assert logged.correlation_id == outcome.correlation_id
    assert (logged.origin, logged.status) == ("chat", "succeeded")
    assert logged.result == record.result
    assert stored == [
        ("user", None),
        ("assistant", None),
        ("tool", "get_current_time"),
        ("assistant", None),
    ]


@pytest.mark.processes
async def test_a_tool_call_through_a_real_mcp_server(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    with_servers(
        config_dir,
        {"time": {"command": MCP_SERVER_TIME, "args": ["--local-timezone", "UTC"]}},
    )
    fake.add(call("time_get_current_time", timezone="UTC"), {"content": "It is late."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("what time is it in UTC?", Events())
        calls = await runtime.recent_calls()

    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert (record.name, record.status) == ("time_get_current_time", "succeeded")
    assert record.result["timezone"] == "UTC"
    assert "datetime" in record.result
    first, second = chat_requests(fake)
    assert "time_get_current_time" in {t["function"]["name"] for t in first["tools"]}
    (told,) = tool_messages(second)
    assert told["tool_name"] == "time_get_current_time"
    assert json.loads(told["content"]) == {"ok": True, "result": record.result}
    assert [(c.tool, c.origin, c.correlation_id) for c in calls] == [
        ("time_get_current_time", "chat", outcome.correlation_id)
    ]


# -- approvals inside a turn ---------------------------------------------------------------------


DELETE = call("files_delete_file", path="/tmp/notes.txt")


@pytest.mark.processes
async def test_an_approved_call_runs_and_the_turn_goes_on(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": "Deleted."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("delete my notes", events))
        pending = await events.wait_for(ApprovalPending)
        proposal = pending.proposal
        assert proposal.tool == "files_delete_file"
        assert proposal.arguments == {"path": "/tmp/notes.txt"}
        assert (proposal.status, proposal.origin) == (ProposalStatus.PENDING, "chat")
        assert runtime.mcp.connections["files"].state.calls == 0  # nothing ran yet
        assert runtime.chat.waiting_for_decision and not turn.done()

        await runtime.approvals.approve(proposal.id, by="test")
        outcome = await asyncio.wait_for(turn, 10)
        stored = await runtime.approvals.store.get(proposal.id)
        calls = await runtime.recent_calls()

    assert proposal.correlation_id == outcome.correlation_id
    assert outcome.pending == []
    assert outcome.response is not None and outcome.response.answer == "Deleted."
    (record,) = outcome.response.tool_calls
    assert (record.status, record.result, record.proposal_id) == (
        "succeeded",
        "deleted /tmp/notes.txt",
        proposal.id,
    )
    assert stored.status is ProposalStatus.SUCCEEDED
    (told,) = tool_messages(chat_requests(fake)[-1])
    assert json.loads(told["content"]) == {"ok": True, "result": "deleted /tmp/notes.txt"}
    assert [(c.status, c.origin) for c in calls] == [
        ("approved", "chat"),  # held, then approved: its run is the next row
        ("succeeded", f"proposal {proposal.id}"),
    ]
    assert {c.correlation_id for c in calls} == {outcome.correlation_id}


@pytest.mark.processes
async def test_a_rejected_call_never_runs_and_the_model_is_told(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": "You rejected it, so nothing was deleted."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("delete my notes", events))
        proposal = (await events.wait_for(ApprovalPending)).proposal
        await runtime.approvals.reject(proposal.id, by="test", reason="not that file")
        outcome = await asyncio.wait_for(turn, 10)
        ran = runtime.mcp.connections["files"].state.calls

    assert ran == 0
    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert (record.status, record.result, record.error_code) == ("rejected", None, "rejected")
    assert f"the person rejected this call (proposal {proposal.id}): not that file" == record.error
    assert outcome.response.confidence == 0.0
    (told,) = tool_messages(chat_requests(fake)[-1])
    assert json.loads(told["content"]) == {"ok": False, "status": "rejected", "error": record.error}


@pytest.mark.processes
async def test_send_on_leaves_the_proposal_pending_and_says_so(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": "It is waiting for your approval."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        assert runtime.chat.send_on() is False  # no turn is waiting
        turn = asyncio.create_task(runtime.chat.run_turn("delete my notes", events))
        proposal = (await events.wait_for(ApprovalPending)).proposal
        assert runtime.chat.waiting_for_decision
        assert runtime.chat.send_on() is True
        outcome = await asyncio.wait_for(turn, 10)
        stored = await runtime.approvals.store.get(proposal.id)
        assert not runtime.chat.waiting_for_decision

    assert outcome.pending == [proposal.id]
    assert stored.status is ProposalStatus.PENDING
    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert (record.status, record.proposal_id) == ("pending_approval", proposal.id)
    told = json.loads(tool_messages(chat_requests(fake)[-1])[0]["content"])
    assert (told["ok"], told["status"]) == (False, "pending_approval")
    assert told["proposal"] == proposal.id
    assert "has NOT run" in told["note"]


@pytest.mark.processes
async def test_without_waiting_for_decisions_the_turn_goes_on_at_once(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": "It is waiting for your approval."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        async with asyncio.timeout(10):
            outcome = await runtime.chat.run_turn(
                "delete my notes", events, wait_for_decisions=False
            )
        (pending,) = events.of(ApprovalPending)
        stored = await runtime.approvals.store.get(pending.proposal.id)

    assert outcome.pending == [pending.proposal.id]
    assert stored.status is ProposalStatus.PENDING
    assert outcome.response is not None
    assert outcome.response.answer == "It is waiting for your approval."
    assert [r.status for r in outcome.response.tool_calls] == ["pending_approval"]
    assert json.loads(tool_messages(chat_requests(fake)[-1])[0]["content"])["status"] == (
        "pending_approval"
    )


# -- tool gaps -----------------------------------------------------------------------------------


def capabilities(*pairs: tuple[str, str | None]) -> dict[str, Any]:
    """A gap-check reply naming capabilities and the tools the model would use."""
    listed = [{"name": name, "tool": tool} for name, tool in pairs]
    return {"content": json.dumps({"capabilities": listed})}


@pytest.mark.parametrize("tool", [None, "stock_quotes"], ids=["no-tool", "made-up-tool"])
async def test_a_missing_capability_is_a_gap_and_nothing_is_attempted(
    config_dir: Path, data_dir: Path, fake: FakeOllama, tool: str | None
) -> None:
    prompt = "what is the ACME share price right now?"
    fake.add_gap({**capabilities(("financial_data_api", tool)), "after_chat": True})
    # The answer asked for beside the check: made up, and calling a tool. Both are dropped.
    fake.add({"content": "ACME is at 42.", **call("save_fact", content="ACME 42")})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn(prompt, events)
        stored = runtime.chat.messages
        calls = await runtime.recent_calls()

    assert outcome.response is None and outcome.problem is None
    gap = outcome.gap
    assert gap is not None
    assert gap.missing_tools == ["financial_data_api"]
    assert gap.attempted_task == prompt
    assert gap.existing_tools_checked == BUILTIN_TOOLS
    assert events.of(GapFound) == [GapFound(gap)]
    assert events.of(TurnFinished) == events.of(ToolCallStarted) == []
    assert calls == []  # no tool ran
    (check,) = [r for r in fake.requests if r.get("format")]
    assert check["format"] == CAPABILITIES_SCHEMA and check["stream"] is False
    assert check["messages"][-1] == {"role": "user", "content": prompt}
    assert [(m.role, m.kind) for m in stored] == [("user", Kind.CHAT), ("assistant", Kind.GAP)]
    assert stored[-1].content == gap.summary()
    assert "financial_data_api" in gap.summary()


# The gap check is one more request to the model; the answer does not wait for it. A check
# the fake holds back shows what may happen meanwhile (the answer) and what may not (a tool).

HELD = "gap check"


def held(*pairs: tuple[str, str | None]) -> dict[str, Any]:
    """A gap-check reply that waits until the test releases it."""
    return {**capabilities(*pairs), "hold": HELD}


async def test_the_answer_streams_while_the_gap_check_runs(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap(held(("current_time", "get_current_time")))
    fake.add({"content": ["It is ", "late."]})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("what time is it?", events))
        first = await events.wait_for(Delta, within=5)  # while the check is held back
        assert first.text == "It is "
        assert not turn.done()
        fake.release(HELD)
        outcome = await asyncio.wait_for(turn, 10)
    assert outcome.gap is None
    assert outcome.response is not None and outcome.response.answer == "It is late."


async def test_the_model_is_asked_before_the_message_is_stored(
    config_dir: Path, data_dir: Path, fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storing the person's message does not stand between Enter and the model: the answer
    streams while it is stored, and the conversation is stored whole and in order."""
    fake.add({"content": ["It is ", "late."]})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        store = runtime.chat.conversations
        stored = store.append
        release = asyncio.Event()

        async def slow_append(*args: Any) -> None:
            await release.wait()
            await stored(*args)

        monkeypatch.setattr(store, "append", slow_append)
        turn = asyncio.create_task(runtime.chat.run_turn("what time is it?", events))
        first = await events.wait_for(Delta, within=5)  # the message is not stored yet
        assert first.text == "It is "
        release.set()
        outcome = await asyncio.wait_for(turn, 10)
        assert runtime.chat.conversation_id is not None
        kept = await store.messages(runtime.chat.conversation_id)
    assert outcome.response is not None and outcome.response.answer == "It is late."
    assert [(m.role, m.content) for m in kept] == [
        ("user", "what time is it?"),
        ("assistant", "It is late."),
    ]


async def test_tool_calls_wait_until_the_gap_check_says_there_is_no_gap(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap(held(("current_time", "get_current_time")))
    fake.add(call("get_current_time", timezone="UTC"), {"content": "09:26."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("what time is it?", events))
        await events.wait_for(Progress, within=5)  # the check started
        waiting = await events.wait_for(Progress, within=5)  # the answer is in; its call waits
        assert waiting.text == "checking which tools this needs"
        assert events.of(ToolCallStarted) == []
        assert await runtime.recent_calls() == []
        fake.release(HELD)
        outcome = await asyncio.wait_for(turn, 10)
    assert outcome.response is not None
    assert [r.status for r in outcome.response.tool_calls] == ["succeeded"]


async def test_a_gap_found_after_the_answer_asked_for_a_tool_runs_nothing(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap(held(("send_email", None)))
    fake.add({"content": "Sending it.", **call("save_fact", content="sent")})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("email Ada", events))
        await events.wait_for(Progress, within=5)
        await events.wait_for(Progress, within=5)  # the answer and its call are in
        fake.release(HELD)
        outcome = await asyncio.wait_for(turn, 10)
        calls = await runtime.recent_calls()
        stored = [(m.role, m.kind) for m in runtime.chat.messages]
    assert outcome.gap is not None and outcome.gap.missing_tools == ["send_email"]
    assert outcome.response is None
    assert calls == [] and events.of(ToolCallStarted) == []
    assert stored == [("user", Kind.CHAT), ("assistant", Kind.GAP)]


async def test_a_gap_found_while_the_answer_streams_stops_it(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap(held(("financial_data_api", None)))
    words = [f"word{i} " for i in range(40)]
    fake.add({"content": words, "delay": 0.1, **call("save_fact", content="made up")})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("how is my portfolio?", events))
        await events.wait_for(Delta, within=5)
        fake.release(HELD)
        outcome = await asyncio.wait_for(turn, 10)
        calls = await runtime.recent_calls()
        stored = [(m.role, m.kind) for m in runtime.chat.messages]
        fake.add({"content": "Hello again."})
        after = await runtime.chat.run_turn("hi", Events())
    assert outcome.gap is not None and outcome.response is None
    kinds = events.kinds()
    assert kinds[-1] == "GapFound" and "TurnFinished" not in kinds
    assert len(events.of(Delta)) < len(words)  # stopped, not streamed to its end
    assert calls == [] and events.of(ToolCallStarted) == []
    assert stored == [("user", Kind.CHAT), ("assistant", Kind.GAP)]
    # The dropped answer is not in what the model is sent next.
    assert after.response is not None and after.response.answer == "Hello again."
    sent = chat_requests(fake)[-1]["messages"][1:]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert "word0" not in json.dumps(sent)


async def test_a_capability_a_real_tool_covers_is_not_a_gap(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap(capabilities(("current_time", "get_current_time")))
    fake.add({"content": "Let me look."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("what time is it?", Events())
    assert outcome.gap is None
    assert outcome.response is not None and outcome.response.answer == "Let me look."
    assert len(chat_requests(fake)) == 1


async def test_a_malformed_gap_answer_does_not_block_the_turn(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add_gap({"content": "I think you need a stock API"})
    fake.add({"content": "Hello."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("hi", Events())
    assert outcome.gap is None and outcome.problem is None
    assert outcome.response is not None and outcome.response.answer == "Hello."
    assert len(fake.requests) == 2 and len(chat_requests(fake)) == 1


# -- Ollama's problems ---------------------------------------------------------------------------


async def next_turn_works(runtime: Runtime, fake: FakeOllama, failure: str) -> None:
    """After a failure the session answers again, and the model never sees the error."""
    fake.add({"content": "Back again."})
    outcome = await runtime.chat.run_turn("are you there?", Events())
    assert outcome.problem is None
    assert outcome.response is not None and outcome.response.answer == "Back again."
    sent = chat_requests(fake)[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": "are you there?"}
    assert all(failure not in m["content"] for m in sent)


def failed(outcome: TurnOutcome, events: Events) -> str:
    assert outcome.response is None and outcome.problem is not None
    assert events.of(TurnFailed) == [TurnFailed(outcome.problem)]
    assert events.of(TurnFinished) == []
    return outcome.problem.message


async def test_nothing_listening_is_named_with_the_fix(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")  # as people write it: no scheme
    events = Events()
    async with await start(config_dir, data_dir, None) as runtime:
        outcome = await runtime.chat.run_turn("hi", events)
        stored = runtime.chat.messages
    message = failed(outcome, events)
    assert message == (
        f'Ollama is not reachable at http://127.0.0.1:{port} — start it with "ollama serve"'
    )
    assert [e.retry for e in events.of(Progress)] == [False]  # not retried
    assert (stored[-1].kind, stored[-1].content) == (Kind.ERROR, message)


async def test_a_model_that_is_not_installed_says_how_to_pull_it(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    events = Events()
    async with await start(config_dir, data_dir, fake.url, model="x") as runtime:
        outcome = await runtime.chat.run_turn("hi", events)
        assert failed(outcome, events) == 'model "x" is not installed — "ollama pull x"'
        runtime.chat.model = "qwen3:30b-a3b"
        await next_turn_works(runtime, fake, "ollama pull")


async def test_a_hung_ollama_times_out_with_the_configured_wait(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"hang": True})
    events = Events()
    async with await start(config_dir, data_dir, fake.url, timeout=0.5) as runtime:
        async with asyncio.timeout(5):
            outcome = await runtime.chat.run_turn("hi", events)
        message = failed(outcome, events)
        assert f"Ollama at {fake.url} did not answer within 0.5 s" in message
        assert "llm.timeout" in message
        assert len(chat_requests(fake)) == 1  # a timeout is not tried again
        await next_turn_works(runtime, fake, "did not answer")


async def test_two_503s_are_retried_and_the_turn_answers(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"status": 503}, {"status": 503}, {"content": "Finally."})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("hi", events)
    assert outcome.problem is None
    assert outcome.response is not None and outcome.response.answer == "Finally."
    retries = [e.text for e in events.of(Progress) if e.retry]
    assert len(retries) == 2
    assert "(HTTP 503)" in retries[0] and retries[0].endswith("trying again (1 of 2)")
    assert retries[1].endswith("trying again (2 of 2)")
    assert len(chat_requests(fake)) == 3


async def test_three_503s_fail_the_turn(config_dir: Path, data_dir: Path, fake: FakeOllama) -> None:
    fake.add({"status": 503}, {"status": 503}, {"status": 503, "error": "overloaded"})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("hi", events)
        message = failed(outcome, events)
        assert message == f"Ollama at {fake.url} reported an error (HTTP 503): overloaded"
        assert len([e for e in events.of(Progress) if e.retry]) == 2
        assert len(chat_requests(fake)) == 3
        await next_turn_works(runtime, fake, "overloaded")


async def test_an_error_after_some_content_is_not_retried(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": ["Half ", "an answer"], "error": "model crashed"})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("hi", events)
        assert failed(outcome, events) == f"Ollama at {fake.url} reported an error: model crashed"
        assert "".join(d.text for d in events.of(Delta)) == "Half an answer"
        assert not any(e.retry for e in events.of(Progress))
        assert len(chat_requests(fake)) == 1
        await next_turn_works(runtime, fake, "model crashed")


# -- cancelling ----------------------------------------------------------------------------------


async def test_cancelling_keeps_what_was_said_and_the_next_turn_works(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": ["One ", "two ", "three ", "four."], "delay": 0.3})
    events = Events()
    async with await start(config_dir, data_dir, fake.url) as runtime:
        turn = asyncio.create_task(runtime.chat.run_turn("count to four", events))
        first = await events.wait_for(Delta)
        assert runtime.chat.busy
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        assert not runtime.chat.busy
        assert events.seen[-1] == TurnCancelled()
        assert events.of(TurnFinished) == []
        conversation = runtime.chat.conversation_id
        assert conversation is not None
        stored = await runtime.chat.conversations.messages(conversation)
        assert [(m.role, m.kind, m.content) for m in stored] == [
            ("user", Kind.CHAT, "count to four"),
            ("assistant", Kind.CHAT, first.text),
            ("assistant", Kind.ERROR, "stopped"),
        ]
        assert first.text == "One "

        fake.add({"content": "Sorry, four."})
        outcome = await runtime.chat.run_turn("go on", Events())
    assert outcome.response is not None and outcome.response.answer == "Sorry, four."
    assert chat_requests(fake)[-1]["messages"][1:] == [
        {"role": "user", "content": "count to four"},
        {"role": "assistant", "content": "One "},
        {"role": "user", "content": "go on"},
    ]


# -- memory and persistence ----------------------------------------------------------------------


async def test_a_conversation_is_reopened_and_sent_again_after_a_restart(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(call("get_current_time", timezone="UTC"), {"content": "It is 09:26."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        await runtime.chat.run_turn("what time is it?", Events())
        before = list(runtime.chat.messages)
    earlier = [m for m in chat_requests(fake)[-1]["messages"][1:]]
    earlier.append({"role": "assistant", "content": "It is 09:26."})

    fake.add({"content": "Still 09:26."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        assert runtime.chat.messages == []
        reopened = await runtime.chat.open_latest()
        outcome = await runtime.chat.run_turn("and now?", Events())

    assert reopened == before
    assert [(m.role, m.tool_name) for m in reopened] == [
        ("user", None),
        ("assistant", None),
        ("tool", "get_current_time"),
        ("assistant", None),
    ]
    assert reopened[2].data["result"]["iso"] == START.isoformat()
    assert outcome.response is not None and outcome.response.answer == "Still 09:26."
    assert chat_requests(fake)[-1]["messages"][1:] == [
        *earlier,
        {"role": "user", "content": "and now?"},
    ]


async def test_a_fact_saved_in_one_turn_is_found_in_the_next(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fact = "Ada's cat is called Miso"
    fake.add(call("save_fact", content=fact, tags=["pets"]), {"content": "I will remember."})
    fake.add(call("search_memory", query="cat"), {"content": "Your cat is Miso."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        saved = await runtime.chat.run_turn("remember that my cat is Miso", Events())
        found = await runtime.chat.run_turn("what is my cat called?", Events())

    assert saved.response is not None and found.response is not None
    assert [r.status for r in saved.response.tool_calls] == ["succeeded"]
    (search,) = found.response.tool_calls
    assert search.status == "succeeded"
    assert [r["content"] for r in search.result["results"]] == [fact]
    told = json.loads(tool_messages(chat_requests(fake)[-1])[-1]["content"])
    assert [r["content"] for r in told["result"]["results"]] == [fact]


# -- request_human_input -------------------------------------------------------------------------


ASK = call("request_human_input", question="Which colour?", choices=["red", "blue"])


async def test_the_person_answers_the_models_question(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    asked: list[tuple[str, list[str]]] = []

    async def asker(question: str, choices: list[str]) -> str | None:
        asked.append((question, choices))
        return "blue"

    fake.add(ASK, {"content": "Blue it is."})
    async with await start(config_dir, data_dir, fake.url, Ports(asker)) as runtime:
        outcome = await runtime.chat.run_turn("paint it", Events())
    assert asked == [("Which colour?", ["red", "blue"])]
    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert record.status == "succeeded"
    assert record.result == {"question": "Which colour?", "answer": "blue"}
    told = json.loads(tool_messages(chat_requests(fake)[-1])[0]["content"])
    assert told == {"ok": True, "result": {"question": "Which colour?", "answer": "blue"}}


async def test_with_nobody_to_ask_the_call_fails_plainly(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(ASK, {"content": "I could not ask you."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        outcome = await runtime.chat.run_turn("paint it", Events())
    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert not record.succeeded and record.result is None
    assert record.status == "failed"  # it reached the tool, which could not ask
    assert record.error == "no person can answer here (no terminal or window is attached)"
    told = json.loads(tool_messages(chat_requests(fake)[-1])[0]["content"])
    assert told == {"ok": False, "status": "failed", "error": record.error}


async def test_a_person_who_declines_to_answer_is_reported(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    async def asker(question: str, choices: list[str]) -> str | None:
        return None

    fake.add(ASK, {"content": "You chose not to say."})
    async with await start(config_dir, data_dir, fake.url, Ports(asker)) as runtime:
        outcome = await runtime.chat.run_turn("paint it", Events())
    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert (record.status, record.error) == ("cancelled", "the person chose not to answer")


# -- the rounds limit ----------------------------------------------------------------------------


async def test_a_model_that_keeps_calling_tools_is_stopped_after_the_limit(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    again = call("get_current_time", timezone="UTC")
    fake.add(again, again, again)
    events = Events()
    async with await start(config_dir, data_dir, fake.url, max_tool_rounds=2) as runtime:
        outcome = await runtime.chat.run_turn("loop", events)
    assert outcome.response is not None
    assert outcome.response.answer == (
        "(stopped after 2 rounds of tool calls; raise llm.max_tool_rounds in settings.json "
        "to allow more)"
    )
    assert [r.status for r in outcome.response.tool_calls] == ["succeeded", "succeeded"]
    assert len(events.of(ToolCallStarted)) == len(events.of(ToolCallFinished)) == 2
    assert len(chat_requests(fake)) == 2  # the third scripted call was never asked for


@pytest.mark.processes
async def test_a_call_approved_after_a_wait_counts_its_run_not_the_wait(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    """A person who takes 3.7 s to approve: the call's time is its run's own, as the
    execution log has it, and the wait is said apart."""
    from diana.core.system.clock import SteppingClock

    files_server(config_dir)
    fake.add(DELETE, {"content": "Deleted."})
    configure(config_dir, host=fake.url)
    clock = SteppingClock(START, step=timedelta(milliseconds=3), wall_step=timedelta(0))
    events = Events()
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=clock
    ) as runtime:
        await runtime.mcp.wait_ready()
        turn = asyncio.create_task(runtime.chat.run_turn("delete my notes", events))
        proposal = (await events.wait_for(ApprovalPending)).proposal
        clock.advance(3.7)  # the person reads it, then approves
        await runtime.approvals.approve(proposal.id, by="test")
        outcome = await asyncio.wait_for(turn, 10)
        await runtime.execution_log.flush()
        (run,) = [c for c in await runtime.recent_calls() if c.origin == f"proposal {proposal.id}"]

    assert outcome.response is not None
    (record,) = outcome.response.tool_calls
    assert record.status == "succeeded"
    assert record.latency_ms == round(run.latency_ms, 1) < 1000
    assert record.waited_ms == 3700.0
    assert record.timing == f"{run.latency_ms:.0f} ms · waited 3.7 s"


async def test_ollama_clients_share_one_tls_context(
    fake: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each runtime, embedder and model list makes an ollama client: the certificates are
    read once per process, not once per client, and each client still talks to Ollama."""
    import ssl

    from diana.core.config.settings import LLMSettings
    from diana.core.llm.ollama import make_client

    reads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        reads.append(args or kwargs)
        load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    clients = [make_client(fake.url, LLMSettings()) for _ in range(3)]
    assert len(reads) <= 1
    for client in clients:
        assert "models" in await client.list()
