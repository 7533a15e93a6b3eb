"""The app through Textual's Pilot: direct commands, live log, agents, focus keys."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
from diana.core.approvals.proposal import Proposal, ProposalStatus
from diana.core.events import ServerStatusChanged
from diana.tui.app import DianaApp, make_app
from diana.tui.modals.prompts import RejectReasonScreen
from diana.tui.modals.proposal_detail import ProposalDetailScreen
from diana.tui.modals.server_detail import ServerDetailScreen
from diana.tui.panes.approvals import ApprovalsPane
from diana.tui.panes.chat import ChatPane
from diana.tui.panes.chat_commands import CommandError, parse_call
from diana.tui.panes.logged_calls import COLUMNS as LOG_COLUMNS
from diana.tui.panes.servers import ServerRow, ServersPane
from diana.tui.panes.transcript import PROMPT, ApprovalPrompt
from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from .fixtures.fake_ollama import FakeOllama
from .scenarios import (
    FILES,
    MIXED_STATES,
    TERMINAL_SIZE,
    ask,
    build_app,
    make_proposals,
    prepare_dirs,
    settle,
    type_command,
)
from .waits import settled, started


def transcript(app: DianaApp) -> str:
    """The chat as one line of words: soft wraps do not split what a test looks for."""
    return " ".join(app.query_one(ChatPane).plain_text().split())


def log_rows(app: DianaApp) -> list[dict[str, str]]:
    """Each row of the Execution Log, as its cells by column (time, cid, tool, agent, from,
    status, latency, result)."""
    table = app.query_one("#log-table", DataTable)
    keys = [column.key for column in LOG_COLUMNS]
    return [
        dict(zip(keys, (str(cell) for cell in table.get_row_at(i)), strict=True))
        for i in range(table.row_count)
    ]


async def test_call_shows_its_result_in_chat_and_in_the_execution_log(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')

        text = transcript(app)
        assert "✓ get_current_time" in text
        assert '"iso": "2026-03-14T09:26:53' in text
        rows = log_rows(app)
        assert len(rows) == 1
        row = rows[0]
        assert (row["cid"], row["tool"], row["agent"], row["from"], row["status"]) == (
            "c0ffee000001",
            "get_current_time",
            "clock",
            "chat",
            "succeeded",
        )
        assert row["latency"].endswith(" ms") and '"timezone": "UTC"' in row["result"]


async def test_failures_are_one_clear_line_never_a_traceback(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call get_current_time {"timezone": 5}')
        await type_command(pilot, "/call save_fakt {}")
        await type_command(pilot, "/call save_fact {oops")
        await type_command(pilot, "/frobnicate")

        text = transcript(app)
        # One sentence each, spaced, the code last: never "get_current_timeinvalid_arguments".
        assert (
            "✗ invalid arguments for get_current_time: argument "
            "\"timezone\": 5 is not of type 'string' (invalid_arguments)" in text
        )
        assert "✗ unknown tool save_fakt; did you mean save_fact? (tool_not_found)" in text
        assert "arguments: not valid JSON" in text
        assert "Unknown command /frobnicate" in text
        assert "Traceback" not in text
        statuses = [row["status"] for row in log_rows(app)]
        assert statuses == ["refused", "refused"]


async def test_tools_and_help_list_what_can_be_typed(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, "/tools")
        await type_command(pilot, "/help")
        text = transcript(app)
        for name in ("save_fact", "search_memory", "obsidian_log", "get_current_time"):
            assert name in text
        assert "/call TOOL {json}" in text


async def test_copy_puts_the_conversation_on_the_clipboard(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call get_current_time {"timezone": "UTC"}')
        await type_command(pilot, "/call save_fakt {}")
        await type_command(pilot, "/copy")
        copied = app.clipboard
        assert PROMPT + '/call get_current_time {"timezone": "UTC"}' in copied
        assert '"timezone": "UTC"' in copied  # the result, as shown
        assert "did you mean save_fact?" in copied
        assert "Copied the conversation" in transcript(app)


async def test_agents_pane_shows_builtin_agents_healthy(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        await pilot.pause()
        table = app.query_one("#agents-table", DataTable)
        rows = {
            str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
            for i in range(table.row_count)
        }
        assert set(rows) == {
            "memory",
            "obsidian",
            "clock",
            "web",
            "human",
            "code",
            "local-tools",
            "mcp-admin",
            "sampling",
        }
        assert all(row[1] == "● healthy" for row in rows.values())
        assert app.query_one("#agents").border_title == "Agents 9/9 healthy"


async def test_agent_state_changes_reach_the_agents_pane(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        assert app.core is not None
        await app.core._runtime.orchestrator.stop_agent("obsidian")
        await settled(app)
        await pilot.pause()
        table = app.query_one("#agents-table", DataTable)
        row = [str(c) for c in table.get_row("obsidian")]
        assert row[1:3] == ["● unknown", "stopped"]
        assert app.query_one("#agents").border_title == "Agents 8/9 healthy"


async def test_history_from_earlier_sessions_is_in_the_log(tmp_path: Path) -> None:
    first = build_app(tmp_path)
    async with first.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call save_fact {"content": "kept across restarts"}')
    second = build_app(tmp_path)
    async with second.run_test(size=TERMINAL_SIZE) as pilot:
        await started(second)
        rows = log_rows(second)
        assert [(r["tool"], r["status"]) for r in rows] == [("save_fact", "succeeded")]


async def test_function_keys_focus_each_pane(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        expected = {"f3": "approvals", "f4": "servers", "f5": "agents", "f6": "log", "f2": "chat"}
        for key, pane_id in expected.items():
            await pilot.press(key)
            focused = app.focused
            assert focused is not None
            assert pane_id in [node.id for node in focused.ancestors_with_self], key
        assert isinstance(app.focused, Input)


@pytest.mark.processes
async def test_keys_typed_at_once_after_a_function_key_reach_the_pane_it_focuses(
    tmp_path: Path,
) -> None:
    """A script types F3, then F2 and a command in one burst, faster than the screen is
    drawn: every key after F2 goes to the chat input. None reaches the Approvals table (its
    a, r, h and Enter would decide, filter or open a dialog)."""
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=(80, 24)) as pilot:
        await make_proposals(pilot)
        assert app.core is not None
        store = app.core._runtime.approvals.store
        for _ in range(3):
            burst = ["f3", "a", "f2", *"/reject nosuch", "enter", "f3", "f2", *"/help", "enter"]
            driver = app._driver
            assert driver is not None
            for key in burst:  # all queued before the first is handled, as a script types
                char = {"f2": None, "f3": None, "enter": "\r"}.get(key, key)
                name = {" ": "space", "/": "slash"}.get(key, key)
                driver.send_message(events.Key(name, char))
            await settled(app)
            await pilot.pause()
            assert app.screen is app.main, type(app.screen).__name__
            assert isinstance(app.focused, Input) and app.focused.id == "chat-input"
            assert not app.query_one(ApprovalsPane).history
        assert transcript(app).count("no proposal nosuch") == 3
        assert transcript(app).count("/approve ID") >= 3  # /help answered each time
        assert not await store.select((ProposalStatus.PENDING,))  # each burst's a decided one


@pytest.mark.processes
async def test_a_key_typed_before_a_function_key_acts_where_it_was_typed(
    tmp_path: Path,
) -> None:
    """R typed in MCP Servers (reconnect all) with F3 right behind it: the servers are
    reconnected; the Approvals pane's R (reject and always deny) is never what it does."""
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=(80, 24)) as pilot:
        await make_proposals(pilot)
        assert app.core is not None
        await pilot.press("f4")
        driver = app._driver
        assert driver is not None
        for key, char in (("R", "R"), ("f3", None)):
            driver.send_message(events.Key(key, char))
        await settled(app)
        await pilot.pause()
        assert app.screen is app.main, type(app.screen).__name__  # no reject dialog
        pending = await app.core._runtime.approvals.store.select((ProposalStatus.PENDING,))
        assert len(pending) == 3
        assert app.query_one(ApprovalsPane).table.has_focus


async def test_ctrl_q_quits_and_closes_the_runtime(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        runtime = app.core._runtime
        assert runtime is not None
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.return_code == 0
    assert app.core is None
    assert runtime.log.closed


def test_parse_call() -> None:
    assert parse_call('get_current_time {"timezone": "UTC"}').arguments == {"timezone": "UTC"}
    assert parse_call("save_fact").arguments == {}
    for bad in ("", "x [1]", "x {"):
        try:
            parse_call(bad)
        except CommandError:
            continue
        raise AssertionError(f"{bad!r} parsed")


async def test_an_unusable_data_dir_is_explained_in_the_chat(tmp_path: Path) -> None:
    config_dir, _ = prepare_dirs(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    app = make_app(config_dir, blocker / "data")
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        await pilot.pause()
        text = transcript(app)
        assert "DIANA could not start: cannot open the database" in text
        assert "Not a directory" in text and "Traceback" not in text
        assert app.core is None
        await pilot.press("ctrl+q")
    assert app.startup_error is not None


async def test_markup_like_text_in_results_is_shown_as_typed(tmp_path: Path) -> None:
    first = build_app(tmp_path)
    async with first.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call save_fact {"content": "close with [/] or [/bold]"}')
        assert "close with [/] or [/bold]" in log_rows(first)[0]["result"]
    again = build_app(tmp_path)  # the same row loaded from history at start
    async with again.run_test(size=TERMINAL_SIZE) as pilot:
        await started(again)
        assert again.startup_error is None
        assert "close with [/] or [/bold]" in log_rows(again)[0]["result"]


async def test_secret_arguments_typed_in_chat_are_not_echoed(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await type_command(pilot, '/call save_fact {"content": "x", "api_key": "sk-LEAK"}')
        text = transcript(app)
        assert '/call save_fact {"content": "x", "api_key": "***"}' in text
        assert "sk-LEAK" not in text


@pytest.mark.processes
async def test_servers_pane_keys_reconnect_and_open_details(tmp_path: Path) -> None:
    app = build_app(tmp_path, MIXED_STATES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        assert app.core is not None
        files = app.core._runtime.mcp.connections["files"]
        first_pid = files.state.pid
        await pilot.press("f4")
        pane = app.query_one(ServersPane)
        assert pane.selected_server() == "files"

        await pilot.press("r")
        await app.core._runtime.mcp.wait_reconnected(["files"])
        assert files.ready and files.state.pid != first_pid

        notes = app.core._runtime.mcp.connections["notes"]
        attempts = notes.state.attempts
        await pilot.press("R")
        await app.core._runtime.mcp.wait_reconnected(["files", "notes", "github"])
        assert notes.state.attempts == attempts + 1

        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ServerDetailScreen)
        assert app.screen.info.name == "notes"
        stderr = str(app.screen.query_one("#detail-stderr", Static).render())
        assert "fatal: FIXTURE_TOKEN is not set" in stderr
        await pilot.press("escape")
        assert not isinstance(app.screen, ServerDetailScreen)


@pytest.mark.processes
async def test_the_reconnect_button_works_with_the_mouse(tmp_path: Path) -> None:
    app = build_app(tmp_path, MIXED_STATES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        assert app.core is not None
        files = app.core._runtime.mcp.connections["files"]
        first_pid = files.state.pid
        await pilot.click("#server-files .reconnect")
        await app.core._runtime.mcp.wait_reconnected(["files"])
        assert files.ready and files.state.pid != first_pid


@pytest.mark.processes
async def test_a_killed_server_shows_down_with_its_signal(tmp_path: Path) -> None:
    app = build_app(tmp_path, MIXED_STATES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        assert app.core is not None
        files = app.core._runtime.mcp.connections["files"]
        assert files.state.pid is not None
        events = app.core._runtime.bus.subscribe()
        os.kill(files.state.pid, signal.SIGKILL)
        async with asyncio.timeout(5):
            while True:
                event = await events.get()
                if (
                    isinstance(event, ServerStatusChanged)
                    and event.server == "files"
                    and event.status == "error"
                ):
                    break
        await settled(app)
        await pilot.pause()
        row = app.query_one("#server-files", ServerRow)
        assert row.info.status == "error"
        assert "killed by SIGKILL" in (row.info.last_error or "")


async def decided(app: DianaApp, pilot: Pilot[int]) -> None:
    """Wait for the decision worker, then for the panes to show its outcome."""
    await settled(app)
    await settled(app)
    await pilot.pause()


@pytest.mark.processes
async def test_approvals_keys(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await make_proposals(pilot)
        assert app.core is not None
        store = app.core._runtime.approvals.store
        pane = app.query_one(ApprovalsPane)
        assert pane.border_title == "Approvals · 3 pending"
        # The chat's inline prompt for the last /call has the keys; the pane never takes them.
        assert isinstance(app.focused, ApprovalPrompt)
        assert app.focused.proposal.id == "p000003"

        await pilot.press("f3")
        assert pane.selected_proposal() == "p000003"  # the newest
        await pilot.press("a")
        await decided(app, pilot)
        assert (await store.get("p000003")).status is ProposalStatus.SUCCEEDED
        assert "p000003 files_echo: ~/.ssh/id_ed25519" in str(
            app.query_one("#approvals-last", Static).render()
        )
        last = log_rows(app)[-1]
        assert (last["tool"], last["agent"], last["status"]) == (
            "files_echo",
            "mcp-files",
            "succeeded",
        )

        await pilot.press("r")
        assert isinstance(app.screen, RejectReasonScreen)
        app.screen.query_one(Input).value = "not this one"
        await pilot.press("enter")
        await decided(app, pilot)
        rejected = await store.get("p000002")
        assert (rejected.status, rejected.reject_reason) == (
            ProposalStatus.REJECTED,
            "not this one",
        )

        await pilot.press("enter")
        assert isinstance(app.screen, ProposalDetailScreen)
        assert app.screen.info.id == "p000001"
        await pilot.press("escape")

        await pilot.press("A")
        await decided(app, pilot)
        assert (await store.get("p000001")).status is ProposalStatus.SUCCEEDED
        policy = json.loads((tmp_path / "config" / "policy.json").read_text())
        assert policy["tools"]["files_delete_file"] == {
            "rule": "allow",
            "server": "files",
            "identity": app.core._runtime.mcp.identity_of("files"),
        }
        assert pane.border_title == "Approvals"

        await pilot.press("h")
        await settled(app)
        await pilot.pause()
        assert pane.table.row_count == 3
        assert pane.border_title == "Approvals · history"


@pytest.mark.processes
async def test_always_deny_rejects_and_denies_from_then_on(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call files_delete_file {"path": "x"}')
        await pilot.press("f3", "R")
        await decided(app, pilot)
        assert app.core is not None
        assert (
            await app.core._runtime.approvals.store.get("p000001")
        ).status is ProposalStatus.REJECTED
        await type_command(pilot, '/call files_delete_file {"path": "y"}')
        assert "denied_by_policy" in transcript(app)
        assert app.core._runtime.mcp.connections["files"].state.calls == 0


class ApprovalsHost(App[None]):
    """The Approvals pane alone."""

    def compose(self) -> ComposeResult:
        yield ApprovalsPane(id="approvals")


def pending(n: int, **changes: str) -> Proposal:
    return Proposal(
        id=f"p{n:05d}",
        tool="files_delete_file",
        agent="mcp-files",
        arguments={"path": f"/tmp/{n}"},
        risk="irreversible",
        reason="test",
        confidence=None,
        correlation_id=f"c{n}",
        origin="test",
        status=ProposalStatus.PENDING,
        created_at=f"2026-03-14T09:00:{n:02d}+00:00",
    ).model_copy(update=changes)


async def test_the_approvals_pane_changes_only_the_rows_that_changed() -> None:
    """Thousands listed, a decision or a new proposal costs a row, not the list: rows that
    did not change keep their cells; the selected proposal stays selected."""
    app = ApprovalsHost()
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(ApprovalsPane)
        first = [pending(n) for n in (4, 3, 2, 1)]
        pane.show(first, 4)
        pane.table.move_cursor(row=2)
        await pilot.pause()
        kept = pane.table.get_row("p00003")
        then = [pending(5), first[1], pending(2, tool="files_echo"), first[3]]  # 4 decided
        pane.show(then, 4)
        await pilot.pause()
        table = pane.table
        assert [row.key.value for row in table.ordered_rows] == [p.id for p in then]
        assert all(a is b for a, b in zip(table.get_row("p00003"), kept, strict=True))
        assert str(table.get_row("p00002")[2]) == "files_echo"
        assert pane.selected_proposal() == "p00002"
        assert pane.border_title == "Approvals · 4 pending"
        pane.show(then[1:], 3)  # the selected one stays, one row up
        assert pane.selected_proposal() == "p00002" and table.cursor_row == 1
        pane.show([then[1]], 1)  # gone: the newest is selected
        assert pane.selected_proposal() == "p00003"


def offered_keys(app: DianaApp) -> set[str]:
    """What the footer offers now: the descriptions of the enabled, shown bindings."""
    return {
        b.binding.description
        for b in app.active_bindings.values()
        if b.enabled and b.binding.show and b.binding.description
    }


async def test_the_footer_offers_only_keys_that_do_something_now(tmp_path: Path) -> None:
    """A tool-call line offers Expand when folded and Fold when open, never both; the log
    offers x only on a call that is running."""
    time_call = {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]}
    with FakeOllama([time_call, {"content": "Noon."}]) as fake:
        await footer_keys(build_app(tmp_path, ollama=fake.url))


async def footer_keys(app: DianaApp) -> None:
    from diana.tui.panes.transcript import ToolCallLine

    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        await ask(pilot, "what time is it?")
        await pilot.press("f6")
        await settled(app)
        assert "Cancel call" not in offered_keys(app)  # the only call has finished
        app.query_one(ToolCallLine).focus()
        await pilot.pause()
        assert "Expand" in offered_keys(app) and "Fold" not in offered_keys(app)
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one(ToolCallLine).expanded
        assert "Fold" in offered_keys(app) and "Expand" not in offered_keys(app)
        await pilot.press("space")
        await pilot.pause()
        assert not app.query_one(ToolCallLine).expanded


@pytest.mark.processes
async def test_the_approvals_footer_offers_decisions_only_while_one_is_pending(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, FILES)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f3")
        await settled(app)
        assert not {"Approve", "Reject", "Always allow", "Always deny"} & offered_keys(app)
        assert {"History", "Policy"} <= offered_keys(app)
        await type_command(pilot, '/call files_delete_file {"path": "/srv/a.pdf"}')
        await pilot.press("f3")
        await settled(app)
        assert {"Approve", "Reject", "Always allow", "Always deny"} <= offered_keys(app)
        await pilot.press("h")  # decided history: nothing there to decide
        await settled(app)
        assert not {"Approve", "Reject"} & offered_keys(app)


async def test_a_second_app_in_a_process_parses_no_css_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """styles/app.tcss and each widget's default CSS are parsed once per process: the next
    app made in it (the screenshot script makes dozens) has the very same rules, unparsed."""
    from textual.css import stylesheet

    async def rules_of(app: DianaApp) -> list[tuple[object, ...]]:
        async with app.run_test(size=(80, 24)) as pilot:
            await started(app)
            await pilot.press("f1")  # a dialog, with CSS of its own
            await pilot.pause()
            return [
                (rule.selectors, sorted(map(repr, rule.styles.get_rules().items())))
                for rule in app.stylesheet.rules
            ]

    first = await rules_of(build_app(tmp_path / "first"))
    parse = stylesheet.parse
    parsed: list[object] = []

    def counted(*args: object, **kwargs: object) -> object:
        parsed.append(args[2])  # where the CSS came from
        return parse(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stylesheet, "parse", counted)
    assert await rules_of(build_app(tmp_path / "second")) == first
    assert parsed == []
