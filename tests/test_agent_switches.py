"""A person stops and starts diana's own agents: `diana agents stop|start NAME` and s in the
Agents pane (after a yes); a stopped agent's tools answer agent_unavailable saying how to
start it, it stays stopped across a restart, and a running app follows the command. An
agent shows `running` once it has served a call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from diana.core.calls.tool_names import AgentSlot
from diana.core.models import AgentState, ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.app import DianaApp
from diana.tui.modals.dialogs import ConfirmDialog
from diana.tui.panes.agents import AgentsPane, AgentTable
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from .commands import diana, run_diana
from .conftest import stepping_clock
from .scenarios import build_app, fixture_server, settle

UTC = {"timezone": "UTC"}


def stopped_in_settings(config_dir: Path) -> list[str]:
    settings = json.loads((config_dir / "settings.json").read_text())
    stopped: list[str] = settings.get("agents", {}).get("stopped", [])
    return stopped


def slot_of(runtime: Runtime, agent: str) -> AgentSlot:
    return next(s for s in runtime.orchestrator.agent_slots() if s.name == agent)


@pytest.mark.processes
async def test_diana_agents_stop_and_start_one_of_dianas_own_agents(
    config_dir: Path, data_dir: Path
) -> None:
    stopped = await run_diana(config_dir, data_dir, "agents", "stop", "clock")
    assert stopped.returncode == 0, stopped.stderr
    assert "clock stopped in settings.json" in stopped.stdout
    assert stopped_in_settings(config_dir) == ["clock"]
    settings = json.loads((config_dir / "settings.json").read_text())
    assert settings["obsidian"]["daily_folder"] == "Daily"  # the rest of the file is kept
    again = await run_diana(config_dir, data_dir, "agents", "stop", "clock")
    assert (again.returncode, again.stdout.strip()) == (0, "clock is already stopped.")

    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        offered = {d.name for d, _agent in runtime.orchestrator.tool_definitions()}
        refused = await runtime.orchestrator.execute("get_current_time", UTC)
    assert "get_current_time" not in offered  # the model is not offered a stopped agent's tool
    assert refused.error_code is ErrorCode.AGENT_UNAVAILABLE
    assert "`diana agents start clock`" in (refused.error or "")

    called = await run_diana(
        config_dir, data_dir, "call", "get_current_time", "--args", json.dumps(UTC)
    )
    assert called.returncode != 0 and "diana agents start clock" in called.stderr
    listed = json.loads((await run_diana(config_dir, data_dir, "agents", "--json")).stdout)
    clock = next(a for a in listed if a["agent"] == "clock")
    assert (clock["state"], clock["stopped_by_person"]) == ("stopped", True)

    started = await run_diana(config_dir, data_dir, "agents", "start", "clock")
    assert started.returncode == 0, started.stderr
    assert stopped_in_settings(config_dir) == []
    called = await run_diana(
        config_dir, data_dir, "call", "get_current_time", "--args", json.dumps(UTC)
    )
    assert called.returncode == 0, called.stderr


@pytest.mark.processes
def test_only_dianas_own_agents_are_switched_here_and_a_wrong_name_is_named(
    config_dir: Path, data_dir: Path
) -> None:
    servers = {"fx": fixture_server()}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    server = diana(config_dir, data_dir, "agents", "stop", "mcp-fx")
    assert server.returncode == 2
    assert "mcp-fx is MCP server fx's agent" in server.stderr
    assert "`diana servers disable fx`" in server.stderr
    unknown = diana(config_dir, data_dir, "agents", "stop", "clok")
    assert unknown.returncode == 2
    assert "no agent named clok; diana's own agents are clock, " in unknown.stderr
    assert stopped_in_settings(config_dir) == []


async def test_an_agent_is_running_once_it_has_served_a_call(
    config_dir: Path, data_dir: Path
) -> None:
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        before = {h.agent_id: h.state for h in await runtime.orchestrator.health()}
        refused = await runtime.orchestrator.execute("get_current_time", {"timezone": 5})
        after_refusal = {h.agent_id: h.state for h in await runtime.orchestrator.health()}
        served = await runtime.orchestrator.execute("get_current_time", UTC)
        after = {h.agent_id: h.state for h in await runtime.orchestrator.health()}
        changes = [
            (e.agent, e.state)
            for e in [events.queue.get_nowait() for _ in range(events.queue.qsize())]
            if type(e).__name__ == "AgentStateChanged"
        ]
    assert not refused.success and served.success
    assert before["clock"] is after_refusal["clock"] is AgentState.INITIALIZED
    assert after["clock"] is AgentState.RUNNING
    assert after["memory"] is AgentState.INITIALIZED  # only the agent that served a call
    assert changes == [("clock", AgentState.RUNNING)]


# -- the Agents pane -----------------------------------------------------------------------------


def footer(app: DianaApp) -> list[tuple[str, str]]:
    return [(key.key_display, key.description) for key in app.query(FooterKey) if key.display]


async def until(pilot: Pilot[int], condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await pilot.pause()


def row_of(app: DianaApp, agent: str) -> list[str]:
    table = app.query_one(AgentsPane).query_one(AgentTable)
    return [str(cell) for cell in table.get_row(agent)]


async def test_s_in_the_agents_pane_stops_and_starts_an_agent_after_a_yes(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    config_dir = tmp_path / "config"
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        runtime = app.core._runtime
        assert runtime is not None
        await pilot.press("f5")
        table = app.query_one(AgentsPane).query_one(AgentTable)
        await until(pilot, lambda: "clock" in [k.value for k in table.rows])
        table.move_cursor(row=table.get_row_index("clock"))
        await pilot.pause()
        assert ("s", "Stop agent") in footer(app)

        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("n")  # no: nothing changes
        await pilot.pause()
        assert stopped_in_settings(config_dir) == [] and slot_of(runtime, "clock").callable

        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: row_of(app, "clock")[2] == "stopped")
        assert stopped_in_settings(config_dir) == ["clock"]
        assert "diana agents start clock" in row_of(app, "clock")[5]
        refused = await runtime.orchestrator.execute("get_current_time", UTC)
        assert refused.error_code is ErrorCode.AGENT_UNAVAILABLE
        await until(pilot, lambda: ("s", "Start agent") in footer(app))

        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: row_of(app, "clock")[2] == "initialized")
        assert stopped_in_settings(config_dir) == []
        assert (await runtime.orchestrator.execute("get_current_time", UTC)).success


@pytest.mark.processes
async def test_a_running_app_follows_diana_agents_stop_and_start(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        runtime = app.core._runtime
        assert runtime is not None
        clock = slot_of(runtime, "clock")
        stopped = await asyncio.to_thread(diana, config_dir, data_dir, "agents", "stop", "clock")
        assert stopped.returncode == 0, stopped.stderr
        assert "stops it now" in stopped.stdout
        await until(pilot, lambda: clock.stopped_note is not None)
        started = await asyncio.to_thread(diana, config_dir, data_dir, "agents", "start", "clock")
        assert started.returncode == 0, started.stderr
        await until(pilot, lambda: clock.callable)
