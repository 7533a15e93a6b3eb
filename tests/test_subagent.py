"""The MCP sub-agent against real fixture servers: add, test, modify, remove, cancel,
the model's tools through the approvals gate, and the MCP Servers pane's form and request list."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diana.core.events import Event, ServerStatusChanged, SubagentChanged
from diana.core.mcp.subagent_request import NotCancellable, RequestPriority, RequestState
from diana.core.models import ErrorCode, RiskLevel
from diana.core.runtime import Profile, Runtime
from diana.tui.modals.server_form import (
    FormError,
    ServerFormScreen,
    form_entry,
    parse_args,
    parse_env,
)
from diana.tui.panes.servers import ServerRow, ServersPane
from textual.widgets import Input, Static

from .commands import diana, diana_here_async
from .conftest import stepping_clock
from .scenarios import TERMINAL_SIZE, build_app
from .waits import settled, started, until_event

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


def fixture(*extra: str, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FIXTURE, *extra], **fields}


def ready(name: str) -> Callable[[Event], bool]:
    return lambda e: isinstance(e, ServerStatusChanged) and e.server == name and e.status == "ready"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def opened(config_dir: Path, data_dir: Path, *, watch: bool) -> Runtime:
    return await Runtime.open(
        Profile.APP.but(share=False, watch=watch), config_dir, data_dir, clock=stepping_clock()
    )


# -- the sub-agent ---------------------------------------------------------------------------


@pytest.mark.processes
async def test_a_working_server_is_tested_written_and_picked_up(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    kept = {"command": "kept-server", "args": ["--flag"], "disabled": True, "autoApprove": ["x"]}
    path.write_text(json.dumps({"mcpServers": {"kept": kept}, "note": "mine"}))
    async with await opened(config_dir, data_dir, watch=True) as runtime:
        assert runtime.mcp.watching  # the app's case: the watcher applies the written file
        events, record = runtime.bus.subscribe(), runtime.bus.subscribe()
        request = runtime.subagent.add_server("fx", fixture())
        assert request.state is RequestState.QUEUED  # returned at once, before any work

        await runtime.subagent.wait(request.id)
        assert request.state is RequestState.COMPLETED, request.message
        assert request.progress == 100
        assert request.message.startswith("added fx: 10 tools (echo, delete_file")
        written = json.loads(path.read_text())
        assert written == {"mcpServers": {"kept": kept, "fx": fixture()}, "note": "mine"}

        await until_event(events, ready("fx"))
        tools = {d.name for d, _agent in runtime.orchestrator.tool_definitions()}
        assert {"fx_echo", "fx_weather"} <= tools
        echoed = await runtime.orchestrator.execute("fx_echo", {"text": "hi"})
        assert echoed.success and echoed.data == "hi"

    seen = []
    while not record.queue.empty():
        event = record.queue.get_nowait()
        if isinstance(event, SubagentChanged) and event.request == request.id:
            seen.append((event.state, event.progress, event.message))
    states = [s for s, _p, _m in seen]
    assert states[0] == "queued" and states[-1] == "completed"
    assert set(states) == {"queued", "in_progress", "completed"}
    progress = [p for _s, p, _m in seen]
    assert progress == sorted(progress) and progress[-1] == 100
    messages = " | ".join(m for _s, _p, m in seen)
    for step in ("waiting for the MCP handshake", "listing its tools", "writing mcp-servers"):
        assert step in messages


@pytest.mark.processes
async def test_broken_servers_fail_with_the_reason_and_the_file_is_unchanged(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    path.write_text('[\n  {"name": "kept", "command": "kept-server", "disabled": true}\n]\n')
    before = path.read_bytes()
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        subagent = runtime.subagent
        exits = subagent.add_server("notes", fixture("--exit-at-start", "1"))
        missing = subagent.add_server("gone", {"command": "no-such-mcp-server-here"})
        bad = subagent.add_server("bad", {"command": "x", "args": "not a list"})
        both = subagent.add_server("both", {"command": "x", "url": "http://127.0.0.1:9/mcp"})
        twice = subagent.add_server("kept", fixture())
        reserved = subagent.add_server("admin", fixture())
        await subagent.wait_idle()

        assert runtime.mcp.connections == {}
    assert path.read_bytes() == before
    for request in (exits, missing, bad, both, twice, reserved):
        assert request.state is RequestState.FAILED, request.message
    assert exits.message == (
        "the test connection failed: process exited with code 1 before the MCP handshake "
        "finished; last stderr line: fatal: FIXTURE_TOKEN is not set"
    )
    assert 'command not found: "no-such-mcp-server-here"' in missing.message
    assert bad.message == 'bad config: server "bad": args: Input should be a valid list'
    assert both.message == 'bad config: server "both": give either "command" or "url", not both'
    assert 'already has a server named "kept"' in twice.message
    assert reserved.message == 'bad config: server "admin": the name "admin" is reserved for DIANA'


@pytest.mark.processes
async def test_modify_test_and_remove_keep_the_other_entries(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    first = {"name": "first", "command": "first-server", "disabled": True, "x-extra": 1}
    path.write_text(json.dumps([first, {"name": "fx", "command": "old", "disabled": True}]))
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        subagent = runtime.subagent
        modify = subagent.modify_server("fx", fixture(timeout=5))
        await subagent.wait(modify.id)
        assert modify.state is RequestState.COMPLETED, modify.message
        assert json.loads(path.read_text()) == [first, {"name": "fx", **fixture(timeout=5)}]
        # No watcher in this process (the CLI's case): the sub-agent reloaded the manager.
        assert "fx" in runtime.mcp.connections

        test = subagent.test_server("fx")
        unknown = subagent.remove_server("nothing")
        await subagent.wait_idle()
        assert test.state is RequestState.COMPLETED and test.tools is not None
        assert {"name": "echo", "description": "Echo the text back."} in test.tools
        assert unknown.state is RequestState.FAILED
        assert unknown.message == 'mcp-servers.json has no server named "nothing"'

        remove = subagent.remove_server("fx")
        await subagent.wait(remove.id)
        assert remove.state is RequestState.COMPLETED, remove.message
        assert json.loads(path.read_text()) == [first]
        assert "fx" not in runtime.mcp.connections


@pytest.mark.processes
async def test_cancel_drops_a_queued_request_and_interrupts_one_in_progress(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    before = path.read_bytes()
    async with await opened(config_dir, data_dir, watch=True) as runtime:
        subagent = runtime.subagent
        events = runtime.bus.subscribe()
        mute = subagent.add_server("mute", fixture("--never-answer", timeout=30))
        later = subagent.add_server("later", fixture())
        started = await until_event(
            events,
            lambda e: (
                isinstance(e, SubagentChanged)
                and e.request == mute.id
                and "server started" in e.message
            ),
        )
        assert isinstance(started, SubagentChanged)
        match = re.search(r"pid (\d+)", started.message)
        assert match is not None
        pid = int(match.group(1))
        assert later.state is RequestState.QUEUED and mute.state is RequestState.IN_PROGRESS

        subagent.cancel(later.id)
        assert later.state is RequestState.CANCELLED  # at once: it never started
        assert later.message == "cancelled before it started; mcp-servers.json unchanged"

        subagent.cancel(mute.id, "changed my mind")
        await subagent.wait(mute.id)
        assert mute.state is RequestState.CANCELLED
        assert mute.message == "cancelled; mcp-servers.json unchanged"
        assert not alive(pid)  # the test connection's server was stopped
        with pytest.raises(NotCancellable, match="already cancelled"):
            subagent.cancel(mute.id)
        assert not subagent.busy and runtime.mcp.connections == {}
    assert path.read_bytes() == before


# -- the model's tools -------------------------------------------------------------------------


async def test_queued_requests_run_high_before_normal_before_low(
    config_dir: Path, data_dir: Path
) -> None:
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        events = runtime.bus.subscribe()
        subagent = runtime.subagent
        busy = subagent.add_server("mute", fixture("--never-answer", timeout=30))
        await until_event(
            events, lambda e: isinstance(e, SubagentChanged) and e.state == "in_progress"
        )
        broken = {"command": ""}  # fails at once, when its turn comes
        queued = [
            subagent.add_server("low", broken, priority=RequestPriority.LOW),
            subagent.add_server("normal1", broken),
            subagent.add_server("high", broken, priority=RequestPriority.HIGH),
            subagent.add_server("normal2", broken, priority=RequestPriority.NORMAL),
        ]
        assert queued[2].public()["priority"] == "high"
        subagent.cancel(busy.id)
        await subagent.wait_idle()
        started_order = []
        while not events.queue.empty():
            event = events.queue.get_nowait()
            if isinstance(event, SubagentChanged) and event.state == "in_progress":
                started_order.append(event.server)
        order = [name for name in dict.fromkeys(started_order) if name != "mute"]
        assert order == ["high", "normal1", "normal2", "low"]
        assert all(r.state is RequestState.FAILED for r in queued)


@pytest.mark.processes
async def test_the_model_asks_a_person_approves_and_the_server_is_added(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        orchestrator = runtime.orchestrator
        definitions = {d.name: d for d, _agent in orchestrator.tool_definitions()}
        addition = definitions["mcp_request_server_addition"]
        assert addition.risk is RiskLevel.IRREVERSIBLE and addition.annotations.destructive
        assert "required" not in addition.parameters  # a config, or a registry name
        assert addition.parameters["oneOf"] == [
            {"required": ["config"]},
            {"required": ["registry_name"]},
        ]
        for name in ("mcp_check_subagent_status", "mcp_cancel_subagent_work"):
            assert definitions[name].risk is RiskLevel.REVERSIBLE
        assert definitions["mcp_list_available_tools"].annotations.read_only

        held = await orchestrator.execute(
            "mcp_request_server_addition", {"name": "fx", "config": fixture()}
        )
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        assert runtime.subagent.recent() == [] and path.read_text() == "[]"

        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.result is not None and decision.result.success
        request_id = decision.result.data["request_id"]
        assert decision.result.data["state"] == "queued"
        await runtime.subagent.wait(request_id)

        status = await orchestrator.execute("mcp_check_subagent_status", {"request_id": request_id})
        assert status.success, status.error
        assert (status.data["state"], status.data["progress"]) == ("completed", 100)
        every = await orchestrator.execute("mcp_check_subagent_status", {})
        assert [r["state"] for r in every.data["requests"]] == ["completed"]
        assert json.loads(path.read_text()) == [{"name": "fx", **fixture()}]

        await runtime.mcp.wait_ready(["fx"])
        listed = await orchestrator.execute("mcp_list_available_tools", {"server": "fx"})
        assert listed.success, listed.error
        (server,) = listed.data["servers"]
        assert server["status"] == "ready"
        assert {"name": "fx_echo", "description": "Echo the text back."} in server["tools"]

        cancel = {"request_id": request_id}
        too_late = await orchestrator.execute("mcp_cancel_subagent_work", cancel)
        assert too_late.error == f"request {request_id} already completed"


@pytest.mark.processes
async def test_the_model_tests_changes_and_removes_a_server_through_the_gate(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    path.write_text(json.dumps({"mcpServers": {"fx": fixture()}}))
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        execute = runtime.orchestrator.execute
        unknown = await execute("mcp_test_server", {"server": "nope"})
        assert unknown.error == 'argument "server": no MCP server "nope" (configured: fx)'

        tested = await execute("mcp_test_server", {"server": "fx"})  # reversible: runs now
        assert tested.success, tested.error
        request = await runtime.subagent.wait(tested.data["request_id"])
        assert request.state is RequestState.COMPLETED and request.message.startswith("fx works")

        changed = await execute(
            "mcp_request_server_change", {"server": "fx", "config": fixture("--page-size", "2")}
        )
        assert changed.error_code is ErrorCode.PENDING_APPROVAL  # a person decides
        decision = await runtime.approvals.approve(changed.data["proposal_id"], by="test")
        assert decision.result is not None and decision.result.success, decision.result
        request = await runtime.subagent.wait(decision.result.data["request_id"])
        assert request.state is RequestState.COMPLETED, request.message
        assert json.loads(path.read_text())["mcpServers"]["fx"]["args"][-2:] == [
            "--page-size",
            "2",
        ]

        removal = await execute("mcp_request_server_removal", {"server": "fx"})
        assert removal.error_code is ErrorCode.PENDING_APPROVAL
        assert json.loads(path.read_text())["mcpServers"] != {}
        decision = await runtime.approvals.approve(removal.data["proposal_id"], by="test")
        assert decision.result is not None and decision.result.success, decision.result
        await runtime.subagent.wait(decision.result.data["request_id"])
        assert json.loads(path.read_text())["mcpServers"] == {}


async def test_bad_arguments_name_the_field(config_dir: Path, data_dir: Path) -> None:
    async with await opened(config_dir, data_dir, watch=False) as runtime:
        execute = runtime.orchestrator.execute
        missing = await execute("mcp_request_server_addition", {"name": "fx"})
        assert missing.error_code is ErrorCode.INVALID_ARGUMENTS
        assert missing.error == (
            "invalid arguments for mcp_request_server_addition: give exactly one of the "
            'arguments "config" or "registry_name"'
        )
        wrong = await execute(
            "mcp_request_server_addition", {"name": "fx", "config": {"args": "x"}}
        )
        assert "argument \"config.args\": 'x' is not of type 'array'" in (wrong.error or "")
        bad_name = await execute("mcp_request_server_addition", {"name": "no spaces", "config": {}})
        assert 'argument "name"' in (bad_name.error or "")

        # Valid JSON, invalid server: known once a person approved the call, before any work.
        held = await execute(
            "mcp_request_server_addition",
            {"name": "both", "config": {"command": "x", "url": "http://127.0.0.1:9/mcp"}},
        )
        decision = await runtime.approvals.approve(held.data["proposal_id"], by="test")
        assert decision.result is not None
        assert decision.result.error_code is ErrorCode.INVALID_ARGUMENTS
        assert decision.result.error == (
            'argument "config": give either "command" or "url", not both'
        )
        assert runtime.subagent.recent() == []

        unknown = await execute("mcp_check_subagent_status", {"request_id": "req-99"})
        assert unknown.error == 'argument "request_id": no sub-agent request "req-99"'
        cancel = await execute("mcp_cancel_subagent_work", {})
        assert 'missing required argument "request_id"' in (cancel.error or "")
        server = await execute("mcp_list_available_tools", {"server": "nope"})
        assert server.error == 'argument "server": no MCP server "nope" (configured: none)'


# -- the form and the pane ---------------------------------------------------------------------


def test_the_form_reads_args_env_and_names_a_wrong_field() -> None:
    assert parse_args('--root "/my files" -v') == ["--root", "/my files", "-v"]
    assert parse_args('["--root", "/my files"]') == ["--root", "/my files"]
    assert parse_env("A=1\n\n# note\nB = two words\n") == {"A": "1", "B": "two words"}
    with pytest.raises(FormError, match="env line 2: expected KEY=VALUE"):
        parse_env("A=1\nnot a pair")
    with pytest.raises(FormError, match=r"^args: "):
        parse_args('["unclosed"')
    remote = form_entry("web", "", "", "", "https://example.com/mcp", "sse", "5")
    assert remote.config == {"url": "https://example.com/mcp", "transport": "sse", "timeout": 5.0}
    with pytest.raises(FormError, match=r"^timeout: Input should be less than or equal to 30"):
        form_entry("t", "uvx", "", "", "", "sse", "99")
    with pytest.raises(FormError, match=r"^command: give a command"):
        form_entry("t", "", "", "", "", "sse")


@pytest.mark.processes
async def test_the_add_server_form_queues_a_request_the_pane_follows_it(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await started(app)
        runtime = app.core._runtime
        assert runtime is not None
        events = runtime.bus.subscribe()
        pane = app.query_one(ServersPane)
        requests = pane.query_one("#subagent-requests", Static)
        assert not requests.display

        await pilot.press("f4", "a")
        assert isinstance(app.screen, ServerFormScreen)
        await pilot.press("f", "x", "enter")  # no command yet: the form says so and stays
        error = str(app.screen.query_one("#server-form-error", Static).render())
        assert error.startswith("command: give a command")
        assert isinstance(app.screen, ServerFormScreen) and runtime.subagent.recent() == []
        app.screen.query_one("#server-form-command", Input).value = sys.executable
        app.screen.query_one("#server-form-args", Input).value = json.dumps([FIXTURE])
        await pilot.press("enter")
        assert not isinstance(app.screen, ServerFormScreen)

        (request,) = runtime.subagent.recent()
        assert (request.kind.value, request.server, request.origin) == ("add_server", "fx", "tui")
        await runtime.subagent.wait(request.id)
        await until_event(events, ready("fx"))  # the app's watcher applied the written file
        await settled(app)
        await pilot.pause()
        shown = str(requests.render())
        assert requests.display and "add fx ██████████ 100% completed: added fx" in shown
        assert app.query_one("#server-fx", ServerRow).info.status == "ready"

        await pilot.press("a")  # Esc leaves the form without asking for anything
        assert isinstance(app.screen, ServerFormScreen)
        await pilot.press("escape")
        assert len(runtime.subagent.recent()) == 1

        mute = runtime.subagent.add_server("mute", fixture("--never-answer", timeout=30))
        await until_event(
            events,
            lambda e: (
                isinstance(e, SubagentChanged)
                and e.request == mute.id
                and "server started" in e.message
            ),
        )
        await pilot.press("x")  # the latest open request
        await runtime.subagent.wait(mute.id)
        assert mute.state is RequestState.CANCELLED
        await settled(app)
        await pilot.pause()
        lines = str(requests.render()).splitlines()
        assert lines[1].startswith("⊘ add mute") and "cancelled" in lines[1]
        assert lines[2].startswith("✓ add fx")


@pytest.mark.processes
async def test_a_requests_state_is_seen_by_every_process_and_after_a_restart(
    config_dir: Path, data_dir: Path
) -> None:
    """A request made by `diana` in one process is answered for by another, and by the same
    data dir opened anew; one left open by a process that died is said to be interrupted."""
    broken = json.dumps({"command": sys.executable, "args": [FIXTURE, "--exit-at-start", "3"]})
    made = await asyncio.to_thread(
        diana,
        config_dir,
        data_dir,
        "call",
        "mcp_cancel_subagent_work",
        "--args",
        '{"request_id": "req-none"}',
    )
    assert made.returncode == 2  # no such request anywhere
    async with await opened(config_dir, data_dir, watch=False) as first:
        request = first.subagent.add_server("broken", json.loads(broken))
        await first.subagent.wait(request.id)
        assert request.state is RequestState.FAILED
    asked = await asyncio.to_thread(
        diana,
        config_dir,
        data_dir,
        "call",
        "mcp_check_subagent_status",
        "--args",
        json.dumps({"request_id": request.id}),
        "--json",
    )
    assert asked.returncode == 0, asked.stderr
    seen = json.loads(asked.stdout)["data"]
    assert (seen["state"], seen["server"], seen["priority"]) == ("failed", "broken", "normal")
    assert "process exited with code 3" in seen["message"]
    assert seen["stderr_tail"][-1] == "fatal: FIXTURE_TOKEN is not set"

    # A request a process had in progress when it was killed.
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await gone.wait()
    async with await opened(config_dir, data_dir, watch=False) as second:
        await second.db.execute(
            "INSERT INTO subagent_requests (id, kind, server, priority, state, progress, "
            "message, origin, pid, created_at, updated_at) VALUES ('req-dead', 'add_server', "
            "'x', 'high', 'in_progress', 30, 'waiting for the MCP handshake', 'cli', ?, "
            "'2026-03-14T09:30:00+00:00', '2026-03-14T09:30:00+00:00')",
            (gone.pid,),
        )
        every = await second.orchestrator.execute("mcp_check_subagent_status", {})
        assert every.success, every.error
        states = {r["request_id"]: r for r in every.data["requests"]}
        assert states[request.id]["state"] == "failed"
        dead = states["req-dead"]
        assert dead["state"] == "cancelled" and dead["message"].startswith(
            f"interrupted: the diana process that ran it (pid {gone.pid}) stopped"
        )


@pytest.mark.processes
async def test_the_sub_agents_tests_and_installs_are_charged_to_it(
    config_dir: Path, data_dir: Path
) -> None:
    # The system clock: `diana cost` shows the real today.
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir
    ) as runtime:
        before = runtime.cost.snapshot().agents_today.get("mcp-admin", 0.0)
        request = runtime.subagent.test_server("fx", fixture())
        await runtime.subagent.wait(request.id)
        assert request.state is RequestState.COMPLETED, request.message
        after = runtime.cost.snapshot()
        await runtime.cost.save()
    assert before == 0.0 and after.agents_today["mcp-admin"] > 0
    assert "mcp-admin" not in after.servers_today  # an agent's work, not a server's
    shown = await diana_here_async(config_dir, data_dir, "cost", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["agents"]["mcp-admin"] > 0
