"""Log retention and the execution log's filters: daily JSON-lines files kept for
``logs.retention_days``, old rows pruned, `diana log --since/--tool/--status/--follow`, the
pane's filter and Enter from a call to its proposal."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from diana.core.runtime import Profile, Runtime
from diana.core.storage import execution_log as log_module
from diana.core.system.clock import Clock, parse_since
from diana.core.system.telemetry import StructuredLog
from diana.tui import cli
from diana.tui.modals.proposal_detail import ProposalDetailScreen
from diana.tui.panes.execlog import ExecutionLogPane
from diana.tui.panes.logged_calls import CallFilter
from textual.widgets import DataTable, Input
from textual.widgets._footer import FooterKey

from .commands import diana_argv
from .conftest import counting_ids, stepping_clock
from .scenarios import (
    TERMINAL_SIZE,
    app_of,
    build_app,
    prepare_dirs,
    type_command,
    until,
)
from .waits import settled, started

# Noon, so that a day's calls sit in the middle of the day whatever the boundaries.
DAY0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class SettableClock:
    """Wall time stays where the test puts it; durations advance 3 ms per reading."""

    def __init__(self, wall: datetime) -> None:
        self.wall = wall
        self._mono = 0.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        self._mono += 0.003
        return self._mono


def log_name(day: datetime) -> str:
    return f"diana-{day.astimezone().date().isoformat()}.jsonl"


async def open_runtime(config_dir: Path, data_dir: Path, clock: Clock) -> Runtime:
    return await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False), config_dir, data_dir, clock=clock
    )


async def call_time(runtime: Runtime) -> None:
    result = await runtime.orchestrator.execute("get_current_time", {"timezone": "UTC"})
    assert result.success, result.error
    await runtime.execution_log.flush()


# -- retention -------------------------------------------------------------------------------


async def test_a_month_of_calls_keeps_the_last_30_days_of_files_and_rows(
    config_dir: Path, data_dir: Path
) -> None:
    clock = SettableClock(DAY0)
    runtime = await open_runtime(config_dir, data_dir, clock)
    try:
        for day in range(35):
            clock.wall = DAY0 + timedelta(days=day)
            await call_time(runtime)
        logs = data_dir / "logs"
        kept = sorted(p.name for p in logs.iterdir())
        # Today is day 34: days 0-3 ended more than 30 days ago; day 4 onwards stays.
        assert kept == [log_name(DAY0 + timedelta(days=d)) for d in range(4, 35)]
        assert not (logs / "diana.jsonl").exists()  # every line goes to its day's file
        day10 = [json.loads(line) for line in (logs / log_name(DAY0 + timedelta(10))).open()]
        assert {line["ts"][:10] for line in day10} == {"2026-01-11"}
        assert any(line["event"] == "tool.finished" for line in day10)
        newest = [json.loads(line) for line in (logs / kept[-1]).open()]
        removed = next(line for line in newest if line["event"] == "log.expired_removed")
        assert removed["files"] == [log_name(DAY0 + timedelta(days=3))]

        calls = await runtime.recent_calls(100)
        started = [c.started_at for c in calls]
        # Rows that started 30 days ago or less are kept: day 4 at noon is exactly 30 days.
        assert started == [DAY0 + timedelta(days=d) for d in range(4, 35)]
    finally:
        await runtime.close()


async def test_start_up_removes_what_expired_while_nothing_ran(
    config_dir: Path, data_dir: Path
) -> None:
    clock = SettableClock(DAY0)
    async with await open_runtime(config_dir, data_dir, clock) as runtime:
        for day in (0, 5, 20):
            clock.wall = DAY0 + timedelta(days=day)
            await call_time(runtime)

    later = SettableClock(DAY0 + timedelta(days=45))
    async with await open_runtime(config_dir, data_dir, later) as runtime:
        # Before any call: day 20 is 25 days back and stays, days 0 and 5 are gone.
        calls = await runtime.recent_calls()
        assert [c.started_at.isoformat()[:10] for c in calls] == ["2026-01-21"]
        names = sorted(p.name for p in (data_dir / "logs").iterdir())
        assert names == [log_name(DAY0 + timedelta(days=d)) for d in (20, 45)]


async def test_retention_days_comes_from_the_settings(config_dir: Path, data_dir: Path) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    settings["logs"] = {"retention_days": 2}
    (config_dir / "settings.json").write_text(json.dumps(settings))
    clock = SettableClock(DAY0)
    async with await open_runtime(config_dir, data_dir, clock) as runtime:
        for day in range(6):
            clock.wall = DAY0 + timedelta(days=day)
            await call_time(runtime)
        assert len(await runtime.recent_calls()) == 3  # days 3, 4 and 5
    assert sorted(p.name for p in (data_dir / "logs").iterdir()) == [
        log_name(DAY0 + timedelta(days=d)) for d in (3, 4, 5)
    ]


async def test_an_idle_runtime_still_prunes_once_a_day(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_module, "PRUNE_CHECK_INTERVAL", 0.02)
    clock = SettableClock(DAY0)
    async with await open_runtime(config_dir, data_dir, clock) as runtime:
        execution_log = runtime.execution_log
        prune = execution_log.prune
        pruned = asyncio.Event()

        async def prune_and_tell(now: datetime) -> int:
            deleted = await prune(now)
            if deleted:
                pruned.set()
            return deleted

        monkeypatch.setattr(execution_log, "prune", prune_and_tell)
        await call_time(runtime)
        clock.wall = DAY0 + timedelta(days=31)  # no call is made from here on
        await asyncio.wait_for(pruned.wait(), timeout=5)
        assert await runtime.recent_calls() == []


def test_two_processes_on_either_side_of_midnight_lose_no_line(tmp_path: Path) -> None:
    base = tmp_path / "logs" / "diana.jsonl"
    late = SettableClock(DAY0.replace(hour=23, minute=59))
    early = SettableClock(DAY0.replace(hour=23, minute=59))
    first = StructuredLog(base, late, retention_days=30)
    second = StructuredLog(base, early, retention_days=30)
    first.emit("before", n=1)
    second.emit("before", n=2)
    late.wall += timedelta(minutes=2)  # one writer has passed midnight, the other not yet
    first.emit("after", n=3)
    second.emit("before", n=4)
    early.wall += timedelta(minutes=2)
    second.emit("after", n=5)
    first.close()
    second.close()

    def numbers(day: int) -> list[int]:
        lines = (base.parent / log_name(DAY0 + timedelta(days=day))).read_text().splitlines()
        return [json.loads(line)["n"] for line in lines]

    assert numbers(0) == [1, 2, 4]
    assert numbers(1) == [3, 5]


def test_since_reads_times_ago_and_iso_dates() -> None:
    now = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since(" 2h ", now) == now - timedelta(hours=2)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-03-01", now) == datetime(2026, 3, 1).astimezone()
    assert parse_since("2026-03-01T08:00+01:00", now) == datetime(2026, 3, 1, 7, tzinfo=UTC)
    for bad in ("yesterday", "7", "d7", "", "99999999999d", "999999999w"):
        with pytest.raises(ValueError, match="neither a time ago"):
            parse_since(bad, now)


# -- diana log: filters and --follow -----------------------------------------------------------


def seed(config_dir: Path, data_dir: Path, now: datetime) -> None:
    """Calls 10 days, 3 days and 1 hour before ``now``, of several tools and endings."""

    async def make() -> None:
        clock = SettableClock(now - timedelta(days=10))
        async with await open_runtime(config_dir, data_dir, clock) as runtime:
            run = runtime.orchestrator.execute
            await run("get_current_time", {"timezone": "UTC"}, correlation_id="old-time")
            await run("save_fact", {"content": "old fact"}, correlation_id="old-fact")
            clock.wall = now - timedelta(days=3)
            await run("save_fact", {"content": "tea"}, correlation_id="recent-fact")
            await run("get_current_time", {"timezone": 5}, correlation_id="recent-bad")
            clock.wall = now - timedelta(hours=1)
            await run("get_current_time", {"timezone": "UTC"}, correlation_id="new-time")
            await run("nope", {}, correlation_id="new-unknown")

    asyncio.run(make())


def diana_log(
    capsys: pytest.CaptureFixture[str], config_dir: Path, data_dir: Path, *args: str
) -> list[str]:
    """`diana log --json ARGS` in this process: the correlation ids it lists."""
    argv = ["log", "--config-dir", str(config_dir), "--data-dir", str(data_dir), "--json"]
    code = cli.main([*argv, *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return [call["correlation_id"] for call in json.loads(out.out)]


def test_log_filters_by_time_tool_and_status_and_they_combine(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    seed(config_dir, data_dir, now)

    def listed(*args: str) -> list[str]:
        return diana_log(capsys, config_dir, data_dir, *args)

    assert listed() == [
        "old-time",
        "old-fact",
        "recent-fact",
        "recent-bad",
        "new-time",
        "new-unknown",
    ]
    assert listed("--since", "7d") == ["recent-fact", "recent-bad", "new-time", "new-unknown"]
    assert listed("--since", "2h") == ["new-time", "new-unknown"]
    five_days_ago = (now - timedelta(days=5)).astimezone().date().isoformat()
    assert listed("--since", five_days_ago) == listed("--since", "7d")
    assert listed("--tool", "save_fact") == ["old-fact", "recent-fact"]
    assert listed("--status", "refused") == ["recent-bad", "new-unknown"]
    assert listed("--since", "7d", "--tool", "get_current_time") == ["recent-bad", "new-time"]
    assert listed("--since", "7d", "--tool", "get_current_time", "--status", "succeeded") == [
        "new-time"
    ]
    assert listed("--tool", "save_fact", "--status", "refused") == []
    assert listed("--status", "succeeded", "--limit", "2") == ["recent-fact", "new-time"]

    table_code = cli.main(
        ["log", "--config-dir", str(config_dir), "--data-dir", str(data_dir), "--tool", "nope"]
    )
    table = capsys.readouterr().out.splitlines()
    assert table_code == 0
    assert table[0].split() == ["STARTED", "CORRELATION", "TOOL", "STATUS", "LATENCY", "RESULT"]
    assert len(table) == 2 and "new-unknown" in table[1] and "refused" in table[1]


def test_a_bad_since_or_status_is_exit_2_naming_the_option(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["log", "--config-dir", str(config_dir), "--data-dir", str(data_dir)]
    assert cli.main([*argv, "--since", "last tuesday"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("diana: --since: 'last tuesday' is neither a time ago")
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--status", "exploded"])
    assert exited.value.code == 2
    assert "--status: invalid choice: 'exploded'" in capsys.readouterr().err


async def another_writer(config_dir: Path, data_dir: Path) -> None:
    async with await open_runtime(config_dir, data_dir, SettableClock(datetime.now(UTC))) as rt:
        await call_time(rt)


@pytest.mark.processes
def test_follow_prints_calls_another_process_makes_until_terminated(
    config_dir: Path, data_dir: Path
) -> None:
    seed(config_dir, data_dir, datetime.now(UTC))
    follow = subprocess.Popen(
        diana_argv(config_dir, data_dir, "log", "--follow", "--json", "--tool", "save_fact"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert follow.stdout is not None
        for line in follow.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # The calls already there come first, one JSON object a line.
        assert [json.loads(lines.get(timeout=30))["correlation_id"] for _ in range(2)] == [
            "old-fact",
            "recent-fact",
        ]
        asyncio.run(another_writer(config_dir, data_dir))  # not a save_fact: not shown
        made = subprocess.run(
            diana_argv(
                config_dir, data_dir, "call", "save_fact", "--args", '{"content": "elsewhere"}'
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        shown = json.loads(lines.get(timeout=30))
        assert (shown["tool"], shown["arguments"]) == ("save_fact", {"content": "elsewhere"})
        assert shown["origin"] == "cli" and shown["status"] == "succeeded"
    finally:
        follow.terminate()
        follow.wait(timeout=30)
        reader.join(timeout=10)
    assert follow.stderr is not None
    # SIGTERM ends it like Ctrl-C does: the runtime closes, the exit code is 130.
    assert follow.returncode == cli.EXIT_INTERRUPTED, follow.stderr.read()
    assert lines.empty()  # the get_current_time call was never printed


# -- the Execution Log pane ------------------------------------------------------------------


def test_the_filter_line_reads_tool_status_and_words() -> None:
    parsed = CallFilter.parse("  Tool:files  status:failed  Disk  full ")
    assert parsed.tools == ("files",) and parsed.statuses == ("failed",)
    assert parsed.words == ("disk", "full")
    assert parsed.text == "Tool:files status:failed Disk full"
    assert not CallFilter.parse("   ")


def log_rows(pane: ExecutionLogPane) -> list[tuple[str, str, str]]:
    """(correlation id, tool, status) of every row shown."""
    table = pane.table
    rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
    return [(cid, tool, status) for _time, cid, tool, _agent, _from, status, _lat, _res in rows]


async def test_slash_filters_the_pane_and_escape_clears_it(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        await type_command(pilot, "/call save_fakt {}")
        await type_command(pilot, '/call get_current_time {"timezone": 5}')
        pane = app.query_one(ExecutionLogPane)
        filter_input = app.query_one("#log-filter", Input)
        assert len(log_rows(pane)) == 3 and not filter_input.display

        await pilot.press("f6", "slash")
        assert filter_input.display and filter_input.has_focus
        await pilot.press(*"status:refused")
        await pilot.pause()
        assert log_rows(pane) == [
            ("c0ffee000002", "save_fakt", "refused"),
            ("c0ffee000003", "get_current_time", "refused"),
        ]
        assert pane.border_title == "Execution Log · filter: status:refused"

        # A new call that does not match stays out; one that does comes in.
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        await type_command(pilot, "/call nope {}")
        assert [cid for cid, _, _ in log_rows(pane)] == [
            "c0ffee000002",
            "c0ffee000003",
            "c0ffee000005",
        ]

        filter_input.value = "tool:get_current_time"
        await pilot.pause()
        assert [cid for cid, _, _ in log_rows(pane)] == [
            "c0ffee000001",
            "c0ffee000003",
            "c0ffee000004",
        ]
        await type_command(pilot, "/call nope {}")  # refused before it starts: never shown
        assert len(log_rows(pane)) == 3

        # Words match any column, together with the keys.
        pane.focus_target.focus()
        await pilot.press("slash")
        filter_input.value = "status:refused tool:get_current_time"
        await pilot.pause()
        assert log_rows(pane) == [("c0ffee000003", "get_current_time", "refused")]
        filter_input.value = "NOT OF TYPE"
        await pilot.pause()
        assert [cid for cid, _, _ in log_rows(pane)] == ["c0ffee000003"]

        await pilot.press("escape")
        await pilot.pause()
        assert len(log_rows(pane)) == 6
        assert not filter_input.display and filter_input.value == ""
        assert pane.border_title == "Execution Log"
        assert app.query_one("#log-table", DataTable).has_focus


async def test_the_filter_key_is_in_the_footer_while_the_pane_has_focus(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)

        def footer() -> list[tuple[str, str]]:
            return [(key.key_display, key.description) for key in app.query(FooterKey)]

        assert ("/", "Filter") not in footer()  # the chat has focus
        await pilot.press("f6")
        await pilot.pause()
        assert ("/", "Filter") in footer()
        assert ("esc", "Clear filter") not in footer()  # Esc is the pane's only while filtering
        await pilot.press("slash")
        await pilot.pause()
        assert ("esc", "Clear filter") in footer()


async def test_enter_on_a_call_that_needed_approval_opens_its_proposal(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call obsidian_log {"entry": "first"}')
        await type_command(pilot, '/call obsidian_log {"entry": "second"}')
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        pane = app.query_one(ExecutionLogPane)
        assert [status for _, _, status in log_rows(pane)] == [
            "pending approval",
            "pending approval",
            "succeeded",
        ]
        runtime = app_of(pilot).core._runtime
        assert runtime is not None

        await pilot.press("f6", "up", "up", "enter")  # the first obsidian_log call
        await until(lambda: isinstance(app.screen, ProposalDetailScreen))
        screen = app.screen
        assert isinstance(screen, ProposalDetailScreen)
        assert (screen.info.id, screen.info.correlation_id) == ("p000001", "c0ffee000001")
        assert screen.info.shown_arguments == {"entry": "first"}
        await pilot.press("escape")
        await pilot.pause()

        await pilot.press("down", "enter")  # the second one
        await until(lambda: isinstance(app.screen, ProposalDetailScreen))
        assert app.screen.info.id == "p000002"  # type: ignore[attr-defined]
        await pilot.press("escape")
        await pilot.pause()

        # A call that needed nobody opens nothing.
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, ProposalDetailScreen)

        # The call an approval runs points back to its proposal by its origin.
        await runtime.approvals.approve("p000002", by="test")
        await settled(app)
        await pilot.pause()
        assert log_rows(pane)[-1] == ("c0ffee000002", "obsidian_log", "succeeded")
        pane.table.move_cursor(row=pane.table.row_count - 1)
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, ProposalDetailScreen))
        assert app.screen.info.id == "p000002"  # type: ignore[attr-defined]
        assert app.screen.info.status.value == "succeeded"  # type: ignore[attr-defined]


async def test_a_pending_call_loaded_from_history_opens_its_proposal(tmp_path: Path) -> None:
    config, data = prepare_dirs(tmp_path)
    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config,
        data,
        clock=stepping_clock(),
        proposal_ids=counting_ids("q"),
    ) as rt:
        for entry in ("one", "two"):  # the same tool, in one correlation: only the id tells
            await rt.orchestrator.execute("obsidian_log", {"entry": entry}, correlation_id="turn")

    app = build_app(tmp_path)  # the same data dir: the pane starts from the database
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        await pilot.press("f6", "up", "enter")
        await until(lambda: isinstance(app.screen, ProposalDetailScreen))
        assert app.screen.info.id == "q000001"  # type: ignore[attr-defined]
        assert app.screen.info.shown_arguments == {"entry": "one"}  # type: ignore[attr-defined]
