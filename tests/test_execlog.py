"""The Execution Log pane: calls from every process, live; the newest row in view; Home and
End; columns that fit the width; status colours from the theme. Real `diana` processes and a
real SQLite file."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from diana.core.events import CallFinished, CallStarted
from diana.core.runtime import Profile, Runtime
from diana.core.storage.call_record import CallRecord
from diana.core.storage.execution_log import ExecutionLog
from diana.core.storage.schema import connect
from diana.core.system.telemetry import StructuredLog
from diana.tui.app import DianaApp
from diana.tui.panes.execlog import ExecutionLogPane
from diana.tui.panes.logged_calls import COLUMN_INDEX
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from .colours import drawn_colours, theme_colour
from .commands import diana, diana_argv
from .conftest import counting_ids, stepping_clock
from .scenarios import FILES, app_of, build_app, prepare_dirs, settle, type_command, until

# A tool name longer than the Tool column ever gets: cut to 24 cells, the last an ellipsis.
LONG_TOOL = "a_tool_whose_name_is_far_too_long"


async def make_history(root: Path, saved: int, *, long_tool: bool = True) -> None:
    """Calls an earlier session made: ``saved`` save_fact calls, a get_current_time, a call
    of an unknown tool with a long name (refused) unless not ``long_tool``, and newest an
    obsidian_log (waiting for approval)."""
    config_dir, data_dir = prepare_dirs(root)
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        new_id=counting_ids("0ld"),
    )
    try:
        run = runtime.orchestrator.execute
        for number in range(saved):
            await run("save_fact", {"content": f"old fact {number}"})
        await run("get_current_time", {"timezone": "UTC"})
        if long_tool:
            await run(LONG_TOOL, {})
        await run("obsidian_log", {"entry": "needs a person"})
        await runtime.execution_log.flush()
    finally:
        await runtime.close()


def log_table(app: DianaApp) -> DataTable[object]:
    return app.query_one("#log-table", DataTable)


def shown(app: DianaApp) -> list[list[str]]:
    """The log's rows, top to bottom: time, correlation, tool, agent, status, latency,
    result."""
    table = log_table(app)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def pane_lines(app: DianaApp) -> list[str]:
    """The Execution Log pane's rows on screen, as the terminal would show them."""
    strips = app.screen._compositor.render_strips()
    lines = ["".join(segment.text for segment in strip) for strip in strips]
    top = next(i for i, line in enumerate(lines) if "Execution Log" in line)
    bottom = next(i for i in range(top + 1, len(lines)) if lines[i].lstrip().startswith("╰"))
    return lines[top + 1 : bottom]


def row_in_view(app: DianaApp, index: int) -> bool:
    """Row ``index`` lies wholly inside the table's view, below its header."""
    table = log_table(app)
    view = table.scrollable_content_region.height - table.header_height
    first = round(table.scroll_y)
    return first <= index < first + view


async def diana_call(root: Path, tool: str, arguments: dict[str, object]) -> str:
    """`diana call` in a process of its own, over the app's directories; its stdout."""
    config_dir, data_dir = root / "config", root / "data"
    process = await asyncio.create_subprocess_exec(
        *diana_argv(config_dir, data_dir, "call", tool, "--args", json.dumps(arguments)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


RESULT, TOOL = COLUMN_INDEX["result"], COLUMN_INDEX["tool"]


def with_content(app: DianaApp, content: str) -> list[list[str]]:
    return [row for row in shown(app) if f'"content": "{content}"' in row[RESULT]]


# -- calls from other processes --------------------------------------------------------------


@pytest.mark.processes
async def test_a_call_made_by_another_process_appears_while_the_app_runs(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("f6")  # a small terminal shows one pane at a time: this one
        await diana_call(tmp_path, "save_fact", {"content": "from another terminal"})
        await until(lambda: bool(with_content(app, "from another terminal")), within=30)
        [row] = with_content(app, "from another terminal")
        assert row[2:6] == ["save_fact", "memory", "cli", "succeeded"]  # ... and who asked
        await pilot.pause()
        assert any("from another terminal" in line for line in pane_lines(app))


@pytest.mark.processes
async def test_the_apps_own_calls_appear_once_among_calls_from_elsewhere(
    tmp_path: Path,
) -> None:
    await make_history(tmp_path, 3)
    app = build_app(tmp_path)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call save_fact {"content": "mine 1"}')
        await diana_call(tmp_path, "save_fact", {"content": "theirs 1"})
        await until(lambda: bool(with_content(app, "theirs 1")), within=30)
        await type_command(pilot, '/call save_fact {"content": "mine 2"}')
        await diana_call(tmp_path, "save_fact", {"content": "theirs 2"})
        await until(lambda: bool(with_content(app, "theirs 2")), within=30)
        assert app.core is not None
        await app.core._runtime.execution_log.flush()  # the app's own rows are in the database
        await diana_call(tmp_path, "save_fact", {"content": "theirs 3"})
        await until(lambda: bool(with_content(app, "theirs 3")), within=30)

        # The result column starts with the fact saved (the rest may be cut at its edge).
        contents = [
            json.loads(row[RESULT].split('"content": ', 1)[1].split(", ", 1)[0])
            for row in shown(app)
            if row[TOOL] == "save_fact"
        ]
        assert contents == [
            "old fact 0",
            "old fact 1",
            "old fact 2",
            "mine 1",
            "theirs 1",
            "mine 2",
            "theirs 2",
            "theirs 3",
        ]


async def test_calls_from_elsewhere_leave_out_this_processs_own_rows(tmp_path: Path) -> None:
    """Two connections to one file, as two processes have: each sees only the other's."""
    from diana.core.storage.execution_log import (
        CallsFromElsewhere,  # here: the other tests run without it
    )

    path = tmp_path / "diana.db"
    here_db, there_db = await connect(path), await connect(path)
    log = StructuredLog(tmp_path / "log.jsonl", stepping_clock())
    here, there = ExecutionLog(here_db, log), ExecutionLog(there_db, log)
    here.start()
    there.start()
    try:
        elsewhere = CallsFromElsewhere(here_db, here, after_id=0)
        assert await elsewhere.poll() == []
        for number, writer in enumerate([here, there, there, here, there, here, here]):
            writer.record(record(f"r{number}"))
            await writer.flush()
        assert [c.correlation_id for c in await elsewhere.poll()] == ["r1", "r2", "r4"]
        assert await elsewhere.poll() == []  # nothing new
        for number in range(7, 12):
            there.record(record(f"r{number}"))
        await there.flush()
        # Only the newest of a burst, when asked for a few.
        assert [c.correlation_id for c in await elsewhere.poll(limit=2)] == ["r10", "r11"]
        here.record(record("r12"))
        await here.flush()
        assert await elsewhere.poll() == []  # its own row: not even read
        assert elsewhere.after_id == 13
    finally:
        for writer in (here, there):
            await writer.close()
        await here_db.close()
        await there_db.close()
        log.close()


def record(correlation_id: str) -> CallRecord:
    at = datetime(2026, 3, 14, tzinfo=UTC)
    return CallRecord(
        correlation_id, "save_fact", "memory", {}, "succeeded", None, {}, None, "test", at, at, 1.0
    )


# -- the newest row in view, Home and End ------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_the_newest_row_is_in_view_at_start_and_as_rows_arrive(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    await make_history(tmp_path, 27)  # 30 rows; the newest is the one obsidian_log
    app = build_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("f6")  # a small terminal shows one pane at a time: this one
        await pilot.pause()
        table = log_table(app)
        assert table.row_count == 30
        assert table.cursor_row == 29
        assert row_in_view(app, 29)
        assert any("obsidian_log" in line for line in pane_lines(app))
        # And as rows arrive: the cursor was on the newest row, so it follows.
        await type_command(pilot, '/call save_fact {"content": "follows"}')
        await pilot.press("f6")
        await pilot.pause()
        assert table.cursor_row == 30 and row_in_view(app, 30)


async def test_home_and_end_go_to_the_first_and_last_row(tmp_path: Path) -> None:
    await make_history(tmp_path, 27)
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f6", "up", "up")
        table = log_table(app)
        assert table.has_focus and table.cursor_row == 27
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and row_in_view(app, 0)
        assert not row_in_view(app, 29)
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == 29 and row_in_view(app, 29)


class LogHost(App[None]):
    """The pane alone, as the app lays it out."""

    CSS = "ExecutionLogPane { height: 14; }"

    def compose(self) -> ComposeResult:
        yield ExecutionLogPane(id="log")


def flood(pane: ExecutionLogPane, first: int, last: int) -> None:
    """Calls ``first``..``last`` started and finished, as the app routes them."""
    at = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
    for n in range(first, last + 1):
        args = {"n": n}
        pane.call_started(CallStarted(n, f"c{n}", "save_fact", "memory", args, at, "test"))
        pane.call_finished(
            CallFinished(
                f"c{n}", "save_fact", "memory", args, "succeeded", None, f"result {n}", None,
                "test", at, at, 1.0, call_id=n,
            )
        )  # fmt: skip


def keys_shown(pane: ExecutionLogPane) -> list[str]:
    table = pane.query_one("#log-table", DataTable)
    return [str(row.key.value) for row in table.ordered_rows]


async def test_a_flood_keeps_the_newest_rows_and_the_selected_call() -> None:
    app = LogHost()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(ExecutionLogPane)
        table = pane.query_one("#log-table", DataTable)
        for first in range(1, 601, 20):  # in bursts, as events arrive
            flood(pane, first, first + 19)
            await asyncio.sleep(0)
        expected = [f"call-{n}" for n in range(101, 601)]
        await until(lambda: keys_shown(pane) == expected)
        await until(lambda: table.cursor_row == 499)
        table.focus()
        await pilot.press("up", "up", "up")
        assert table.get_row_at(table.cursor_row)[1].plain == "c597"
        for first in range(601, 701, 20):
            flood(pane, first, first + 19)
            await asyncio.sleep(0)
        await until(lambda: keys_shown(pane)[-1] == "call-700")
        await pilot.pause()
        assert keys_shown(pane) == [f"call-{n}" for n in range(201, 701)]
        assert len(pane.calls) == 500
        # The person's call stays selected, and in view, while older rows go.
        assert str(table.get_row_at(table.cursor_row)[1]) == "c597"
        view = table.scrollable_content_region.height - table.header_height
        assert round(table.scroll_y) <= table.cursor_row < round(table.scroll_y) + view
        assert [str(c) for c in table.get_row_at(499)][5:] == ["succeeded", "1.0 ms", "result 700"]


# -- column widths -----------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 100, 120])
async def test_status_and_tool_names_are_whole_at_common_widths(tmp_path: Path, width: int) -> None:
    long_tool = width > 80  # at 80 a 24-cell tool name leaves too little for the rest
    await make_history(tmp_path, 2, long_tool=long_tool)
    app = build_app(tmp_path)
    async with app.run_test(size=(width, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f6")  # a small terminal shows one pane at a time: this one
        await pilot.pause()
        table = log_table(app)
        lines = pane_lines(app)
        statuses = ["succeeded", "succeeded", "succeeded", "pending approval"]
        tools = ["save_fact", "save_fact", "get_current_time", "obsidian_log"]
        if long_tool:
            statuses.insert(3, "refused")
            tools.insert(3, f"{LONG_TOOL[:23]}…")
        # Row by row, each status and tool name whole, where its header says.
        header, rows = lines[0], lines[1 : 1 + len(statuses)]
        status_at, tool_at = header.index("Status"), header.index("Tool")
        for line, status, tool in zip(rows, statuses, tools, strict=True):
            assert line[status_at:].startswith(f"{status} "), (status, lines)
            assert line[tool_at:].startswith(f"{tool} "), (tool, lines)
        assert table.max_scroll_x == 0 and not table.show_horizontal_scrollbar


def test_the_result_gives_way_before_whole_columns() -> None:
    # here: the other tests run without it
    from diana.tui.fitted import fit_widths as fit
    from diana.tui.panes.execlog import LogTable
    from diana.tui.panes.logged_calls import COLUMNS

    def fit_widths(available: int, widest: dict[str, int]) -> dict[str, int]:
        return fit(COLUMNS, available, widest, LogTable.GIVES_WAY, LogTable.LAST_WANTS)

    widest = {"time": 8, "cid": 12, "tool": 30, "agent": 8, "from": 11, "status": 16, "latency": 7}
    wide = fit_widths(200, widest)
    assert (wide["tool"], wide["cid"], wide["agent"], wide["from"], wide["status"]) == (
        24,
        12,
        8,
        11,
        16,
    )
    assert sum(wide.values()) + len(COLUMNS) - 1 == 200  # the result takes the rest
    # The correlation id and then who asked are cut so the result has room; the agent stays.
    cut = fit_widths(106, widest)
    assert (cut["tool"], cut["agent"], cut["status"]) == (24, 8, 16)
    assert 6 <= cut["cid"] < 12 and 5 <= cut["from"] < 11
    assert cut["result"] == 24 and sum(cut.values()) + len(COLUMNS) - 1 == 106
    narrow = fit_widths(82, widest)  # 80 columns: the id, who asked and the agent are left out
    assert (narrow["tool"], narrow["status"], narrow["latency"]) == (24, 16, 7)
    assert narrow["cid"] == narrow["agent"] == narrow["from"] == 0 and narrow["result"] >= 20
    assert sum(narrow.values()) + len(COLUMNS) - 4 == 82  # no gap for a column left out
    least = fit_widths(40, widest)  # too narrow for anything: least widths, and a scroll
    assert (least["cid"], least["agent"], least["from"], least["result"]) == (6, 5, 5, 6)


# -- colours from the theme ----------------------------------------------------------------------


async def test_status_colours_follow_the_theme(tmp_path: Path) -> None:
    await make_history(tmp_path, 2)
    app = build_app(tmp_path)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await pilot.press("f6")  # a small terminal shows one pane at a time: this one
        await pilot.pause()
        assert drawn_colours(app, "succeeded") == {theme_colour(app, "success")}
        assert drawn_colours(app, "refused") == {theme_colour(app, "warning")}
        before = theme_colour(app, "success")
        app.theme = "nord"
        await pilot.pause()
        await pilot.pause()
        assert theme_colour(app, "success") != before
        assert drawn_colours(app, "succeeded") == {theme_colour(app, "success")}
        assert app_of(pilot).theme == "nord"


@pytest.mark.processes
async def test_a_held_calls_row_shows_the_decision_wherever_it_was_made(tmp_path: Path) -> None:
    """A call held for approval: rejected in the app, its row says rejected with the reason;
    approved by `diana approve` in another process, its row says approved."""
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call files_delete_file {"path": "/a"}')
        await type_command(pilot, '/call files_delete_file {"path": "/b"}')
        assert app.core is not None
        first, second = sorted(
            (p.id for p in await app.core._runtime.approvals.store.select(None)), reverse=False
        )
        await type_command(pilot, f"/reject {first} not today")
        done = await asyncio.to_thread(
            diana, app.paths.config_dir, app.paths.data_dir, "approve", second
        )
        assert done.returncode == 0, done.stderr
        pane = app.query_one(ExecutionLogPane)

        def held(proposal: str) -> tuple[str, str] | None:
            for call in pane.calls.values():
                if call.proposal == proposal and call.origin == "chat":
                    return call.status, call.summary
            return None

        await until(lambda: held(first) == ("rejected", "rejected: not today"))
        await until(lambda: held(second) == ("approved", "approved: it ran as a call of its own"))
