"""settings.json ``serve`` chooses what `diana serve` shows each client (``servers``,
``agents``, ``hide``, and the same per client under ``clients.NAME``), driven by the official
MCP SDK client as hosts would: a hidden tool is neither listed nor run when called by name, a
server not shown takes its resources and prompts with it, a change of the file while serve
runs is told to the host, and a malformed choice names the file and the field."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.api import Core
from diana.core.profiles import Profile
from mcp import ClientSession, MCPError, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from .commands import diana, diana_argv
from .serving import (
    APPEND,
    HOST,
    KEEP_ALIVE,
    configure,
    http_gateway,
    http_host,
    lines,
    new_token,
    pending_proposals,
    text_of,
)

pytestmark = pytest.mark.processes  # every test here starts diana serve and MCP servers

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


def write_serve(config_dir: Path, serve: dict[str, Any]) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    (config_dir / "settings.json").write_text(json.dumps({**settings, "serve": serve}))


async def tool_names(session: ClientSession) -> set[str]:
    return {tool.name for tool in (await session.list_tools()).tools}


async def test_two_clients_see_what_settings_choose_for_each_and_a_hidden_call_never_runs(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(
        config_dir,
        marks,
        hide=["mcp_*"],
        clients={
            "laptop": {"hide": ["append_app*"]},
            "ci": {"servers": [], "agents": ["memory"]},
        },
    )
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"append_append": "allow"}}))
    laptop = new_token(config_dir, data_dir, "laptop")
    ci = new_token(config_dir, data_dir, "ci")
    other = new_token(config_dir, data_dir, "other")
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, laptop) as session:
            seen = await tool_names(session)
            assert {"append_count", "save_fact", "code_execution"} <= seen
            assert "append_append" not in seen  # its own hide replaces the default's
            assert "mcp_search_servers" in seen
            with pytest.raises(MCPError, match="unknown tool 'append_append'"):
                await session.call_tool("append_append", {"mark": "hidden"})
            assert text_of(await session.call_tool("append_count", {})) == "0"
        async with http_host(url, ci) as session:
            assert await tool_names(session) == {"save_fact", "search_memory"}
            with pytest.raises(MCPError, match="unknown tool 'append_count'"):
                await session.call_tool("append_count", {})
            with pytest.raises(MCPError, match="unknown tool 'code_execution'"):
                await session.call_tool("code_execution", {"language": "python", "code": "1"})
        async with http_host(url, other) as session:  # the default: every server, no mcp_*
            seen = await tool_names(session)
            assert {"append_append", "append_count", "save_fact"} <= seen
            assert not {name for name in seen if name.startswith("mcp_")}
            result = await session.call_tool("append_append", {"mark": "shown"})
            assert text_of(result) == "appended shown"
    assert lines(marks) == ["shown"]  # the hidden call never ran, nor was held
    assert pending_proposals(config_dir, data_dir) == []
    async with await Core.open(Profile.READ.but(execution_log=True), config_dir, data_dir) as core:
        logged = [(call.tool, call.origin) for call in await core.query_calls()]
    assert ("append_append", "host:laptop") not in logged
    assert ("append_count", "host:ci") not in logged
    assert ("append_count", "host:laptop") in logged


async def test_a_server_not_shown_hides_its_resources_and_prompts_and_a_change_is_told(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    servers = {
        "files": {"command": sys.executable, "args": [FIXTURE, "--stderr", "f-" + tmp_path.name]},
        "append": {"command": sys.executable, "args": [APPEND, "--file", str(tmp_path / "m")]},
    }
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    write_serve(config_dir, {"clients": {"claude-code": {"servers": ["append"]}}})
    told = asyncio.Event()

    async def heard(message: Any) -> None:
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            told.set()

    argv = diana_argv(config_dir, data_dir, "serve", "--keep-alive", KEEP_ALIVE)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=HOST, message_handler=heard) as session,
    ):
        await session.initialize()
        seen = await tool_names(session)
        assert "append_count" in seen and not {n for n in seen if n.startswith("files_")}
        assert (await session.list_resources()).resources == []
        assert (await session.list_resource_templates()).resource_templates == []
        assert (await session.list_prompts()).prompts == []
        with pytest.raises(MCPError, match="fixture://greeting"):
            await session.read_resource("fixture://greeting")
        with pytest.raises(MCPError, match="files_hello"):
            await session.get_prompt("files_hello", {})

        write_serve(config_dir, {"clients": {"claude-code": {"servers": ["files"]}}})
        await asyncio.wait_for(told.wait(), 30)
        seen = await tool_names(session)
        assert "append_count" not in seen and {n for n in seen if n.startswith("files_")}
        read = await session.read_resource("fixture://greeting")
        assert [getattr(c, "text", None) for c in read.contents] == ["hello from the fixture"]
        with pytest.raises(MCPError, match="append_count"):
            await session.call_tool("append_count", {})


def test_a_malformed_choice_names_the_file_and_the_field(config_dir: Path, data_dir: Path) -> None:
    for serve, field in (
        ({"servers": "append"}, "serve.servers"),
        ({"clients": {"ci": {"hide": [1]}}}, "serve.clients.ci.hide.0"),
        ({"agents": [""]}, "serve.agents"),
        ({"clients": {"ci": {"tools": []}}}, "serve.clients.ci.tools"),
    ):
        write_serve(config_dir, serve)
        done = diana(config_dir, data_dir, "serve")
        assert done.returncode != 0
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("diana: ") and "settings.json" in line and field in line, line
        assert "Traceback" not in done.stderr


async def test_a_name_that_is_no_server_or_agent_is_warned_of_at_start_not_a_crash(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    configure(
        config_dir,
        tmp_path / "marks",
        servers=["apend", "append", "spare"],
        clients={"ci": {"agents": ["memry", "memory"]}},
    )
    servers = json.loads((config_dir / "mcp-servers.json").read_text())
    spare = {**servers["mcpServers"]["append"], "disabled": True}
    servers["mcpServers"]["spare"] = spare  # configured, not served: a name it knows
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    argv = diana_argv(config_dir, data_dir, "serve", "--only", "append")
    # stdin at its end: served, then ended
    done = await asyncio.to_thread(
        subprocess.run, argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    warned = done.stderr.splitlines()
    assert any("settings.json: serve.servers" in w and "'apend'" in w for w in warned), warned
    assert any("serve.clients.ci.agents" in w and "'memry'" in w for w in warned), warned
    assert not [w for w in warned if {"'append'", "'spare'", "'memory'"} & set(w.split())]
