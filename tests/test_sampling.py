"""A server asks the local model to write a reply (MCP sampling): a proposal a person decides,
here or with `diana approve` in another process; Ollama is asked only after approval; a
sampling rule in policy.json allows it per server; the time is charged to that server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.core.llm.sampling import SAMPLING_TOOL, choose_model
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.panes import ApprovalsPane

from .commands import diana, start_diana
from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .network import closed_port
from .sampling_server import SERVER, configure, pending, sampling_proposal
from .scenarios import app_of, build_app, settle, until


def summarize(runtime: Runtime, **arguments: Any) -> asyncio.Task[Any]:
    return asyncio.create_task(
        runtime.call_tool(
            "fx_summarize", {"text": "a long day", "hint": "", **arguments}, origin="t"
        )
    )


@pytest.mark.processes
async def test_ollama_is_asked_only_once_a_person_approves(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama([{"content": "A day."}]) as ollama:
        configure(config_dir, ollama.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            call = summarize(runtime)
            proposal = await sampling_proposal(runtime)
            assert proposal.tool == SAMPLING_TOOL
            assert proposal.arguments["server"] == "fx"
            assert proposal.arguments["messages"] == [
                {"role": "user", "text": "Summarise: a long day"}
            ]
            assert proposal.arguments["system_prompt"] == "You write one-line summaries."
            assert proposal.arguments["reply_limit"] == 64
            assert "MCP server fx asks the local model" in proposal.reason
            # Nothing asked before the decision: a rejected one never asks (the next test)

            await runtime.approvals.approve(proposal.id, by="test")
            result = await asyncio.wait_for(call, 20)
            assert result.data == "qwen3:30b-a3b said: A day. (endTurn)"
            (sent,) = ollama.requests  # asked once, once approved
            assert sent["messages"] == [
                {"role": "system", "content": "You write one-line summaries."},
                {"role": "user", "content": "Summarise: a long day"},
            ]
            assert sent["options"]["num_predict"] == 64
            # The time went to the server that asked, not to a "sampling" agent.
            snapshot = runtime.cost.snapshot()
            assert snapshot.server_work_today["fx"]["sampling"] > 0
            assert "sampling" not in snapshot.agents_today


@pytest.mark.processes
async def test_a_rejection_reaches_the_server_and_ollama_is_never_asked(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama([{"content": "unused"}]) as ollama:
        configure(config_dir, ollama.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            call = summarize(runtime)
            proposal = await sampling_proposal(runtime)
            await runtime.approvals.reject(proposal.id, by="test", reason="not now")
            result = await asyncio.wait_for(call, 20)
            assert not result.success
            assert "rejected" in (result.error or "") and "not now" in (result.error or "")
            assert ollama.requests == []


@pytest.mark.processes
async def test_a_sampling_rule_allows_one_server_and_a_hint_picks_an_installed_model(
    config_dir: Path, data_dir: Path
) -> None:
    models = ["qwen3:30b-a3b", "llama3.2:3b"]
    with FakeOllama([{"content": "Short."}], models=models) as ollama:
        configure(config_dir, ollama.url, {"sampling": {"fx": "allow"}})
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            result = await asyncio.wait_for(summarize(runtime, hint="llama"), 20)
            assert result.data == "llama3.2:3b said: Short. (endTurn)"
            assert await pending(runtime) == []


@pytest.mark.processes
async def test_a_decision_made_by_another_process_runs_there_and_answers_the_server(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama([{"content": "From afar."}]) as ollama:
        configure(config_dir, ollama.url)
        async with await Runtime.open(
            Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            call = summarize(runtime)
            proposal = await sampling_proposal(runtime)
            # In a thread: this loop must go on (a write of the runtime's own may be half done).
            shown = await asyncio.to_thread(diana, config_dir, data_dir, "show", proposal.id)
            assert shown.returncode == 0, shown.stderr
            assert "Summarise: a long day" in shown.stdout
            approved = await asyncio.to_thread(diana, config_dir, data_dir, "approve", proposal.id)
            assert approved.returncode == 0, approved.stderr + approved.stdout
            result = await asyncio.wait_for(call, 20)
            assert result.data == "qwen3:30b-a3b said: From afar. (endTurn)"
            assert len(ollama.requests) == 1  # asked once, by the process that approved


@pytest.mark.processes
async def test_unreachable_ollama_is_named_to_the_server(config_dir: Path, data_dir: Path) -> None:
    configure(config_dir, f"http://127.0.0.1:{closed_port()}", {"sampling": {"fx": "allow"}})
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        result = await asyncio.wait_for(summarize(runtime), 30)
        assert not result.success
        assert "Ollama is not reachable" in (result.error or "")


@pytest.mark.processes
async def test_no_decision_in_time_is_a_no_and_the_proposal_does_not_linger(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama() as ollama:
        configure(config_dir, ollama.url)
        entry = {**SERVER["fx"], "toolTimeout": 1.5}
        (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"fx": entry}}))
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            result = await asyncio.wait_for(summarize(runtime), 20)
            assert not result.success
            (proposal,) = await runtime.approvals.store.select((ProposalStatus.REJECTED,))
            assert proposal.tool == SAMPLING_TOOL
            # Told no a second before the call's own time is up, so the server could say why
            # its call failed: it waited on a request to the local model, and which.
            told = (
                "no one decided on MCP server fx's request to the local model "
                f"(proposal {proposal.id}) within 1 s, so it was told no"
            )
            assert told in (result.error or "")
            assert proposal.reject_reason == told
            assert proposal.status is ProposalStatus.REJECTED


@pytest.mark.processes
async def test_the_model_is_never_offered_it_and_no_command_can_call_it(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama() as ollama:
        configure(config_dir, ollama.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            offered = [tool["function"]["name"] for tool in runtime.orchestrator.ollama_tools()]
            assert SAMPLING_TOOL not in offered
            arguments = {"server": "fx", "messages": [{"role": "user", "text": "hi"}]}
            result = await runtime.call_tool(
                SAMPLING_TOOL, {**arguments, "reply_limit": 5}, origin="t"
            )
            assert result.error_code is ErrorCode.TOOL_NOT_FOUND
            assert "cannot be called by name" in (result.error or "")


def test_a_hint_is_a_part_of_a_name_and_the_first_that_matches_wins() -> None:
    installed = ["gemma3:4b", "llama3.2:3b", "qwen3:30b-a3b"]
    assert choose_model(["claude", "QWEN", "llama"], installed, "x") == "qwen3:30b-a3b"
    assert choose_model(["sonnet"], installed, "configured") == "configured"
    assert choose_model([], installed, "configured") == "configured"


@pytest.mark.processes
def test_diana_call_says_what_waits_and_a_decision_from_another_process_answers_it(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama([{"content": "Both ways."}]) as ollama:
        configure(config_dir, ollama.url)
        call = start_diana(
            config_dir,
            data_dir,
            "call",
            "fx_summarize",
            "--args",
            '{"text": "a long day", "hint": ""}',
        )
        assert call.stderr is not None
        line = call.stderr.readline()
        found = re.search(r"proposal (\w+) waits for approval", line)
        assert found, line
        approved = diana(config_dir, data_dir, "approve", found.group(1))
        assert approved.returncode == 0, approved.stderr
        out, err = call.communicate(timeout=60)
        assert call.returncode == 0, err
        assert "qwen3:30b-a3b said: Both ways. (endTurn)" in out


@pytest.mark.processes
async def test_the_app_says_a_sampling_request_waits_and_shows_it_in_approvals(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, SERVER)
    (app.paths.config_dir / "policy.json").write_text(
        json.dumps({"tools": {"fx_summarize": "allow"}})
    )
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        call = asyncio.create_task(
            runtime.call_tool("fx_summarize", {"text": "x", "hint": ""}, origin="test")
        )
        said = "asks the local model to write a reply"
        await until(lambda: any(said in n.message for n in app._notifications), within=20)
        table = app.query_one(ApprovalsPane).table
        await until(lambda: table.row_count == 1, within=10)
        assert "fx asks the model: “Summarise: x”" in str(table.get_row_at(0)[-1])
        call.cancel()
