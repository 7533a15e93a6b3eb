"""Cost accounting and the daily budget: each call's units, totals per agent and per MCP server
(a real fixture server's connecting and health probes included), the budget held in the
approval gate, today's total across a restart, and the Agents pane's column and gauge."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from diana.core.calls.orchestrator import Orchestrator
from diana.core.events import CallFinished, EventBus
from diana.core.mcp.manager import MCPManager
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.core.system.clock import SteppingClock
from diana.core.usage.cost import CostLedger
from diana.tui import cli
from diana.tui.app import make_app
from textual.widgets import DataTable, Static

from .agents_fixtures import echo_agent
from .conftest import START, counting_ids
from .fixtures.records import succeeded_call
from .scenarios import SNAPSHOT_BACKOFF, TERMINAL_SIZE, prepare_dirs, settle, type_command

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


def seconds_clock(step: float = 1.0, start_offset: timedelta = timedelta(0)) -> SteppingClock:
    """Wall time stands still; each monotonic reading is ``step`` seconds after the last, so
    a call read twice (start, end) lasts exactly one step."""
    return SteppingClock(START + start_offset, timedelta(seconds=step), wall_step=timedelta(0))


def set_budget(config_dir: Path, budget: float | None) -> None:
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["cost"] = {"daily_budget": budget}
    path.write_text(json.dumps(settings))


def files_server(config_dir: Path) -> None:
    servers = {"files": {"command": sys.executable, "args": [FIXTURE]}}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


# -- per call ------------------------------------------------------------------------------------


async def test_a_call_costs_the_seconds_it_ran_and_one_that_never_ran_nothing(
    config_dir: Path, data_dir: Path
) -> None:
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=seconds_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        ran = await runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"})
        unknown = await runtime.orchestrator.execute("get_current_tme", {})
        invalid = await runtime.orchestrator.execute("get_current_time", {"timezone": 5})
        pending = await runtime.orchestrator.execute("obsidian_log", {"entry": "x"})
        finished = [e for e in [events.queue.get_nowait() for _ in range(events.queue.qsize())]]
        rows = await runtime.recent_calls()
        cost = runtime.cost.snapshot()

    assert ran.success
    assert (unknown.error_code, invalid.error_code, pending.error_code) == (
        ErrorCode.TOOL_NOT_FOUND,
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.PENDING_APPROVAL,
    )
    costs = [(e.tool, e.status, e.cost_units) for e in finished if isinstance(e, CallFinished)]
    assert costs == [
        ("get_current_time", "succeeded", 1.0),
        ("get_current_tme", "refused", 0.0),
        ("get_current_time", "refused", 0.0),
        ("obsidian_log", "pending_approval", 0.0),
    ]
    assert [(r.tool, r.cost_units) for r in rows] == [
        ("get_current_time", 1.0),
        ("get_current_tme", 0.0),
        ("get_current_time", 0.0),
        ("obsidian_log", 0.0),
    ]
    assert cost.agents_today == {"clock": 1.0}
    assert cost.today_total == cost.since_start_total == 1.0


# -- per agent and per server, with a real server's background work ------------------------------


class WatchedLedger(CostLedger):
    """A ledger that lets a test wait until a server has been probed a few times."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work: list[tuple[str, str, float]] = []
        self.probed = asyncio.Event()

    def server_work(self, server: str, kind: str, seconds: float) -> None:
        super().server_work(server, kind, seconds)
        self.work.append((server, kind, seconds))
        if sum(kind == "probe" for _s, kind, _u in self.work) >= 2:
            self.probed.set()


@pytest.mark.processes
async def test_totals_per_agent_and_per_server_include_connecting_and_probes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp-servers.json"
    path.write_text(json.dumps([{"name": "files", "command": sys.executable, "args": [FIXTURE]}]))
    # The server's own clock: only its connection reads it, one unit per reading.
    ledger = WatchedLedger(seconds_clock())
    orchestrator = Orchestrator(bus=EventBus(), clock=seconds_clock(0.25))
    orchestrator.on_call_finished = ledger.call_finished
    orchestrator.register_agent_factory("echo", lambda: echo_agent("echo", "echo_ping"))
    manager = MCPManager(
        orchestrator, lambda: path, clock=seconds_clock(), cost=ledger, health_interval=0.05
    )
    try:
        await orchestrator.start_all()
        await manager.start(manager.load())
        await manager.wait_ready()
        assert (await orchestrator.execute("files_echo", {"text": "hi"})).success
        assert (await orchestrator.execute("echo_ping", {})).success
        assert (await orchestrator.execute("echo_ping", {})).success
        async with asyncio.timeout(10):
            await ledger.probed.wait()
    finally:
        await orchestrator.shutdown()
        await manager.close()

    cost = ledger.snapshot()
    # Connecting reads the clock three times: start, handshake done, tools listed.
    assert [w for w in ledger.work if w[1] == "connect"] == [("files", "connect", 2.0)]
    probes = [units for _s, kind, units in ledger.work if kind == "probe"]
    assert len(probes) >= 2 and set(probes) == {1.0}  # one unit each: start and end
    background = 2.0 + sum(probes)
    assert cost.server_work_today == {"files": {"connect": 2.0, "probe": sum(probes)}}
    assert cost.servers_today == {"files": background + 0.25}
    assert cost.agents_today == {"echo": 0.5, "mcp-files": background + 0.25}
    assert cost.today_total == background + 0.75
    assert cost.servers_since_start == cost.servers_today


# -- the budget ----------------------------------------------------------------------------------


async def test_over_budget_only_reversible_calls_run_and_a_person_can_still_approve(
    config_dir: Path, data_dir: Path
) -> None:
    set_budget(config_dir, 1.5)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=seconds_clock()
    ) as runtime:
        execute = runtime.orchestrator.execute
        # Within the budget a sure reversible-with-delay call runs without a person.
        before = await execute("obsidian_log", {"entry": "first"}, confidence=0.95)
        assert before.success, before.error
        assert runtime.cost.over_budget() is None
        assert (await execute("get_current_time", {"timezone": "UTC"})).success

        held = await execute("obsidian_log", {"entry": "second"}, confidence=0.95)
        reversible = await execute("get_current_time", {"timezone": "UTC"})
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        assert reversible.success
        proposal = await runtime.approvals.store.get(held.data["proposal_id"])
        assert proposal.reason.startswith("budget: 2.0 of 1.5 units used today; ")
        assert proposal.risk == "reversible_with_delay"

        decision = await runtime.approvals.approve(proposal.id, by="test")
        assert decision.result is not None and decision.result.success
        assert runtime.cost.today_total() == 4.0


async def test_a_policy_allow_does_not_lift_the_budget(config_dir: Path, data_dir: Path) -> None:
    set_budget(config_dir, 0.5)
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"obsidian_log": "allow"}}))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=seconds_clock()
    ) as runtime:
        assert (await runtime.orchestrator.execute("obsidian_log", {"entry": "a"})).success
        held = await runtime.orchestrator.execute("obsidian_log", {"entry": "b"})
    assert held.error_code is ErrorCode.PENDING_APPROVAL
    assert "budget: 1.0 of 0.5 units used today" in (held.error or "")


@pytest.mark.processes
async def test_todays_total_survives_a_restart_and_a_new_day_starts_at_zero(
    config_dir: Path, data_dir: Path
) -> None:
    set_budget(config_dir, 1.5)
    files_server(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=seconds_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        execute = runtime.orchestrator.execute
        assert (await execute("get_current_time", {"timezone": "UTC"})).success
        assert (await execute("files_echo", {"text": "hi"})).success
        before = runtime.cost.snapshot()
    assert before.server_work_today["files"]["connect"] > 0

    # Servers not started this time: what is counted is only what was stored.
    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=seconds_clock(),
    ) as runtime:
        after = runtime.cost.snapshot()
        held = await runtime.orchestrator.execute("obsidian_log", {"entry": "x"}, confidence=1.0)
    assert after.today_total == before.today_total
    assert after.server_work_today == before.server_work_today
    # The server's agent: its call and its server's stored work (the rows add up to the total).
    files_work = sum(after.server_work_today["files"].values())
    assert after.agents_today["clock"] == 1.0
    assert after.agents_today["mcp-files"] == 1.0 + files_work
    assert sum(after.agents_today.values()) == after.today_total
    assert after.since_start_total == 0.0
    assert held.error_code is ErrorCode.PENDING_APPROVAL
    assert "budget: " in (held.error or "")

    tomorrow = seconds_clock(start_offset=timedelta(days=1))
    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=tomorrow,
    ) as runtime:
        fresh = runtime.cost.snapshot()
        runs = await runtime.orchestrator.execute("obsidian_log", {"entry": "y"}, confidence=1.0)
    assert fresh.today_total == 0.0 and fresh.agents_today == {}
    assert runs.success


# -- the Agents pane -----------------------------------------------------------------------------


def agents_rows(table: DataTable[Any]) -> dict[str, list[str]]:
    rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    return {row[0]: row for row in rows}


async def test_agents_pane_shows_cost_per_agent_and_the_budget_gauge(tmp_path: Path) -> None:
    config_dir, data_dir = prepare_dirs(tmp_path)
    set_budget(config_dir, 2)
    app = make_app(
        config_dir,
        data_dir,
        clock=seconds_clock(),
        new_id=counting_ids(),
        mcp_backoff_start=SNAPSHOT_BACKOFF,
        proposal_ids=counting_ids("p"),
    )
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        table = app.query_one("#agents-table", DataTable)
        gauge = app.query_one("#agents-budget", Static)
        assert [str(c.label) for c in table.columns.values()][3:5] == ["Tools", "Cost"]
        assert gauge.display
        assert str(gauge.render()) == "Budget ░░░░░░░░░░ 0.0 / 2 units today"

        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        assert agents_rows(table)["clock"][4] == "1.0"
        assert agents_rows(table)["memory"][4] == "0.0"
        assert str(gauge.render()) == "Budget █████░░░░░ 1.0 / 2 units today"

        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        assert agents_rows(table)["clock"][4] == "2.0"
        assert str(gauge.render()) == "Budget ██████████ 2.0 / 2 units today — over budget"


async def test_without_a_budget_there_is_no_gauge(tmp_path: Path) -> None:
    config_dir, data_dir = prepare_dirs(tmp_path)
    app = make_app(config_dir, data_dir, clock=seconds_clock(), mcp_backoff_start=SNAPSHOT_BACKOFF)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        assert not app.query_one("#agents-budget", Static).display
        table = app.query_one("#agents-table", DataTable)
        assert agents_rows(table)["clock"][4] == "1.0"


# -- diana cost ----------------------------------------------------------------------------------


def test_diana_cost_prints_todays_units_per_agent(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    set_budget(config_dir, 5)
    dirs = ["--config-dir", str(config_dir), "--data-dir", str(data_dir)]
    assert cli.main(["call", "get_current_time", "--args", '{"timezone": "UTC"}', *dirs]) == 0
    capsys.readouterr()

    assert cli.main(["cost", "--json", *dirs]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert cli.main(["cost", *dirs]) == 0
    text = capsys.readouterr().out

    assert shown["budget"] == 5 and shown["unit"] == "seconds of tool or server time"
    assert set(shown["agents"]) == {"clock"} and shown["agents"]["clock"] > 0
    assert shown["total"] == shown["agents"]["clock"]
    assert text.startswith(f"{shown['day']}: 0.0 units of a 5-unit budget\n")
    assert "AGENT" in text and "clock" in text


def test_diana_costs_rows_add_up_to_its_total_with_a_removed_servers_row(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def spend() -> None:
        async with await Runtime.open(
            Profile.APP.but(servers="none", share=False, watch=False), config_dir, data_dir
        ) as runtime:
            now = runtime.clock.now()
            # Three small calls (0.04 each: each shows as 0.0 alone) and the work of a
            # server since removed from mcp-servers.json.
            for agent in ("clock", "memory", "web"):
                runtime.execution_log.record(
                    succeeded_call("t", agent, now, latency_ms=40.0, cost_units=0.04)
                )
            await runtime.execution_log.flush()
            runtime.cost.server_work("old", "probe", 1.1)

    asyncio.run(spend())
    files_server(config_dir)  # "old" is not configured now; "files" never worked
    dirs = ["--config-dir", str(config_dir), "--data-dir", str(data_dir)]
    assert cli.main(["cost", *dirs]) == 0
    text = capsys.readouterr().out
    header, _blank, *rest = text.splitlines()
    assert header.endswith(": 1.2 units (no budget)")
    agents_table = rest[: rest.index("")]
    rows = {line.rsplit(None, 1)[0].strip(): line.rsplit(None, 1)[1] for line in agents_table[1:]}
    assert rows["mcp-old (removed)"] == "1.1"
    assert f"{sum(float(units) for units in rows.values()):.1f}" == "1.2"
    servers_table = rest[rest.index("") + 1 :]
    assert any(line.startswith("old (removed)") for line in servers_table), servers_table
