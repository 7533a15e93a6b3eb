"""The Clients view: every host seen calling through `diana serve` (from the log), its calls,
its proposals waiting now and its last call; it follows calls as they come, and p pauses every
host (their calls then wait for a person) or resumes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from diana.core.models import ErrorCode
from diana.tui.modals.clients import ClientsScreen
from textual.widgets import DataTable, Static

from .scenarios import FILES, app_of, build_app, settle, until

UTC_ARGS = {"timezone": "UTC"}


async def test_the_clients_view_lists_hosts_follows_their_calls_and_pauses_them(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        core = app_of(pilot).core
        assert core is not None
        await core.call_tool("get_current_time", UTC_ARGS, origin="host:laptop")
        await core.call_tool("get_current_time", UTC_ARGS, origin="test")  # not a host's
        await pilot.press("f3", "c")  # from the Approvals pane
        await until(lambda: isinstance(app.screen, ClientsScreen))
        screen = app.screen
        await until(lambda: bool(screen.query("#clients-table")))
        table = screen.query_one("#clients-table", DataTable)
        await until(lambda: table.row_count == 1)
        assert [str(c) for c in table.get_row_at(0)[:3]] == ["laptop", "1", "0"]

        await pilot.press("p")  # pause: a call the policy lets run now waits
        assert core.hosts_paused() is not None
        summary = screen.query_one("#clients-summary", Static)
        assert "Hosts are paused" in str(summary.render())
        held = await core.call_tool("get_current_time", UTC_ARGS, origin="host:desktop")
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        await until(lambda: table.row_count == 2, 10)  # followed as it came
        rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(2)}
        assert str(rows["desktop"][2]) == "1"  # one proposal waiting

        await pilot.press("p")  # resume
        assert core.hosts_paused() is None
        assert "pass the policy" in str(summary.render())
        ran = await core.call_tool("get_current_time", UTC_ARGS, origin="host:desktop")
        assert ran.success


@pytest.mark.processes  # the fixture MCP server
async def test_the_asker_of_each_proposal_and_call_is_shown_in_approvals_and_the_log(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        core = app_of(pilot).core
        assert core is not None
        held = await core.call_tool("files_delete_file", {"path": "/srv/a"}, origin="host:cursor")
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        await core.call_tool("get_current_time", UTC_ARGS, origin="host:claude-code")
        await core.call_tool("get_current_time", UTC_ARGS, origin="cli")
        approvals = app.query_one("#approvals-table", DataTable)
        await until(lambda: approvals.row_count == 1)
        asked = approvals.get_column_index("from")
        assert str(approvals.get_row_at(0)[asked]) == "host:cursor"
        log = app.query_one("#log-table", DataTable)
        await until(lambda: log.row_count == 3)
        asker = log.get_column_index("from")
        tool = log.get_column_index("tool")
        rows = [(str(log.get_row_at(i)[tool]), str(log.get_row_at(i)[asker])) for i in range(3)]
        assert rows == [
            ("files_delete_file", "host:cursor"),
            ("get_current_time", "host:claude-code"),
            ("get_current_time", "cli"),
        ]
