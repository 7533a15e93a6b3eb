"""Other MCP hosts' config files are read as written: the {"servers": [...]} shape with its
"enabled" and file-wide switches, the MCP_* variables standing for them, timeouts in
milliseconds and autoStart false; each with a one-line notice saying how it was read, and
anything malformed named by file and field."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.config.mcp_servers import read_servers
from diana.core.config.settings import ConfigError
from diana.core.mcp.info import ServerStatus
from diana.core.mcp.servers_document import (
    document_switched,
    document_with,
    document_without,
    written_entry,
)
from diana.core.mcp.subagent_request import RequestFailed
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.panes.servers import ServerRow, ServersPane

from .commands import diana_here
from .conftest import stepping_clock
from .fixtures import mcp_fixture
from .scenarios import build_app, fixture_server, settle, until
from .waits import settled

FIXTURE = mcp_fixture.__file__


def fixture(**fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FIXTURE], **fields}


SERVERS_SHAPE = {
    "servers": [
        {"id": "files", "name": "fx", "transport": "stdio", **fixture(), "enabled": True},
        {"id": "web-search", "name": "brave", "command": "npx", "env": {}, "enabled": False},
        {"id": "byid", "command": "npx", "args": ["-y", "x"], "enabled": True},
    ],
    "subAgentEnabled": True,
    "autoDiscoveryEnabled": False,
    "toolApprovalRequired": True,
}


@pytest.fixture(autouse=True)
def no_mcp_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MCP_CONFIG_PATH", "MCP_TOOL_APPROVAL", "MCP_AUTO_DISCOVERY"):
        monkeypatch.delenv(name, raising=False)


def test_the_servers_shape_is_read_with_enabled_and_its_switches(tmp_path: Path) -> None:
    path = tmp_path / "mcp-servers.json"
    read = read_servers(SERVERS_SHAPE, path, {})
    assert [(s.name, s.disabled) for s in read.servers] == [
        ("fx", False),
        ("brave", True),
        ("byid", False),
    ]
    assert read.switches == {
        "toolApprovalRequired": True,
        "autoDiscoveryEnabled": False,
        "subAgentEnabled": True,
    }
    assert read.notices == [
        'mcp-servers.json is in the {"servers": [...]} shape (id, name, enabled): read as '
        "3 servers, 1 switched off (enabled: false)"
    ]


def test_timeouts_in_milliseconds_are_read_as_such(tmp_path: Path) -> None:
    path = tmp_path / "mcp-servers.json"
    read = read_servers(
        [
            {"name": "a", "command": "x", "timeoutMs": 5000},
            {"name": "b", "command": "x", "timeout": 10000, "autoStart": False},
            {"name": "c", "command": "x", "timeout": 20},
        ],
        path,
        {},
    )
    assert [s.timeout for s in read.servers] == [5.0, 10.0, 20.0]
    assert read.notices == [
        'mcp-servers.json: server "b": timeout 10000 read as milliseconds (10 s); write '
        '"timeoutMs" to say so, or seconds under "timeout"'
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([{"name": "a", "command": "x", "timeout": 60000}], 'server "a": timeout: expected milli'),
        ([{"name": "a", "command": "x", "timeoutMs": "5s"}], 'server "a": timeoutMs: expected'),
        ([{"name": "a", "command": "x", "timeout": 5, "timeoutMs": 5}], '"timeout" or "timeoutMs"'),
        ({"servers": [{"id": "a", "command": "x", "enabled": "no"}]}, 'server "a": enabled: exp'),
        ({"servers": [], "toolApprovalRequired": "yes"}, "toolApprovalRequired: expected true"),
        ({"servers": {}}, 'or one with a "servers" list'),
    ],
)
def test_malformed_shapes_name_the_file_and_field(tmp_path: Path, raw: Any, message: str) -> None:
    path = tmp_path / "mcp-servers.json"
    with pytest.raises(ConfigError) as caught:
        read_servers(raw, path, {})
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_the_servers_shape_is_written_in_its_own_shape() -> None:
    added = document_with(SERVERS_SHAPE, "new", {"command": "y"}, replace=False)
    assert added["servers"][-1] == {"name": "new", "command": "y"}
    assert added["toolApprovalRequired"] is True  # the file's other keys are kept
    changed = document_with(SERVERS_SHAPE, "brave", {"command": "z"}, replace=True)
    assert changed["servers"][1] == {"id": "web-search", "name": "brave", "command": "z"}
    switched = document_switched(SERVERS_SHAPE, "brave", enabled=True)
    assert switched["servers"][1]["enabled"] is True and "disabled" not in switched["servers"][1]
    off = document_switched(SERVERS_SHAPE, "byid", enabled=False)
    assert off["servers"][2]["enabled"] is False
    assert [e.get("name", e.get("id")) for e in document_without(off, "fx")["servers"]] == [
        "brave",
        "byid",
    ]


@pytest.mark.processes
async def test_a_servers_shaped_file_asks_before_every_mcp_tool_and_says_how_it_was_read(
    config_dir: Path, data_dir: Path
) -> None:
    document = {**SERVERS_SHAPE, "servers": SERVERS_SHAPE["servers"][:2]}
    (config_dir / "mcp-servers.json").write_text(json.dumps(document))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        assert runtime.notices[0].startswith(
            'mcp-servers.json is in the {"servers": [...]} shape (id, name, enabled): read as '
            "2 servers, 1 switched off"
        )
        assert list(runtime.mcp.disabled) == ["brave"]
        await runtime.mcp.wait_ready()
        # fx_echo is read-only: without toolApprovalRequired it runs unasked.
        result = await runtime.orchestrator.execute("fx_echo", {"text": "hi"})
        assert result.error_code is ErrorCode.PENDING_APPROVAL
        assert "toolApprovalRequired in" in (result.error or "")
        (proposal,) = await runtime.approvals.store.select()
        assert proposal.tool == "fx_echo"
        # diana's own tools are not MCP tools: the switch does not reach them.
        assert (await runtime.orchestrator.execute("get_current_time", {})).success


@pytest.mark.processes
async def test_mcp_variables_name_the_file_and_stand_for_its_switches(
    config_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"servers": [{"name": "fx", **fixture()}]}))
    monkeypatch.setenv("MCP_CONFIG_PATH", str(elsewhere))
    monkeypatch.setenv("MCP_TOOL_APPROVAL", "true")
    monkeypatch.setenv("MCP_AUTO_DISCOVERY", "1")
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        assert runtime.notices[:3] == [
            f"MCP_CONFIG_PATH: MCP servers are read from {elsewhere} "
            f"(not {config_dir / 'mcp-servers.json'})",
            'elsewhere.json is in the {"servers": [...]} shape (id, name, enabled): read as '
            "1 server",
            "MCP_AUTO_DISCOVERY=1: not applied; diana adds an MCP server only when a person or "
            "the model asks (the MCP sub-agent), after approval",
        ]
        assert runtime.subagent.config_file == elsewhere  # written there too
        await runtime.mcp.wait_ready()
        result = await runtime.orchestrator.execute("fx_echo", {"text": "hi"})
        assert result.error_code is ErrorCode.PENDING_APPROVAL
        assert "MCP_TOOL_APPROVAL=true" in (result.error or "")


async def test_bad_mcp_variables_are_named(
    config_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_CONFIG_PATH", str(tmp_path / "typo.json"))
    with pytest.raises(ConfigError, match="MCP_CONFIG_PATH names this file, which does not"):
        await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        )
    monkeypatch.delenv("MCP_CONFIG_PATH")
    monkeypatch.setenv("MCP_TOOL_APPROVAL", "maybe")
    with pytest.raises(ConfigError, match="MCP_TOOL_APPROVAL: expected true or false, not 'maybe'"):
        await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        )


@pytest.mark.processes
async def test_a_server_with_autostart_false_is_listed_and_started_when_a_call_needs_it(
    config_dir: Path, data_dir: Path
) -> None:
    servers = [{"name": "fx", **fixture(), "autoStart": False}]
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        assert runtime.mcp.connections == {}  # nothing started it
        (info,) = runtime.mcp.all_diagnostics()
        assert (info.name, info.status) == ("fx", ServerStatus.NOT_STARTED)
        first = await runtime.orchestrator.execute("fx_echo", {"text": "hi"})
        assert first.error_code is ErrorCode.AGENT_UNAVAILABLE
        assert "autoStart: false): it is starting now" in (first.error or "")
        await runtime.mcp.wait_ready(["fx"])
        assert runtime.mcp.connections["fx"].ready
        assert (await runtime.orchestrator.execute("fx_echo", {"text": "hi"})).data == "hi"


@pytest.mark.processes
async def test_a_key_starts_a_server_with_autostart_false(config_dir: Path, data_dir: Path) -> None:
    servers = [{"name": "fx", **fixture(), "autoStart": False}]
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        assert runtime.mcp.connections == {}
        await runtime.mcp.reconnect("fx")  # what r in the MCP Servers pane does
        await runtime.mcp.wait_reconnected(["fx"])
        assert runtime.mcp.connections["fx"].ready


@pytest.mark.processes
async def test_the_servers_pane_lists_a_server_not_started_and_r_starts_it(
    tmp_path: Path,
) -> None:
    servers = {"a": fixture_server(), "b": fixture_server(autoStart=False)}
    app = build_app(tmp_path, servers=servers)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        mcp = app.core._runtime.mcp
        assert "b" not in mcp.connections
        await settled(app)
        pane = app.query_one(ServersPane)
        row = pane.query_one("#server-b", ServerRow)
        assert str(row.query_one(".server-badge").render()) == "○ not started"
        assert pane.border_title == "MCP Servers 1/2 ready · 1 not started"
        await pilot.press("f4", "down", "r")
        await until(lambda: "b" in mcp.connections and mcp.connections["b"].ready, within=15)
        await settled(app)
        assert pane.border_title == "MCP Servers 2/2 ready"


# -- one list per file, for reading and writing alike -------------------------------------------


def test_a_file_with_both_server_lists_is_refused_naming_both(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    both = {"mcpServers": {"a": fixture()}, "servers": [{"name": "b", **fixture()}]}
    path.write_text(json.dumps(both))
    listed = diana_here(config_dir, data_dir, "servers")
    assert listed.returncode != 0
    assert 'mcp-servers.json holds both "mcpServers" and "servers"' in listed.stderr
    assert listed.stderr.startswith("diana: ") and "Traceback" not in listed.stderr
    for change in (
        lambda d: document_with(d, "c", fixture(), replace=False),
        lambda d: document_without(d, "a"),
        lambda d: written_entry(d, "b"),
    ):
        with pytest.raises(RequestFailed, match='holds both "mcpServers" and "servers"'):
            change(both)
    assert json.loads(path.read_text()) == both


@pytest.mark.processes
def test_edit_and_remove_find_a_server_in_the_servers_shape(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "mcp-servers.json"
    time_server = str(Path(sys.executable).parent / "mcp-server-time")
    path.write_text(json.dumps({"servers": [{"id": "t", "command": time_server}]}))
    edited = diana_here(config_dir, data_dir, "servers", "edit", "t", "--set", "timeout=5")
    assert edited.returncode == 0, edited.stderr
    (written,) = json.loads(path.read_text())["servers"]
    assert written["id"] == "t" and written["timeout"] == 5  # changed where it is, id kept
    removed = diana_here(config_dir, data_dir, "servers", "remove", "t")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(path.read_text())["servers"] == []
