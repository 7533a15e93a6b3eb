"""Switching MCP servers off and on: `diana servers disable/enable` and e in MCP Servers,
written through the one config writer and applied by a running app at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from diana.core.mcp.servers_document import document_switched
from diana.core.mcp.subagent_request import RequestFailed
from diana.tui.panes.servers import ServerRow, ServersPane

from .commands import diana, start_diana
from .live_apps import published
from .processes import alive
from .scenarios import build_app, fixture_server, settle, until
from .waits import settled


def entries(config_dir: Path) -> dict[str, Any]:
    return dict(json.loads((config_dir / "mcp-servers.json").read_text())["mcpServers"])


def finish(processes: list[subprocess.Popen[str]]) -> list[tuple[str, str]]:
    return [process.communicate(timeout=60) for process in processes]


def offered(app: Any) -> set[str]:
    """The tools the model is offered."""
    return {tool["function"]["name"] for tool in app.core._runtime.orchestrator.ollama_tools()}


def test_switching_keeps_the_file_shape_and_every_other_key() -> None:
    listed = [{"name": "a", "command": "x", "x-note": 1}, {"name": "b", "url": "http://h/mcp"}]
    off = document_switched(listed, "a", enabled=False)
    assert off == [{"name": "a", "command": "x", "x-note": 1, "disabled": True}, listed[1]]
    assert document_switched(off, "a", enabled=True) == listed

    named = {"mcpServers": {"a": {"command": "x", "disabled": False}, "b": {}}, "other": 1}
    off = document_switched(named, "a", enabled=False)
    # An existing key keeps its place; the rest of the document is untouched.
    assert off == {"mcpServers": {"a": {"command": "x", "disabled": True}, "b": {}}, "other": 1}
    assert document_switched(off, "a", enabled=True)["mcpServers"]["a"] == {"command": "x"}
    with pytest.raises(RequestFailed, match='no server named "c"'):
        document_switched(named, "c", enabled=False)


@pytest.mark.processes
async def test_disable_and_enable_from_the_cli_apply_in_the_running_app(tmp_path: Path) -> None:
    app = build_app(tmp_path, servers={"a": fixture_server(), "b": fixture_server()})
    config_dir, data_dir = app.paths.config_dir, app.paths.data_dir
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        mcp = app.core._runtime.mcp
        pid = mcp.connections["a"].state.pid
        assert pid is not None and "a_echo" in offered(app)

        done = await asyncio.to_thread(diana, config_dir, data_dir, "servers", "disable", "a")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("a disabled in mcp-servers.json: diana-tui (pid ")
        assert entries(config_dir)["a"] == {**fixture_server(), "disabled": True}
        # The app stops it at once: its process is gone, its tools are not offered.
        await until(lambda: "a_echo" not in offered(app) and not alive(pid), within=15)
        assert "a" not in mcp.connections and "b_echo" in offered(app)
        await settled(app)
        pane = app.query_one(ServersPane)
        row = pane.query_one("#server-a", ServerRow)
        assert str(row.query_one(".server-badge").render()) == "○ disabled"
        assert pane.border_title == "MCP Servers 1/1 ready · 1 disabled"

        # `diana` beside it sees it disabled (once the app has written what it sees, within
        # PUBLISH_DELAY of the change), and a call of its tool says how to switch it on.
        await until(lambda: published(data_dir) == ["disabled", "ready"], within=15)
        listed = await asyncio.to_thread(diana, config_dir, data_dir, "servers", "--json")
        assert [(s["name"], s["status"]) for s in json.loads(listed.stdout)] == [
            ("a", "disabled"),
            ("b", "ready"),
        ]
        assert listed.returncode == 0  # a disabled server is not a failed one
        call = await asyncio.to_thread(
            diana, config_dir, data_dir, "call", "a_echo", "--args", '{"text": "hi"}'
        )
        assert call.returncode != 0
        assert "a_echo would come from MCP server a, which is disabled" in call.stderr
        again = await asyncio.to_thread(diana, config_dir, data_dir, "servers", "disable", "a")
        assert again.stdout == "a is already disabled.\n"

        done = await asyncio.to_thread(diana, config_dir, data_dir, "servers", "enable", "a")
        assert done.returncode == 0, done.stderr
        assert "disabled" not in entries(config_dir)["a"]
        await until(lambda: "a" in mcp.connections and mcp.connections["a"].ready, within=15)
        assert mcp.connections["a"].state.pid not in (None, pid)
        await until(lambda: "a_echo" in offered(app))

        unknown = await asyncio.to_thread(diana, config_dir, data_dir, "servers", "enable", "zz")
        assert unknown.returncode == 2
        assert "no MCP server named zz (configured: a, b)" in unknown.stderr


@pytest.mark.processes
async def test_e_in_the_servers_pane_switches_the_selected_server(tmp_path: Path) -> None:
    app = build_app(tmp_path, servers={"a": fixture_server(), "b": fixture_server()})
    config_dir = app.paths.config_dir
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        mcp = app.core._runtime.mcp
        await pilot.press("f4", "down")
        pane = app.query_one(ServersPane)
        assert pane.selected_server() == "b"
        footer = {b.binding.description for b in app.active_bindings.values() if b.enabled}
        assert "Disable" in footer and "Enable" not in footer

        await pilot.press("e")
        await until(lambda: "b" in mcp.disabled and "b" not in mcp.connections, within=15)
        assert entries(config_dir)["b"].get("disabled") is True
        await settled(app)
        footer = {b.binding.description for b in app.active_bindings.values() if b.enabled}
        assert "Enable" in footer and "Disable" not in footer
        assert pane.selected_server() == "b"  # the row keeps its place and the selection

        await pilot.press("enter")  # a disabled server has no detail view: it says what to do
        await settled(app)
        assert "b is disabled: e enables it" in [n.message for n in app._notifications]

        await pilot.press("e")
        await until(lambda: "b" in mcp.connections and mcp.connections["b"].ready, within=15)
        assert "disabled" not in entries(config_dir)["b"]


@pytest.mark.processes
async def test_many_processes_switching_at_once_lose_no_entry_and_the_app_follows(
    tmp_path: Path,
) -> None:
    """Four `diana` processes at a time switch four servers off and on while the app runs:
    every change lands (none overwrites another's), no entry or key is lost, and the app ends
    with exactly the servers the file enables."""
    names = ["s1", "s2", "s3", "s4"]
    servers = {name: fixture_server(**{"x-keep": name}) for name in names}
    app = build_app(tmp_path, servers=servers)
    config_dir, data_dir = app.paths.config_dir, app.paths.data_dir
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        mcp = app.core._runtime.mcp
        for action in ("disable", "enable", "disable"):
            processes = [start_diana(config_dir, data_dir, "servers", action, n) for n in names]
            outputs = await asyncio.to_thread(finish, processes)
            for process, (_out, err) in zip(processes, outputs, strict=True):
                assert process.returncode == 0, err
        final = entries(config_dir)
        assert list(final) == names
        for name in names:  # every entry whole, each switched off by its own process
            assert final[name] == {**servers[name], "disabled": True}
        await until(lambda: set(mcp.disabled) == set(names) and not mcp.connections, within=20)
        await until(lambda: not {tool for tool in offered(app) if tool.split("_")[0] in names})

        # Two at once on the same server, opposite ways: the file holds one of the two, and
        # the app applies whichever it is.
        racing = [
            start_diana(config_dir, data_dir, "servers", a, "s1") for a in ("enable", "disable")
        ]
        await asyncio.to_thread(finish, racing)
        enabled = "disabled" not in entries(config_dir)["s1"]
        await until(lambda: ("s1" in mcp.connections) == enabled, within=20)
        assert ("s1" in mcp.disabled) != enabled


@pytest.mark.processes
async def test_servers_pasted_removed_renamed_and_reordered_in_bursts_keep_the_pane_whole(
    tmp_path: Path,
) -> None:
    """The server list changed while the app runs — several servers pasted in at once,
    removed, renamed, reordered, in bursts faster than the app applies them: the MCP Servers
    pane follows every change without an error and ends showing exactly the file's servers,
    in its order."""
    app = build_app(tmp_path, servers={"a": fixture_server()})
    config_file = app.paths.config_dir / "mcp-servers.json"

    def write(names: list[str]) -> None:
        config_file.write_text(
            json.dumps({"mcpServers": {name: fixture_server() for name in names}})
        )

    def rows() -> list[str]:
        return [row.server for row in app.query_one(ServersPane).query(ServerRow)]

    bursts = [
        ["a", "git", "time", "files"],  # three pasted in at once
        ["files", "time", "git", "a"],  # reordered
        ["a", "git2", "time"],  # one renamed, one removed
        ["git2", "a", "files", "time", "memory", "everything"],
        ["a"],
        ["a", "git", "time", "files", "memory"],
    ]
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        mcp = app.core._runtime.mcp
        for round_ in range(2):
            for names in bursts:
                write(names)
                # Apply at once as well as by the watcher, so changes overlap the pane's work.
                await mcp.reload()
                await pilot.pause(0.05 * round_)
        final = bursts[-1]
        await until(lambda: list(mcp.configs) == final, within=20)
        await settled(app)
        await until(lambda: rows() == final, within=20)
        await pilot.press("f4")
        for _ in final:  # every row is whole: its badge, name and tool count are there
            await pilot.press("down")
        for row in app.query_one(ServersPane).query(ServerRow):
            assert row.query(".server-badge") and row.query(".server-tools")
