"""`diana stats`: per tool its calls, how they ended, latency percentiles, cost and last use;
totals per agent and per MCP server, counted from the execution log."""

from __future__ import annotations

import html
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from diana.core.runtime import Profile, Runtime
from diana.core.storage.call_record import CallRecord
from diana.core.usage.stats import percentile

from .commands import diana, run_diana
from .conftest import stepping_clock
from .fixtures.records import succeeded_call
from .scenarios import app_of, build_app, fixture_server, settle, until

# Six days ago: within the log's retention, which `diana` applies by the real clock.
DAY = datetime.now(UTC).replace(microsecond=0) - timedelta(days=6)

# (tool, agent, status, latency ms, cost, minutes after DAY)
CALLS = [
    *[("files_read", "mcp-files", "succeeded", float(ms), 0.01, 10) for ms in range(1, 21)],
    ("files_read", "mcp-files", "failed", 500.0, 0.5, 20),
    ("files_read", "mcp-files", "timed_out", 30000.0, 30.0, 30),
    ("files_delete", "mcp-files", "pending_approval", 2.0, 0.0, 40),
    ("files_delete", "mcp-files", "denied", 1.0, 0.0, 41),
    ("get_current_time", "clock", "succeeded", 3.0, 0.003, 50),
    ("get_current_time", "clock", "refused", 0.5, 0.0, 60 * 24 * 3),
]


async def log_calls(config_dir: Path, data_dir: Path) -> None:
    servers = {"mcpServers": {"files": fixture_server()}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    ) as runtime:
        for tool, agent, status, latency, cost, minutes in CALLS:
            started = DAY + timedelta(minutes=minutes)
            runtime.execution_log.record(
                CallRecord(
                    correlation_id="c",
                    tool=tool,
                    agent=agent,
                    arguments={},
                    status=status,
                    error_code=None,
                    result=None,
                    error=None,
                    origin="test",
                    started_at=started,
                    finished_at=started + timedelta(milliseconds=latency),
                    latency_ms=latency,
                    cost_units=cost,
                )
            )
        await runtime.execution_log.flush()


@pytest.mark.processes
async def test_figures_per_tool_agent_and_server_from_a_known_log(
    config_dir: Path, data_dir: Path
) -> None:
    await log_calls(config_dir, data_dir)
    done = await run_diana(config_dir, data_dir, "stats", "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    tools = {t["name"]: t for t in report["tools"]}
    read = tools["files_read"]
    assert (read["calls"], read["succeeded"], read["failed"], read["timed_out"]) == (22, 20, 1, 1)
    assert read["refused"] == 0
    # Of the 22 calls that ran (1..20 ms, 500 ms, 30 s): nearest-rank median and 95th.
    assert (read["p50_ms"], read["p95_ms"]) == (11.0, 500.0)
    assert read["cost"] == round(20 * 0.01 + 0.5 + 30.0, 3)
    delete = tools["files_delete"]  # one held for approval, one denied
    assert (delete["calls"], delete["refused"], delete["p50_ms"]) == (2, 1, None)
    clock = tools["get_current_time"]
    assert (clock["calls"], clock["succeeded"], clock["refused"]) == (2, 1, 1)
    last = DAY + timedelta(days=3, milliseconds=0.5)
    assert datetime.fromisoformat(clock["last_used"]) == last
    assert [t["name"] for t in report["tools"]] == [
        "files_read",
        "files_delete",
        "get_current_time",
    ]
    agents = {a["name"]: a for a in report["agents"]}
    assert agents["mcp-files"]["calls"] == 24 and agents["clock"]["calls"] == 2
    (server,) = report["servers"]
    assert (server["name"], server["agent"], server["calls"]) == ("files", "mcp-files", 24)

    recent = await run_diana(config_dir, data_dir, "stats", "--since", "4d", "--json")
    assert [t["name"] for t in json.loads(recent.stdout)["tools"]] == ["get_current_time"]
    one = await run_diana(config_dir, data_dir, "stats", "--tool", "files_delete", "--json")
    assert [t["name"] for t in json.loads(one.stdout)["tools"]] == ["files_delete"]
    by_server = await run_diana(config_dir, data_dir, "stats", "--server", "files", "--json")
    assert {t["name"] for t in json.loads(by_server.stdout)["tools"]} == {
        "files_read",
        "files_delete",
    }
    table = await run_diana(config_dir, data_dir, "stats")
    assert table.returncode == 0
    header = table.stdout.splitlines()[0].split()
    assert header[:4] == ["TOOL", "AGENT", "CALLS", "OK"]
    assert "files_read" in table.stdout and "SERVER" in table.stdout


@pytest.mark.processes
def test_bad_filters_are_named(config_dir: Path, data_dir: Path) -> None:
    done = diana(config_dir, data_dir, "stats", "--since", "soon")
    assert done.returncode == 2 and "--since: 'soon'" in done.stderr
    done = diana(config_dir, data_dir, "stats", "--server", "nosuch")
    assert done.returncode == 2 and "no MCP server named nosuch" in done.stderr
    empty = diana(config_dir, data_dir, "stats")
    assert empty.returncode == 0 and empty.stdout.strip() == "No calls."


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(n) for n in range(1, 101)], 95) == 95.0


async def test_the_usage_view_follows_calls_as_they_finish_and_sorts(tmp_path: Path) -> None:
    from diana.tui.modals.usage import UsageScreen
    from textual.widgets import DataTable, Static

    app = build_app(tmp_path)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("f5", "u")
        await until(lambda: isinstance(app.screen, UsageScreen))
        screen = app.screen
        table = screen.query_one("#usage-table", DataTable)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        for zone in ("UTC", "Asia/Tokyo"):
            await runtime.call_tool("get_current_time", {"timezone": zone}, origin="test")
        await until(lambda: table.row_count == 1 and str(table.get_row_at(0)[2]) == "2", 10)
        summary = screen.query_one("#usage-summary", Static)
        assert "sorted by calls" in str(summary.render())
        await pilot.press("s")
        assert "sorted by failures" in str(summary.render())

        # At 80x24 the least needed figures are left out, and the view says which; what is
        # shown fits: nothing runs off the edge.
        await pilot.resize_terminal(80, 24)
        await until(lambda: "not shown here:" in str(summary.render()))
        assert "Last used" not in table.left_out and "Calls" not in table.left_out
        assert table.max_scroll_x == 0
        shown = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "Last used" in shown and "Calls" in shown


@pytest.mark.processes
def test_a_held_calls_row_follows_the_decision_and_stats_count_rejections(
    config_dir: Path, data_dir: Path
) -> None:
    """Held, then decided by another process: the held row says approved (its run is a row
    of its own) or rejected with the reason, in `diana log` and `diana stats`; a call of a
    disabled server's tool is refused and filed under that server."""
    servers = {"mcpServers": {"files": fixture_server(), "off": fixture_server()}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))

    def proposal_of(done: subprocess.CompletedProcess[str]) -> str:
        return str(json.loads(done.stdout)["data"]["proposal_id"])

    args = ("call", "files_delete_file", "--args", '{"path": "/a"}', "--json")
    rejected = proposal_of(diana(config_dir, data_dir, *args))
    approved = proposal_of(diana(config_dir, data_dir, *args))
    assert diana(config_dir, data_dir, "reject", rejected, "--reason", "not today").returncode == 0
    assert diana(config_dir, data_dir, "approve", approved).returncode == 0
    assert diana(config_dir, data_dir, "servers", "disable", "off").returncode == 0
    diana(config_dir, data_dir, "call", "off_echo", "--args", '{"text": "x"}')

    logged = json.loads(diana(config_dir, data_dir, "log", "--json").stdout)
    rows = {(r["proposal"], r["status"]): r for r in logged}
    assert rows[(rejected, "rejected")]["error"] == "rejected: not today"
    assert rows[(approved, "approved")]["error"] == "approved: it ran as a call of its own"
    assert (approved, "succeeded") in rows  # the run
    assert not [r for r in logged if r["status"] == "pending_approval"]
    off = next(r for r in logged if r["tool"] == "off_echo")
    assert (off["status"], off["agent"]) == ("refused", "mcp-off")

    stats = json.loads(diana(config_dir, data_dir, "stats", "--json").stdout)
    delete = next(t for t in stats["tools"] if t["name"] == "files_delete_file")
    assert (delete["calls"], delete["succeeded"], delete["rejected"]) == (3, 1, 1)
    by_server = json.loads(diana(config_dir, data_dir, "stats", "--server", "off", "--json").stdout)
    assert [(t["name"], t["refused"]) for t in by_server["tools"]] == [("off_echo", 1)]
    table = diana(config_dir, data_dir, "stats").stdout
    assert "REJECTED" in table.splitlines()[0]


@pytest.mark.processes
async def test_a_removed_servers_figures_stay_in_the_server_table_marked_removed(
    config_dir: Path, data_dir: Path
) -> None:
    await log_calls(config_dir, data_dir)
    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    ) as runtime:
        for tool, agent in (("old_echo", "mcp-old"), ("mcp_test_server", "mcp-admin")):
            started = DAY + timedelta(minutes=70)
            runtime.execution_log.record(succeeded_call(tool, agent, started, cost_units=0.5))
        await runtime.execution_log.flush()
    # "old" was removed from mcp-servers.json; mcp-admin is diana's own agent, no server.
    done = await run_diana(config_dir, data_dir, "stats", "--since", "7d", "--json")
    assert done.returncode == 0, done.stderr
    servers = [(s["name"], s["removed"], s["calls"]) for s in json.loads(done.stdout)["servers"]]
    assert servers == [("files", False, 24), ("old", True, 1)]
    table = await run_diana(config_dir, data_dir, "stats", "--since", "7d")
    assert any(line.startswith("old (removed)") for line in table.stdout.splitlines())
