"""Energy is charged for work only: the time a call waits on a person (a question of the
model's, a server's form) costs nothing; a call that reached its agent and then broke
failed, it was not refused; a proposal says what its call is likely to cost."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from core.elicitation import Answer, Elicitation
from core.runtime import Runtime
from core.stats import usage

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .scenarios import fixture_server
from .test_sampling import sampling_proposal

PERSON_TAKES = 5.0  # seconds the person takes to answer, in every test here


async def test_time_a_person_takes_to_answer_the_model_is_not_charged(
    config_dir: Path, data_dir: Path
) -> None:
    clock = stepping_clock()

    async def person(question: str, choices: list[str]) -> str:
        clock.advance(PERSON_TAKES)
        return "blue"

    async with await Runtime.open(config_dir, data_dir, clock=clock) as runtime:
        runtime.human.asker = person
        answered = await runtime.orchestrator.execute(
            "request_human_input", {"question": "Which colour?"}
        )
        (row,) = await runtime.recent_calls()
        spent = runtime.cost.snapshot()

    assert answered.success and answered.data["answer"] == "blue"
    assert row.latency_ms >= PERSON_TAKES * 1000  # it did take that long
    assert row.cost_units < 0.1  # but only the tool's own work is charged
    assert spent.today_total < 0.1


async def test_time_a_person_takes_on_a_servers_form_is_not_charged_to_its_call(
    config_dir: Path, data_dir: Path
) -> None:
    servers = {"fx": fixture_server("--host-tools")}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"fx_book": "allow"}}))
    clock = stepping_clock()

    async def person(request: Elicitation) -> Answer:
        clock.advance(PERSON_TAKES)
        return Answer("accept", {"name": "Ada", "nights": 2, "breakfast": False})

    async with await Runtime.open(config_dir, data_dir, clock=clock) as runtime:
        await runtime.mcp.wait_ready()
        runtime.elicitations.asker = person
        booked = await runtime.call_tool("fx_book", {}, origin="test")
        rows = [r for r in await runtime.recent_calls() if r.tool == "fx_book"]

    assert booked.data == "booked Ada for 2 nights, breakfast False", booked.error
    (row,) = rows
    assert row.latency_ms >= PERSON_TAKES * 1000
    assert row.cost_units < 1.0


async def test_a_call_whose_server_crashed_mid_run_failed_it_was_not_refused(
    config_dir: Path, data_dir: Path
) -> None:
    servers = {"fx": fixture_server()}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))
    async with await Runtime.open(config_dir, data_dir, clock=stepping_clock()) as runtime:
        await runtime.mcp.wait_ready()
        crashed = await runtime.call_tool("fx_crash", {"code": 3}, origin="test")
        unknown = await runtime.call_tool("fx_no_such_tool", {}, origin="test")
        (ran,) = [r for r in await runtime.recent_calls() if r.tool == "fx_crash"]
        report = await usage(runtime.db, {"fx": "mcp-fx"})

    assert not crashed.success and not unknown.success
    assert ran.status == "failed" and ran.cost_units > 0
    figures = {u.name: u for u in report.tools}
    assert (figures["fx_crash"].failed, figures["fx_crash"].refused) == (1, 0)
    assert (figures["fx_no_such_tool"].failed, figures["fx_no_such_tool"].refused) == (0, 1)


async def test_time_a_person_takes_to_approve_a_servers_request_to_the_model_is_not_charged(
    config_dir: Path, data_dir: Path
) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    servers = {"fx": fixture_server("--host-tools")}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"fx_summarize": "allow"}}))
    clock = stepping_clock()
    with FakeOllama([{"content": "A day."}]) as ollama:
        settings["llm"] = {"host": ollama.url}
        (config_dir / "settings.json").write_text(json.dumps(settings))
        async with await Runtime.open(config_dir, data_dir, clock=clock) as runtime:
            await runtime.mcp.wait_ready()
            call = asyncio.create_task(
                runtime.call_tool("fx_summarize", {"text": "a long day", "hint": ""}, origin="t")
            )
            proposal = await sampling_proposal(runtime)
            clock.advance(PERSON_TAKES)
            await runtime.approvals.approve(proposal.id, by="test")
            result = await asyncio.wait_for(call, 20)
            (row,) = [r for r in await runtime.recent_calls() if r.tool == "fx_summarize"]

    assert result.success, result.error
    assert row.latency_ms >= PERSON_TAKES * 1000
    assert row.cost_units < 1.0
