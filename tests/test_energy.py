"""Energy is charged for work only: the time a call waits on a person (a question of the
model's, a server's form) costs nothing; a call that reached its agent and then broke
failed, it was not refused; a proposal says what its call is likely to cost."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diana.core.calls.agents import FunctionAgent, FunctionTool
from diana.core.events import Event, SubagentChanged
from diana.core.mcp.elicitation_form import Answer, Elicitation
from diana.core.mcp.subagent_request import RequestState
from diana.core.models import ErrorCode, RiskLevel, ToolDefinition
from diana.core.ports import Ports
from diana.core.runtime import Profile, Runtime
from diana.core.usage.stats import usage
from diana.tui.panes.approvals import ApprovalsPane

from .commands import run_diana
from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .sampling_server import sampling_proposal
from .scenarios import build_app, fixture_server, prepare_dirs, settle, tables_fitted, until
from .waits import until_event

PERSON_TAKES = 5.0  # seconds the person takes to answer, in every test here


async def test_time_a_person_takes_to_answer_the_model_is_not_charged(
    config_dir: Path, data_dir: Path
) -> None:
    clock = stepping_clock()

    async def person(question: str, choices: list[str]) -> str:
        clock.advance(PERSON_TAKES)
        return "blue"

    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=clock,
        ports=Ports(person),
    ) as runtime:
        answered = await runtime.orchestrator.execute(
            "request_human_input", {"question": "Which colour?"}
        )
        (row,) = await runtime.recent_calls()
        spent = runtime.cost.snapshot()

    assert answered.success and answered.data["answer"] == "blue"
    assert row.latency_ms >= PERSON_TAKES * 1000  # it did take that long
    assert row.cost_units < 0.1  # but only the tool's own work is charged
    assert spent.today_total < 0.1


@pytest.mark.processes
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

    ports = Ports(answer_server=person)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=clock, ports=ports
    ) as runtime:
        await runtime.mcp.wait_ready()
        booked = await runtime.call_tool("fx_book", {}, origin="test")
        rows = [r for r in await runtime.recent_calls() if r.tool == "fx_book"]

    assert booked.data == "booked Ada for 2 nights, breakfast False", booked.error
    (row,) = rows
    assert row.latency_ms >= PERSON_TAKES * 1000
    assert row.cost_units < 1.0


@pytest.mark.processes
async def test_a_call_whose_server_crashed_mid_run_failed_it_was_not_refused(
    config_dir: Path, data_dir: Path
) -> None:
    servers = {"fx": fixture_server()}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
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


@pytest.mark.processes
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
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=clock
        ) as runtime:
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


# -- what a proposal is likely to cost -----------------------------------------------------------


async def proposal_after_calls_costing(root: Path, *seconds: float) -> str:
    """Calls of send_email that ran ``seconds`` each, then one held for a person: its id."""
    config_dir, data_dir = prepare_dirs(root)
    clock = stepping_clock()

    async def send(params: dict[str, Any]) -> str:
        clock.advance(params["seconds"])
        return "sent"

    definition = ToolDefinition(
        name="send_email",
        description="Send an email.",
        parameters={"type": "object", "properties": {"seconds": {"type": "number"}}},
        risk=RiskLevel.REVERSIBLE_WITH_DELAY,
    )
    mailer = FunctionAgent("mailer", "Mailer", [FunctionTool(definition, send)], clock=clock)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=clock
    ) as runtime:
        orchestrator = runtime.orchestrator
        orchestrator.register_agent_factory("mailer", lambda: mailer)
        assert await orchestrator.start_agent("mailer")
        for taken in seconds:
            sent = await orchestrator.execute("send_email", {"seconds": taken}, confidence=0.9)
            assert sent.success, sent.error
        await runtime.execution_log.flush()
        held = await orchestrator.execute("send_email", {"seconds": 1})
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        never_ran = await orchestrator.execute("obsidian_log", {"entry": "x"})
        assert never_ran.error_code is ErrorCode.PENDING_APPROVAL
    return str(held.data["proposal_id"])


@pytest.mark.processes
async def test_a_proposal_says_what_its_call_is_likely_to_cost_in_diana_show(
    tmp_path: Path,
) -> None:
    proposal = await proposal_after_calls_costing(tmp_path, 1, 2, 10)
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"

    shown = await run_diana(config_dir, data_dir, "show", proposal)
    assert shown.returncode == 0, shown.stderr
    assert "estimated_cost  2.0 units (the median of its recent calls)" in shown.stdout
    public = json.loads((await run_diana(config_dir, data_dir, "show", proposal, "--json")).stdout)
    assert 2.0 <= public["estimated_cost"] < 2.1  # the median, not the mean (4.3)
    listed = json.loads((await run_diana(config_dir, data_dir, "proposals", "--json")).stdout)
    never_ran = next(p for p in listed if p["tool"] == "obsidian_log")
    assert never_ran["estimated_cost"] is None
    shown = await run_diana(config_dir, data_dir, "show", never_ran["id"])
    assert "estimated_cost  not known: the tool has not run before" in shown.stdout


async def test_the_approvals_pane_shows_each_proposals_likely_cost_at_80x24(
    tmp_path: Path,
) -> None:
    proposal = await proposal_after_calls_costing(tmp_path, 1, 2, 10)
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f3")
        await until(lambda: app.query_one(ApprovalsPane).table.row_count == 2)
        await tables_fitted(pilot)
        table = app.query_one(ApprovalsPane).table
        row = [str(c) for c in table.get_row(proposal)]
        assert "≈2.0" in row
        others = [str(c) for c in table.get_row_at(0 if table.get_row_at(0) != row else 1)]
        assert "—" in others  # obsidian_log has never run
        shown = {str(column.label) for column in table.columns.values() if column.width}
        assert "Cost" in shown


# -- the sub-agent's low-energy pause ------------------------------------------------------------


def with_budget(config_dir: Path, budget: float) -> None:
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["cost"] = {"daily_budget": budget}
    path.write_text(json.dumps(settings))


def paused(request_id: str) -> Callable[[Event], bool]:
    return lambda e: (
        isinstance(e, SubagentChanged) and e.request == request_id and "paused" in e.message
    )


@pytest.mark.processes
async def test_the_sub_agent_pauses_queued_work_once_the_budget_is_spent_until_it_is_raised(
    config_dir: Path, data_dir: Path
) -> None:
    with_budget(config_dir, 0.001)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        spent = await runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"})
        assert spent.success and runtime.cost.over_budget() is not None
        request = runtime.subagent.test_server("fx", fixture_server())
        await until_event(events, paused(request.id))
        assert request.state is RequestState.QUEUED
        assert request.message.startswith("paused: budget: 0.0 of 0.001 units used today")
        assert "cost.daily_budget" in request.message
        later = runtime.subagent.test_server("fx", fixture_server())
        assert later.message == request.message  # work queued meanwhile waits too, and says so

        with_budget(config_dir, 1000)  # a person raises it
        await asyncio.wait_for(runtime.subagent.wait(later.id), 30)
        assert request.state is RequestState.COMPLETED, request.message
        assert request.message.startswith("fx works:")
        assert runtime.cost.budget == 1000


async def test_paused_work_resumes_on_a_new_day(config_dir: Path, data_dir: Path) -> None:
    with_budget(config_dir, 0.001)
    clock = stepping_clock()
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=clock
    ) as runtime:
        events = runtime.bus.subscribe()
        await runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"})
        request = runtime.subagent.remove_server("nothing-here")
        await until_event(events, paused(request.id))
        clock.advance(24 * 3600)
        await asyncio.wait_for(runtime.subagent.wait(request.id), 10)
        assert "paused" not in request.message  # it ran (and found nothing to remove)
        assert request.state in (RequestState.COMPLETED, RequestState.FAILED)


async def test_a_budget_raised_in_settings_json_applies_at_once_while_diana_runs(
    config_dir: Path, data_dir: Path
) -> None:
    with_budget(config_dir, 0.001)
    async with await Runtime.open(
        Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"})
        sure = {"entry": "x"}
        held = await runtime.orchestrator.execute("obsidian_log", sure, confidence=0.9)
        assert held.error_code is ErrorCode.PENDING_APPROVAL  # over budget: it waits
        with_budget(config_dir, 1000)
        await until(lambda: runtime.cost.budget == 1000)
        logged = await runtime.orchestrator.execute("obsidian_log", sure, confidence=0.9)
        assert logged.success, logged.error


@pytest.mark.processes
async def test_decided_history_shows_what_a_call_that_ran_cost(tmp_path: Path) -> None:
    """Once a proposal's call has run, the history shows its cost as the Usage view counts
    it, not "—" because the tool had never run when it was proposed."""
    proposal = await proposal_after_calls_costing(tmp_path, 1, 2, 10)
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    listed = json.loads((await run_diana(config_dir, data_dir, "proposals", "--json")).stdout)
    logged = next(p["id"] for p in listed if p["tool"] == "obsidian_log")
    approved = await run_diana(config_dir, data_dir, "approve", logged)
    assert approved.returncode == 0, approved.stderr
    public = json.loads((await run_diana(config_dir, data_dir, "show", logged, "--json")).stdout)
    assert public["status"] == "succeeded" and public["cost_units"] >= 0.0
    cost = f"{public['cost_units']:.1f}"  # as the Usage view shows it
    shown = (await run_diana(config_dir, data_dir, "show", logged)).stdout
    assert f"cost  {cost} units (it ran {public['ran_ms']:.1f} ms)" in shown
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f3", "h")
        pane = app.query_one(ApprovalsPane)
        await until(lambda: pane.history and pane.table.row_count == 2)
        await tables_fitted(pilot)
        ran = [str(c) for c in pane.table.get_row(logged)]
        assert cost in ran and "—" not in ran
        waiting = [str(c) for c in pane.table.get_row(proposal)]
        assert "≈2.0" in waiting  # not run yet: its estimate still
