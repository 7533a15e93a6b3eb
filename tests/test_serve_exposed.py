"""What `diana serve` exposes besides tools, driven by the official MCP Python SDK client as
another host would: every server's resources and prompts under diana's names (read and got,
never gated, logged with the host), logging/setLevel and ping; `--only SERVER`, one server
alone under its own names with every call still through the gate; and list_changed, told to
a connected host when a server is added to mcp-servers.json."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.api import Core
from diana.core.profiles import Profile
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ToolsListChanged

from .commands import diana_argv, diana_here, diana_here_async
from .serving import (
    APPEND,
    HOST,
    Waiting,
    http_gateway,
    lines,
    npx_command,
    running_with,
    text_of,
)
from .structured_log import log_events

pytestmark = pytest.mark.processes  # every test here starts diana serve and MCP servers

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


def with_servers(config_dir: Path, servers: dict[str, Any]) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


def fixture_server(marker: str) -> dict[str, Any]:
    """The fixture server (resources, a template, prompts); ``marker`` names its process."""
    return {"command": sys.executable, "args": [FIXTURE, "--stderr", marker]}


def append_server(marks: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [APPEND, "--file", str(marks)]}


class Heard:
    """What the gateway told the host unasked: an event per notification kind."""

    def __init__(self) -> None:
        self.tools = asyncio.Event()
        self.resources = asyncio.Event()
        self.prompts = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            self.tools.set()
        elif isinstance(root, types.ResourceListChangedNotification):
            self.resources.set()
        elif isinstance(root, types.PromptListChangedNotification):
            self.prompts.set()


@contextlib.asynccontextmanager
async def host(
    config_dir: Path, data_dir: Path, *extra: str, heard: Heard | None = None
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    argv = diana_argv(config_dir, data_dir, "serve", "--keep-alive", "0.2", *extra)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=HOST, message_handler=heard) as session,
    ):
        started = await session.initialize()
        yield session, started


async def test_a_host_lists_reads_and_gets_every_servers_resources_and_prompts(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Resources, templates and prompts of every server under `{server}_{name}`, URIs as the
    server gave them; a read and a prompt are answered at once (no proposal) and logged with
    the host; logging/setLevel and ping are answered; the capabilities say so."""
    with_servers(
        config_dir,
        {
            "files": fixture_server(f"fixture-{tmp_path.name}"),
            "append": append_server(tmp_path / "m"),
        },
    )
    async with host(config_dir, data_dir) as (session, started):
        capabilities = started.capabilities
        assert capabilities.resources is not None and capabilities.prompts is not None
        assert capabilities.logging is not None
        assert capabilities.tools is not None and capabilities.tools.list_changed is True

        resources = {r.name: r for r in (await session.list_resources()).resources}
        assert str(resources["files_greeting"].uri) == "fixture://greeting"
        assert resources["files_greeting"].mime_type == "text/plain"
        templates = (await session.list_resource_templates()).resource_templates
        assert [(t.name, t.uri_template) for t in templates] == [
            ("files_item", "fixture://items/{item}")
        ]
        read = await session.read_resource("fixture://greeting")
        assert [getattr(c, "text", None) for c in read.contents] == ["hello from the fixture"]
        item = await session.read_resource("fixture://items/lamp")
        assert [getattr(c, "text", None) for c in item.contents] == ["item lamp"]
        pixel = await session.read_resource("fixture://pixel.png")
        assert isinstance(pixel.contents[0], types.BlobResourceContents)

        prompts = {p.name: p for p in (await session.list_prompts()).prompts}
        assert {"files_review", "files_hello"} <= set(prompts)
        review_args = {a.name: a.required for a in prompts["files_review"].arguments or []}
        assert review_args == {"code": True, "focus": False}
        got = await session.get_prompt("files_review", {"code": "x = 1", "focus": "naming"})
        assert [m.role for m in got.messages] == ["user"]
        content = got.messages[0].content
        assert isinstance(content, types.TextContent)
        assert content.text == "Review this code for naming:\nx = 1"

        with pytest.raises(Exception, match="fixture://nowhere"):
            await session.read_resource("fixture://nowhere")
        with pytest.raises(Exception, match="code"):
            await session.get_prompt("files_review", {})
        with warnings.catch_warnings():  # deprecated in 2026-07-28; hosts still send it
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await session.set_logging_level("warning")
        await session.send_ping()
    assert await proposals(config_dir, data_dir) == []  # nothing was held for a person
    reads = log_events(data_dir, "serve.read")
    assert [(r["uri"], r["host"]) for r in reads][:1] == [
        ("fixture://greeting", "host:claude-code")
    ]
    (prompted, *_) = log_events(data_dir, "serve.prompt")
    assert (prompted["prompt"], prompted["host"]) == ("review", "host:claude-code")
    assert log_events(data_dir, "serve.log_level")[0]["level"] == "warning"


async def proposals(config_dir: Path, data_dir: Path) -> list[Any]:
    async with await Core.open(Profile.READ, config_dir, data_dir) as core:
        return list(await core.proposals())


async def test_only_one_server_is_served_under_its_own_names_and_calls_pass_the_gate(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """`--only append`: its tools as it names them, none of diana's own nor the other
    server's, which is never started; a destructive call is still held for a person, named
    by the host, and runs once approved."""
    marker = f"never-started-{tmp_path.name}"
    marks = tmp_path / "marks"
    with_servers(config_dir, {"files": fixture_server(marker), "append": append_server(marks)})
    async with host(config_dir, data_dir, "--only", "append") as (session, started):
        assert started.server_info.name == "diana"
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {"append", "count"}
        assert tools["append"].description == "Append the mark as one line to the server's file."
        assert (await session.list_prompts()).prompts == []
        assert text_of(await session.call_tool("count", {})) == "0"
        unknown = await session.call_tool("save_fact", {"fact": "x"})
        assert unknown.is_error and "append has no tool 'save_fact'" in text_of(unknown)

        waiting = Waiting()
        call = asyncio.ensure_future(
            session.call_tool("append", {"mark": "m1"}, progress_callback=waiting)
        )
        proposal_id = await waiting.proposal_id()
        (held,) = await proposals(config_dir, data_dir)
        assert (held.id, held.tool, held.origin) == (
            proposal_id,
            "append_append",
            "host:claude-code",
        )
        approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
        assert approved.returncode == 0, approved.stderr
        assert text_of(await asyncio.wait_for(call, 30)) == "appended m1"
        assert running_with(marker) == []  # the other server was never started
    assert lines(marks) == ["m1"]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("nope", "no MCP server named nope in "),
        ("off", "MCP server off is disabled in "),
        ("../x", "no MCP server named ../x in "),
        ("a\x1b[2Jb", "no MCP server named a"),
    ],
)
def test_only_an_enabled_server_of_the_file_is_served(
    config_dir: Path, data_dir: Path, name: str, said: str
) -> None:
    servers = {"on": fixture_server("on"), "off": {**fixture_server("off"), "disabled": True}}
    with_servers(config_dir, servers)
    refused = diana_here(config_dir, data_dir, "serve", "--only", name)
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith("diana: --only ") and said in line
    assert str(config_dir / "mcp-servers.json") in line
    assert "\x1b" not in line and "Traceback" not in refused.stderr


async def test_a_connected_host_hears_the_tools_changed_when_a_server_is_added(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    with_servers(config_dir, {"append": append_server(marks)})
    heard = Heard()
    async with host(config_dir, data_dir, heard=heard) as (session, _started):
        before = {tool.name for tool in (await session.list_tools()).tools}
        assert "files_echo" not in before
        with_servers(
            config_dir,
            {"append": append_server(marks), "files": fixture_server(f"added-{tmp_path.name}")},
        )
        await asyncio.wait_for(heard.tools.wait(), 30)
        after = {tool.name for tool in (await session.list_tools()).tools}
        assert "files_echo" in after and before <= after
        await asyncio.wait_for(heard.resources.wait(), 30)
        assert "files_greeting" in {r.name for r in (await session.list_resources()).resources}


# The suite's version that runs on Node 20, with the TS SDK it needs beside it (CONVENTIONS).
CONFORMANCE = ("@modelcontextprotocol/conformance@0.1.13", "@modelcontextprotocol/sdk@1.25.2")
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
SERVER_SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "logging-set-level",
    "dns-rebinding-protection",
]


@pytest.mark.skipif(
    shutil.which("npx") is None or shutil.which("npm") is None,
    reason="needs npm and npx (Node.js) for the conformance suite and server-everything",
)
def test_the_conformance_suites_server_scenarios_pass_through_diana_in_front_of_everything(
    config_dir: Path, data_dir: Path
) -> None:
    """`diana serve --http --only everything` in front of the reference server-everything
    passes the official suite's server scenarios, DNS rebinding included (server-everything
    alone fails one of its two checks; diana's HTTP front checks Host and Origin). The suite
    sends no bearer token, so the gateway runs with --no-token (loopback only, for tests)."""
    command, *args = npx_command("mcp-server-everything", EVERYTHING)
    everything = {"command": command, "args": [*args, "stdio"], "timeout": 30}
    with_servers(config_dir, {"everything": everything})
    conformance = npx_command("conformance", *CONFORMANCE)
    with http_gateway(config_dir, data_dir, "--no-token", "--only", "everything") as url:
        for scenario in SERVER_SCENARIOS:
            ran = subprocess.run(
                [*conformance, "server", "--url", url, "--scenario", scenario],
                capture_output=True,
                text=True,
                timeout=180,
            )
            said = ran.stdout + ran.stderr
            passed = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", said)
            assert passed is not None, f"{scenario}: {said[-2000:]}"
            assert passed.group(1) == passed.group(2) and passed.group(3) == "0", (
                f"{scenario}: {said[-2000:]}"
            )
            assert ran.returncode == 0, f"{scenario}: {said[-2000:]}"


PREFIX = str(Path(__file__).parent / "fixtures" / "prefix_server.py")


async def test_only_keeps_the_servers_own_tool_names_and_tells_the_host_when_they_change(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """A tool diana would expose as `notes_read_notes` is `Read-Notes` to the host of
    `--only notes`, and its call runs under that name; when the server takes it away and
    says so, the host hears tools/list_changed and no longer lists it."""
    effects = tmp_path / "effects"
    notes = {
        "command": sys.executable,
        "args": [PREFIX, "--tool", "Read-Notes", "--label", "n", "--side-effects", str(effects)],
    }
    with_servers(config_dir, {"notes": {**notes, "args": [*notes["args"], "--read-only"]}})
    heard = Heard()
    async with host(config_dir, data_dir, "--only", "notes", heard=heard) as (session, _started):
        assert {t.name for t in (await session.list_tools()).tools} == {"Read-Notes", "retire"}
        ran = await session.call_tool("Read-Notes", {"value": "v1"})
        assert text_of(ran) == "n did Read-Notes v1"
        refused = await session.call_tool("notes_read_notes", {"value": "v2"})
        assert refused.is_error and "has no tool 'notes_read_notes'" in text_of(refused)
        assert text_of(await session.call_tool("retire", {})) == "retired"
        await asyncio.wait_for(heard.tools.wait(), 30)
        assert {t.name for t in (await session.list_tools()).tools} == {"retire"}
    assert effects.read_text().splitlines() == ["n Read-Notes v1"]


async def test_a_host_on_protocol_2026_07_28_hears_the_change_on_its_listen_stream(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """The SDK's `Client` negotiates 2026-07-28, where changes come on a
    `subscriptions/listen` stream: a server added to mcp-servers.json arrives there."""
    from mcp import Client

    marks = tmp_path / "marks"
    with_servers(config_dir, {"append": append_server(marks)})
    argv = diana_argv(config_dir, data_dir, "serve")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(stdio_client(params)) as client:
        assert "files_echo" not in {t.name for t in (await client.list_tools()).tools}
        async with client.listen(tools_list_changed=True) as changes:
            assert changes.honored.tools_list_changed is True
            with_servers(
                config_dir,
                {"append": append_server(marks), "files": fixture_server(f"l-{tmp_path.name}")},
            )
            async with asyncio.timeout(30):
                event = await anext(aiter(changes))
        assert isinstance(event, ToolsListChanged)
        assert "files_echo" in {t.name for t in (await client.list_tools()).tools}
