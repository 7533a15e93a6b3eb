"""MCP against real subprocess servers: the project's fixture server and mcp-server-time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from diana.core.calls.orchestrator import Orchestrator
from diana.core.config.mcp_servers import HEALTH_INTERVAL, MCPServerConfig, parse_servers
from diana.core.config.settings import ConfigError
from diana.core.events import EventBus, Notice, ServerStatusChanged
from diana.core.mcp import stdio
from diana.core.mcp.connection import ServerConnection
from diana.core.mcp.info import ServerStatus
from diana.core.mcp.manager import MCPManager
from diana.core.mcp.stdio import STDERR_LINE_LIMIT, LineSplitter
from diana.core.models import AgentHealth, ErrorCode, RiskLevel
from diana.core.system.clock import SystemClock
from diana.core.system.telemetry import StructuredLog
from mcp import MCPError

from .configs import FIXTURE
from .network import free_port
from .processes import alive
from .waits import listening

SPAWNING = str(Path(__file__).parent / "fixtures" / "spawning_server.py")
ABUSIVE = str(Path(__file__).parent / "fixtures" / "abusive_server.py")


def fixture_server(name: str = "fx", *extra: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [FIXTURE, *extra], **fields}


def big_text(size: int) -> str:
    """What the fixture's big_text tool answers."""
    return ("123456789\n" * (size // 10 + 1))[:size]


def kept_of_e_line(size: int) -> str:
    """What is kept of a stderr line of ``size`` e's: its start, and how much was cut."""
    cut = size - STDERR_LINE_LIMIT
    return "e" * STDERR_LINE_LIMIT + f" [{cut:,} more bytes of this line not kept]"


def abusive_server(name: str, mode: str, *extra: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [ABUSIVE, mode, *extra], **fields}


class Harness:
    """An orchestrator and an MCP manager over a config file in a temp dir."""

    def __init__(self, path: Path, health_interval: float = HEALTH_INTERVAL) -> None:
        self.path = path
        self.bus = EventBus()
        self.events = self.bus.subscribe()
        # As the runtime wires them: a tool of a server not connected is unavailable.
        self.orchestrator = Orchestrator(
            bus=self.bus, missing_tool_hint=lambda name: self.manager.missing_tool(name)
        )
        self.manager = MCPManager(
            self.orchestrator, lambda: self.path, bus=self.bus, health_interval=health_interval
        )

    def write(self, servers: Any) -> None:
        self.path.write_text(json.dumps(servers))

    async def start(self, servers: Any) -> None:
        self.write(servers)
        await self.manager.start(self.manager.load())
        await self.manager.wait_ready()

    def connection(self, name: str = "fx") -> ServerConnection:
        return self.manager.connections[name]

    async def until(self, predicate: Any, what: str, within: float = 10.0) -> None:
        """Wait for a server event after which ``predicate()`` holds."""
        async with asyncio.timeout(within):
            while not predicate():
                event = await self.events.get()
                if isinstance(event, ServerStatusChanged | Notice) and predicate():
                    return
        assert predicate(), what

    def tools(self) -> dict[str, Any]:
        return {d.name: d for d, _agent in self.orchestrator.tool_definitions()}


@contextlib.asynccontextmanager
async def open_harness(
    path: Path, health_interval: float = HEALTH_INTERVAL
) -> AsyncIterator[Harness]:
    h = Harness(path, health_interval)
    try:
        yield h
    finally:
        await h.orchestrator.shutdown()
        await h.manager.close()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with open_harness(tmp_path / "mcp-servers.json") as h:
        yield h


async def settled(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for state that no event announces (stderr lines), checking it now and then."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the state itself
            await asyncio.sleep(0.01)


# -- config ------------------------------------------------------------------------------------


def test_the_three_config_shapes_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "mcp-servers.json"
    array = parse_servers(
        [{"name": "a", "command": "x", "args": ["1"], "timeout": 5, "autoStart": False}], path
    )
    remote = parse_servers(
        [
            {
                "name": "r",
                "url": "http://127.0.0.1:1/sse",
                "transport": "sse",
                "headers": {"Authorization": "Bearer t"},
            }
        ],
        path,
    )
    hosts = parse_servers(
        {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "srv"], "env": {"K": "v"}},
                "web": {"url": "http://127.0.0.1:1/mcp"},
            }
        },
        path,
    )
    assert (array[0].timeout, array[0].auto_start) == (5, False)
    assert remote[0].transport == "sse" and remote[0].headers == {"Authorization": "Bearer t"}
    assert [(s.name, s.transport) for s in hosts] == [("fs", "stdio"), ("web", "streamable-http")]


def test_variables_are_expanded_with_defaults(tmp_path: Path) -> None:
    env = {"HOME_DIR": "/home/ada", "TOKEN": "sekrit"}
    (server,) = parse_servers(
        [
            {
                "name": "a",
                "command": "x",
                "args": ["${HOME_DIR}/notes", "${MISSING:-fallback}"],
                "env": {"API_TOKEN": "${TOKEN}"},
            }
        ],
        tmp_path / "f.json",
        env,
    )
    assert server.args == ["/home/ada/notes", "fallback"]
    assert server.env == {"API_TOKEN": "sekrit"}
    assert "sekrit" not in json.dumps(server.public())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([{"name": "a", "command": "x", "timeout": 31}], 'server "a": timeout'),
        ([{"name": "a"}], 'server "a": a stdio server needs "command"'),
        ([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}], "used twice"),
        ({"mcpServers": {"b": {"command": "x", "args": "oops"}}}, 'server "b": args'),
        (
            {"mcpServers": {"c": {"command": "x", "env": {"K": "${UNSET_VAR_XYZ}"}}}},
            "env.K: environment variable UNSET_VAR_XYZ is not set",
        ),
        ({"servers": {}}, 'expected a list of servers, an object with "mcpServers"'),
    ],
)
def test_bad_config_names_file_server_and_field(tmp_path: Path, raw: Any, message: str) -> None:
    path = tmp_path / "mcp-servers.json"
    with pytest.raises(ConfigError) as caught:
        parse_servers(raw, path, {})
    assert str(path) in str(caught.value) and message in str(caught.value)


# -- discovery and calls -----------------------------------------------------------------------


@pytest.mark.processes
async def test_tools_are_discovered_named_by_server_with_annotations(harness: Harness) -> None:
    await harness.start([fixture_server("fx")])
    tools = harness.tools()
    assert {"fx_echo", "fx_delete_file", "fx_slow", "fx_weather"} <= set(tools)
    assert tools["fx_echo"].risk is RiskLevel.REVERSIBLE
    assert tools["fx_echo"].annotations.read_only is True
    assert tools["fx_delete_file"].risk is RiskLevel.IRREVERSIBLE
    assert tools["fx_delete_file"].annotations.destructive is True
    assert tools["fx_slow"].risk is RiskLevel.IRREVERSIBLE  # no annotation: assume the worst
    # Every description names the server the tool belongs to.
    assert all(t.description.endswith(" (MCP server fx)") for t in tools.values())


@pytest.mark.processes
async def test_every_page_of_the_tool_list_is_read(harness: Harness) -> None:
    await harness.start([fixture_server("paged", "--page-size", "3")])
    assert len([n for n in harness.tools() if n.startswith("paged_")]) == 10


@pytest.mark.processes
async def test_results_are_mapped(harness: Harness) -> None:
    await harness.start([fixture_server("fx")])
    run = harness.orchestrator.execute
    assert (await run("fx_echo", {"text": "hello"})).data == "hello"
    assert (await run("fx_weather", {"city": "Oslo"})).data == {"city": "Oslo", "temp_c": 21.5}
    picture = await run("fx_picture", {})
    assert picture.success and "a picture" in picture.data
    assert "[image image/png, 67 bytes]" in picture.data
    failed = await run("fx_fail", {"message": "disk full"})
    assert failed.error_code is ErrorCode.TOOL_EXECUTION_FAILED and "disk full" in failed.error


@pytest.mark.processes
async def test_a_50_mb_result_arrives_whole_while_the_server_is_probed(tmp_path: Path) -> None:
    size = 50 * 1024 * 1024
    async with open_harness(tmp_path / "mcp-servers.json", health_interval=0.05) as harness:
        await harness.start([fixture_server("fx", "--large-output", toolTimeout=120)])
        connection = harness.connection()
        # Every probe sent during the transfer has its reply queued behind the result.
        connection.probe_timeout = 2
        result = await harness.orchestrator.execute("fx_big_text", {"size": size})
        assert result.success, result.error
        assert len(result.data) == size and result.data == big_text(size)
        assert connection.ready and connection.state.last_error is None


@pytest.mark.processes
async def test_a_reply_behind_a_slow_transfer_is_waited_for() -> None:
    # The server writes 64 KiB every 50 ms: 2 MiB take 1.6 s, far past the probe timeout,
    # and only the bytes still arriving show that the server is alive.
    size = 2 * 1024 * 1024
    slow_link = [FIXTURE, "--large-output", "--stdout-pause", "0.05"]
    connection = ServerConnection(
        MCPServerConfig(name="far", command=sys.executable, args=slow_link),
        health_interval=0.05,
        probe_timeout=0.5,
        backoff_start=600,
    )
    connection.start()
    try:
        await connection.wait_first_attempt()
        assert connection.ready, connection.state.last_error
        result = await connection.call_tool("big_text", {"size": size}, time_limit=60)
        assert result.content == [types.TextContent(type="text", text=big_text(size))]
        assert connection.ready and connection.state.last_error is None
    finally:
        await connection.stop()


@pytest.mark.processes
async def test_a_huge_stderr_line_is_cut_and_the_server_stays_ready(harness: Harness) -> None:
    await harness.start([fixture_server("fx", "--large-output")])
    run = harness.orchestrator.execute
    size = 16 * 1024 * 1024
    assert (await run("fx_write_stderr", {"size": size, "end": ""})).success
    assert (await run("fx_write_stderr", {"size": 10})).success  # ends the line
    stderr = harness.connection().state.stderr
    await settled(lambda: any(line.startswith("e") for line in stderr))
    (line,) = [line for line in stderr if line.startswith("e")]
    assert line == kept_of_e_line(size + 10)
    assert harness.connection().ready
    assert (await run("fx_echo", {"text": "still here"})).data == "still here"


def test_a_line_that_never_ends_is_held_in_bounded_memory() -> None:
    splitter = LineSplitter(limit=STDERR_LINE_LIMIT)
    chunk = b"e" * 65536
    tracemalloc.start()
    try:
        for _ in range(1600):  # 100 MiB without a newline
            assert splitter.feed(chunk) == []
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * STDERR_LINE_LIMIT
    assert splitter.rest() == kept_of_e_line(1600 * 65536)


def test_lines_split_across_chunks_are_whole_and_decoded_once_complete() -> None:
    splitter = LineSplitter()
    text = "première ligne\nsecond\n\nthird"
    data = text.encode()
    lines = [line for i in range(len(data)) for line in splitter.feed(data[i : i + 1])]
    assert lines == ["première ligne", "second", ""]
    assert splitter.rest() == "third"
    assert splitter.rest() is None


@pytest.mark.processes
async def test_a_slow_call_times_out_and_the_server_stays_usable(harness: Harness) -> None:
    await harness.start([fixture_server("fx", toolTimeout=0.5)])
    slow = await harness.orchestrator.execute("fx_slow", {"seconds": 5})
    assert slow.error_code is ErrorCode.TOOL_EXECUTION_TIMEOUT
    assert "0.5 s" in (slow.error or "")
    assert (await harness.orchestrator.execute("fx_echo", {"text": "still here"})).success


@pytest.mark.processes
async def test_a_crash_mid_call_fails_the_call_and_marks_the_server_down(
    harness: Harness,
) -> None:
    await harness.start([fixture_server("fx")])
    result = await asyncio.wait_for(harness.orchestrator.execute("fx_crash", {"code": 3}), 5)
    assert result.error_code is ErrorCode.AGENT_UNAVAILABLE
    await harness.until(lambda: harness.connection().state.exit is not None, "exit seen")
    assert harness.connection().state.exit.code == 3
    assert "crashing on purpose" in harness.connection().state.stderr


@pytest.mark.processes
async def test_startup_failures_say_what_happened(harness: Harness) -> None:
    await harness.start(
        [
            {"name": "missing", "command": "no-such-mcp-server-xyz"},
            fixture_server("quits", "--exit-at-start", "1"),
            fixture_server("mute", "--never-answer", timeout=1),
            fixture_server("fine"),
        ]
    )
    errors = {n: c.state.last_error for n, c in harness.manager.connections.items()}
    assert (
        errors["missing"] is not None
        and 'command not found: "no-such-mcp-server-xyz"' in errors["missing"]
    )
    assert errors["quits"] is not None and "exited with code 1" in errors["quits"]
    assert "FIXTURE_TOKEN is not set" in errors["quits"]
    assert errors["mute"] == "did not finish the MCP handshake within 1 s"
    assert harness.connection("fine").state.status is ServerStatus.READY
    assert "fine_echo" in harness.tools()


@pytest.mark.processes
async def test_a_server_that_quits_at_start_is_told_by_its_exit_and_last_stderr_line(
    harness: Harness,
) -> None:
    # Each closes stdout first and exits a little later, its last stderr line written just
    # before: diana sees the closed pipe, then the exit, then the line, in every order.
    # Each must be told by how it ended, never as a bare "connection closed".
    names = [f"quits{i}" for i in range(8)]
    await harness.start(
        [
            # Eight Python servers starting at once on a loaded machine: the handshake's
            # timeout must not be what ends them first.
            fixture_server(
                name, "--exit-at-start", "1", "--close-stdout-first", f"{i * 0.011:.3f}", timeout=30
            )
            for i, name in enumerate(names)
        ]
    )
    errors = {n: harness.connection(n).state.last_error for n in names}
    expected = (
        "process exited with code 1 before the MCP handshake finished; "
        "last stderr line: fatal: FIXTURE_TOKEN is not set"
    )
    assert errors == dict.fromkeys(names, expected)


@pytest.mark.processes
async def test_kill_9_is_seen_at_once_and_the_server_comes_back(harness: Harness) -> None:
    await harness.start([fixture_server("fx")])
    connection = harness.connection()
    first_pid = connection.state.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)

    await harness.until(lambda: connection.state.status is ServerStatus.ERROR, "down", 2)
    assert "killed by SIGKILL" in (connection.state.last_error or "")
    down = await harness.orchestrator.execute("fx_echo", {"text": "x"})
    assert down.error_code is ErrorCode.AGENT_UNAVAILABLE
    assert "killed by SIGKILL" in (down.error or "")

    await harness.until(lambda: connection.ready, "back by itself", 10)
    assert connection.state.pid != first_pid
    assert (await harness.orchestrator.execute("fx_echo", {"text": "back"})).data == "back"


@pytest.mark.processes
async def test_manual_reconnect_connects_now(harness: Harness) -> None:
    await harness.start([fixture_server("fx")])
    connection = harness.connection()
    old_pid = connection.state.pid
    await harness.manager.reconnect("fx")
    await harness.manager.wait_reconnected(["fx"])
    assert connection.ready and connection.state.pid != old_pid
    assert old_pid is not None and not alive(old_pid)


@pytest.mark.processes
async def test_a_tool_list_change_is_picked_up(harness: Harness) -> None:
    await harness.start([fixture_server("fx")])
    result = await harness.orchestrator.execute("fx_add_tool", {"name": "brand_new"})
    assert result.success
    await harness.until(lambda: "fx_brand_new" in harness.tools(), "new tool registered")
    assert (await harness.orchestrator.execute("fx_brand_new", {})).data == "I am brand_new"


@pytest.mark.processes
async def test_hot_reload_adds_removes_and_restarts_servers(harness: Harness) -> None:
    await harness.start([fixture_server("keep"), fixture_server("drop"), fixture_server("change")])
    kept_pid = harness.connection("keep").state.pid
    dropped_pid = harness.connection("drop").state.pid
    harness.write(
        [fixture_server("keep"), fixture_server("change", timeout=5), fixture_server("new")]
    )

    assert await harness.manager.reload()
    await harness.manager.wait_ready()

    assert set(harness.manager.connections) == {"keep", "change", "new"}
    assert harness.connection("keep").state.pid == kept_pid  # untouched
    assert dropped_pid is not None and not alive(dropped_pid)
    assert "drop_echo" not in harness.tools() and "new_echo" in harness.tools()
    assert harness.connection("change").config.timeout == 5


@pytest.mark.processes
async def test_an_invalid_edit_is_reported_and_changes_nothing(harness: Harness) -> None:
    await harness.start([fixture_server("keep")])
    pid = harness.connection("keep").state.pid
    harness.path.write_text('{"mcpServers": {"keep": {"command": 5}}}')

    assert not await harness.manager.reload()

    notices = []
    while not harness.events.queue.empty():
        event = harness.events.queue.get_nowait()
        if isinstance(event, Notice):
            notices.append(event.message)
    assert any('server "keep": command' in n for n in notices)
    assert harness.connection("keep").state.pid == pid and harness.connection("keep").ready


@pytest.mark.processes
async def test_the_config_file_is_watched(harness: Harness) -> None:
    harness.write([])
    await harness.manager.start(harness.manager.load(), watch=True)
    harness.write([fixture_server("late")])
    await harness.until(lambda: "late" in harness.manager.connections, "picked up", 10)
    await harness.manager.wait_ready()
    await harness.until(lambda: harness.connection("late").ready, "ready", 10)


@pytest.mark.processes
async def test_no_process_is_left_after_close(tmp_path: Path) -> None:
    # Besides the servers, what they started: a grandchild in a session of its own, and a
    # daemon that forked twice (re-parented once its parent exited).
    sleepers = tmp_path / "sleepers"

    def spawning(name: str, how: str) -> dict[str, Any]:
        args = [SPAWNING, "--pids", str(sleepers), "--how", how]
        return {"name": name, "command": sys.executable, "args": args}

    h = Harness(tmp_path / "mcp-servers.json")
    await h.start([fixture_server("a"), spawning("b", "setsid"), spawning("c", "double-fork")])
    assert all(c.ready for c in h.manager.connections.values())
    pids = [c.state.pid for c in h.manager.connections.values()]
    grandchildren = [int(pid) for pid in sleepers.read_text().split()]
    assert len(grandchildren) == 2 and all(alive(pid) for pid in grandchildren)
    await h.orchestrator.shutdown()
    await h.manager.close()
    assert all(pid is not None and not alive(pid) for pid in pids)
    assert [pid for pid in grandchildren if alive(pid)] == []


@pytest.mark.processes
async def test_the_reference_time_server(harness: Harness, unforked: None) -> None:
    # started whole, as a user's diana starts it: the one test that does not fork it
    await harness.start({"mcpServers": {"time": {"command": "mcp-server-time"}}})
    assert {"time_get_current_time", "time_convert_time"} <= set(harness.tools())
    result = await harness.orchestrator.execute("time_get_current_time", {"timezone": "UTC"})
    assert result.success and result.data["timezone"] == "UTC"


# -- remote transports -------------------------------------------------------------------------


@pytest.fixture(params=["http", "sse"])
def remote_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, FIXTURE, "--transport", request.param, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, process)
        path = "/mcp" if request.param == "http" else "/sse"
        transport = "streamable-http" if request.param == "http" else "sse"
        yield transport, f"http://127.0.0.1:{port}{path}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.processes
async def test_remote_servers_over_streamable_http_and_sse(
    remote_server: tuple[str, str], harness: Harness
) -> None:
    # remote_server comes first so that it is torn down after the client has closed.
    transport, url = remote_server
    await harness.start(
        [{"name": "remote", "url": url, "transport": transport, "headers": {"X-Test": "yes"}}]
    )
    assert harness.connection("remote").ready, harness.connection("remote").state.last_error
    assert (await harness.orchestrator.execute("remote_echo", {"text": "far"})).data == "far"


@pytest.mark.processes
async def test_the_wrong_transport_for_a_url_is_named_with_the_fix(
    remote_server: tuple[str, str], harness: Harness
) -> None:
    transport, url = remote_server
    wrong = "sse" if transport == "streamable-http" else "streamable-http"
    await harness.start([{"name": "remote", "url": url, "transport": wrong, "timeout": 5}])
    error = harness.connection("remote").state.last_error or ""
    hint = (
        'for an SSE server, add "transport": "sse"'
        if wrong == "streamable-http"
        else 'for streamable HTTP, leave "transport" out'
    )
    assert hint in error, error


@pytest.fixture
def http_process(unforked: None) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The fixture server over streamable HTTP: its port and its (own) process."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, FIXTURE, "--transport", "http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, process)
        yield port, process
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.processes
async def test_a_hung_http_server_is_found_as_soon_as_a_call_to_it_fails(
    http_process: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, process = http_process
    down = asyncio.Event()

    def on_change(connection: ServerConnection) -> None:
        if connection.state.status is ServerStatus.ERROR:
            down.set()

    # The product's own cadence: an idle remote server is probed only every minute.
    connection = ServerConnection(
        MCPServerConfig(
            name="far", url=f"http://127.0.0.1:{port}/mcp", transport="streamable-http"
        ),
        on_change=on_change,
        backoff_start=600,
    )
    try:
        connection.start()
        await connection.wait_first_attempt()
        assert connection.ready, connection.state.last_error
        process.send_signal(signal.SIGSTOP)  # it takes connections, and answers nothing
        with pytest.raises(MCPError):
            await connection.call_tool("echo", {"text": "hello?"}, time_limit=0.5)
        # The failed call has it probed at once: found within the probe's 6 s of silence,
        # long before the next idle probe.
        await asyncio.wait_for(down.wait(), 15)
        assert connection.state.last_error == (
            f"stopped answering: a health check got no reply within {connection.probe_timeout:g} s"
        )
    finally:
        process.send_signal(signal.SIGCONT)
        await connection.stop()


@pytest.fixture(params=[((), "tools/list"), (("--handshake-only",), "ping")], ids=["2026", "2025"])
def counting_server(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """The fixture server over streamable HTTP, counting the requests it gets by method: its
    port, and the probe its protocol calls for (2025-11-25 has ping, 2026-07-28 has not)."""
    extra, probe = request.param
    port = free_port()
    command = [sys.executable, FIXTURE, "--transport", "http", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--count-requests", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, process)
        yield port, probe
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.processes
async def test_an_idle_remote_server_is_probed_rarely_with_ping_where_it_exists(
    counting_server: tuple[int, str],
) -> None:
    port, probe = counting_server
    probes: dict[str, int] = {"near": 0, "far": 0}
    probed: dict[str, asyncio.Event] = {"near": asyncio.Event(), "far": asyncio.Event()}

    def on_work(connection: ServerConnection, kind: str, _seconds: float) -> None:
        if kind == "probe":
            probes[connection.name] += 1
            if connection.name == "far" or probes["near"] >= 20:
                probed[connection.name].set()

    async def counts() -> dict[str, int]:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/counts")
        return dict(answer.json())

    # Both asked to probe every 50 ms: the local one does, the remote one waits a minute.
    near = ServerConnection(
        MCPServerConfig(name="near", command=sys.executable, args=[FIXTURE]),
        health_interval=0.05,
        on_work=on_work,
        backoff_start=600,
    )
    far = ServerConnection(
        MCPServerConfig(
            name="far", url=f"http://127.0.0.1:{port}/mcp", transport="streamable-http"
        ),
        health_interval=0.05,
        on_work=on_work,
        backoff_start=600,
    )
    try:
        for connection in (near, far):
            connection.start()
            await connection.wait_first_attempt()
            assert connection.ready, connection.state.last_error
        listed = (await counts()).get("tools/list", 0)  # the discovery's own listing
        await asyncio.wait_for(probed["near"].wait(), 30)  # 20 probes of the local server
        seen = await counts()
        assert (seen.get("tools/list", 0), seen.get("ping", 0)) == (listed, 0)
        # A call that fails (no answer in time) has the remote server probed at once.
        with pytest.raises(MCPError):
            await far.call_tool("slow", {"seconds": 5}, time_limit=0.2)
        await asyncio.wait_for(probed["far"].wait(), 30)
        seen = await counts()
        assert seen.get(probe, 0) == (listed + 1 if probe == "tools/list" else 1)
        assert far.ready and probes["far"] == 1
    finally:
        await near.stop()
        await far.stop()


async def test_an_unreachable_url_is_reported(harness: Harness) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    await harness.start([{"name": "gone", "url": url, "timeout": 2}])
    error = harness.connection("gone").state.last_error or ""
    assert error.startswith(f"cannot connect to {url}")


@pytest.mark.processes
async def test_a_hung_server_is_found_by_the_health_probe(tmp_path: Path, unforked: None) -> None:
    changes: list[str] = []
    down = asyncio.Event()

    def on_change(connection: ServerConnection) -> None:
        changes.append(connection.state.status.value)
        if connection.state.status is ServerStatus.ERROR:
            down.set()

    # The 10 s connect timeout pays for start-up and the SDK import, even on a loaded machine.
    connection = ServerConnection(
        MCPServerConfig(name="frozen", command=sys.executable, args=[FIXTURE], timeout=10),
        on_change=on_change,
        health_interval=0.2,
        probe_timeout=1,
        backoff_start=600,
    )
    connection.start()
    try:
        await connection.wait_first_attempt()
        assert connection.ready and connection.state.pid is not None
        os.kill(connection.state.pid, signal.SIGSTOP)  # alive, but answers nothing
        await asyncio.wait_for(down.wait(), 10)
        assert connection.state.last_error == (
            "stopped answering: a health check got no reply within 1 s"
        )
    finally:
        if connection.state.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(connection.state.pid, signal.SIGCONT)
        await connection.stop()


@pytest.mark.processes
async def test_a_hung_server_is_found_within_ten_seconds_with_the_default_cadence(
    unforked: None,
) -> None:
    down = asyncio.Event()

    def on_change(connection: ServerConnection) -> None:
        if connection.state.status is ServerStatus.ERROR:
            down.set()

    # The product's own probe cadence and timeout: nothing overridden.
    connection = ServerConnection(
        MCPServerConfig(name="frozen", command=sys.executable, args=[FIXTURE]),
        on_change=on_change,
        backoff_start=600,
    )
    connection.start()
    try:
        await connection.wait_first_attempt()
        assert connection.ready and connection.state.pid is not None
        os.kill(connection.state.pid, signal.SIGSTOP)  # alive, but answers nothing
        # Found within 9 s (3 s between probes, 6 s of silence); the wait is how long the
        # test may hang, past that and short of the 25 s a hang took to be found before.
        await asyncio.wait_for(down.wait(), 15)
        assert connection.detection_time <= 10
        assert connection.state.last_error == (
            f"stopped answering: a health check got no reply within {connection.probe_timeout:g} s"
        )
    finally:
        if connection.state.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(connection.state.pid, signal.SIGCONT)
        await connection.stop()


@pytest.mark.processes
async def test_an_agent_is_unhealthy_while_its_server_leaves_a_probe_unanswered(
    tmp_path: Path, unforked: None
) -> None:
    async with open_harness(tmp_path / "mcp-servers.json", health_interval=0.05) as harness:
        await harness.start([fixture_server("fx")])
        connection = harness.connection()
        connection.probe_timeout = 600  # not given up during the test
        pid = connection.state.pid
        assert pid is not None

        async def health(unlike: str) -> AgentHealth:
            """The server's agent's health, once it is no longer ``unlike`` (asked for, as
            the Agents pane asks: no event announces it)."""
            async with asyncio.timeout(20):
                while True:  # health is asked for, not announced
                    reports = await harness.orchestrator.health()
                    (report,) = [r for r in reports if r.agent_id == "mcp-fx"]
                    if report.status != unlike:
                        return report
                    await asyncio.sleep(0.1)

        assert (await health("unhealthy")).status == "healthy"
        os.kill(pid, signal.SIGSTOP)
        try:
            report = await health("healthy")
            assert connection.ready  # not given up yet, and already not healthy
            assert report.message == (
                "not answering: a health check has waited over 1 s "
                "(the server is given up after 600 s of silence)"
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        assert (await health("unhealthy")).status == "healthy"


@pytest.mark.processes
async def test_a_handshake_era_server_without_the_sdk(harness: Harness) -> None:
    raw = str(Path(__file__).parent / "fixtures" / "raw_mcp_server.py")
    await harness.start([{"name": "legacy", "command": sys.executable, "args": [raw]}])
    connection = harness.connection("legacy")
    assert connection.ready and connection.state.protocol_version == "2025-06-18"
    assert (await harness.orchestrator.execute("legacy_echo", {"text": "old"})).data == "old"


def test_names_whose_tools_would_collide_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='tools would be named like those of "time"'):
        parse_servers(
            {"mcpServers": {"time": {"command": "a"}, "Time": {"command": "b"}}},
            tmp_path / "f.json",
            {},
        )


def test_keys_other_hosts_add_are_ignored(tmp_path: Path) -> None:
    (server,) = parse_servers(
        {"mcpServers": {"fs": {"command": "npx", "autoApprove": ["read"], "description": "x"}}},
        tmp_path / "f.json",
        {},
    )
    assert server.command == "npx"


@pytest.mark.processes
async def test_secrets_from_variables_are_not_shown(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_ARG", "hunter2-topsecret")
    url = f"http://127.0.0.1:{free_port()}/mcp?token=${{SECRET_ARG}}"
    await harness.start(
        [
            {"name": "remote", "url": url, "timeout": 2},
            fixture_server("local", "--stderr", "${SECRET_ARG}"),
        ]
    )
    remote = harness.manager.diagnostics("remote")
    assert "hunter2" not in json.dumps(remote.model_dump(mode="json"))
    assert (harness.manager.diagnostics("local").args or [])[-1] == "${SECRET_ARG}"


@pytest.mark.processes
async def test_a_tool_of_a_server_that_never_connected_is_unavailable_not_unknown(
    harness: Harness,
) -> None:
    await harness.start([{"name": "broken", "command": "no-such-mcp-server-xyz"}])
    result = await asyncio.wait_for(harness.orchestrator.execute("broken_anything", {}), 1)
    assert result.error_code is ErrorCode.AGENT_UNAVAILABLE
    assert "command not found" in (result.error or "")


@pytest.mark.processes
async def test_stop_and_reconnect_interrupt_a_handshake(harness: Harness) -> None:
    harness.write([fixture_server("mute", "--never-answer", timeout=20)])
    await harness.manager.start(harness.manager.load())
    connection = harness.connection("mute")
    await harness.until(lambda: connection.state.pid is not None, "spawned")
    first = connection.state.pid
    connection.reconnect()
    await harness.until(lambda: connection.state.pid not in (None, first), "respawned", 5)
    assert first is not None and not alive(first)
    await asyncio.wait_for(connection.stop(), 5)  # not the 20 s handshake timeout
    assert connection.state.status is ServerStatus.DISCONNECTED


@pytest.mark.processes
async def test_a_tool_list_that_never_ends_is_cut_off(harness: Harness, tmp_path: Path) -> None:
    endless = tmp_path / "endless.py"
    fixtures = Path(__file__).parent / "fixtures"
    raw = (fixtures / "raw_mcp_server.py").read_text()
    shutil.copy(fixtures / "raw_rpc.py", tmp_path)  # what the copy imports, beside it
    endless.write_text(
        raw.replace(
            'return {"result": {"tools": TOOLS}}',
            'return {"result": {"tools": TOOLS, "nextCursor": "again"}}',
        )
    )
    await asyncio.wait_for(
        harness.start(
            [{"name": "endless", "command": sys.executable, "args": [str(endless)], "timeout": 3}]
        ),
        15,
    )
    assert "repeated the page cursor 'again'" in (
        harness.connection("endless").state.last_error or ""
    )


# -- servers that misuse the protocol ----------------------------------------------------------


@pytest.mark.processes
async def test_a_list_changed_flood_is_coalesced_and_told_once(tmp_path: Path) -> None:
    # The server announces a change every millisecond and after every listing it answers.
    listings = tmp_path / "listings"
    log_file = tmp_path / "diana.jsonl"
    log = StructuredLog(log_file, SystemClock())
    config = MCPServerConfig(
        name="flood",
        command=sys.executable,
        args=[ABUSIVE, "list-changed-flood", "--count", str(listings)],
    )
    connection = ServerConnection(config, log=log, backoff_start=600)
    connection.start()
    # Two seconds: coalesced, at most three or four listings; uncoalesced, some hundreds.
    window = 2.0
    try:
        await connection.wait_first_attempt()
        assert connection.ready, connection.state.last_error
        before = len(listings.read_text().split())
        # fixed wait: the flood goes on for a window, and relists are counted over it
        await asyncio.sleep(window)
        relists = len(listings.read_text().split()) - before
        assert connection.ready
    finally:
        await connection.stop()
        log.close()
    # At most one listing a second (and one at the window's edge); before coalescing, some
    # hundreds.
    assert 1 <= relists <= window + 2, f"{relists} listings in {window:g} s"
    events = [json.loads(line)["event"] for line in log_file.read_text().splitlines()]
    assert events.count("mcp.list_changed_flood") == 1
    assert "mcp.tools_changed" not in events  # announced often, changed never


@pytest.mark.processes
async def test_stdout_that_is_not_json_rpc_is_reported_with_its_first_line(
    harness: Harness,
) -> None:
    await harness.start([abusive_server("noisy", "not-jsonrpc", timeout=2)])
    assert harness.connection("noisy").state.last_error == (
        "the server's stdout is not JSON-RPC: first offending line: INFO starting worker 0"
    )


@pytest.mark.processes
async def test_an_endless_stdout_line_is_cut_and_the_server_marked_down(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "STDOUT_MESSAGE_LIMIT", 2**20, raising=False)
    await harness.start([abusive_server("endless", "endless-reply", toolTimeout=3)])
    connection = harness.connection("endless")
    assert connection.ready, connection.state.last_error
    server = connection.state.pid
    assert server is not None
    tracemalloc.start()
    try:
        result = await harness.orchestrator.execute("endless_echo", {"text": "x"})
        # Read past, not kept, up to 16 times the limit: then the connection ends.
        await settled(lambda: connection.state.last_error is not None)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.success
    assert connection.state.last_error == (
        "sent a message longer than 16 MiB on stdout (the limit is 1 MiB) that did not end: "
        "the connection was closed"
    )
    assert peak < 8 * 2**20, f"{peak:,} bytes held for a line cut at 1 MiB"
    await settled(lambda: not alive(server))


@pytest.mark.processes
async def test_a_stderr_flood_without_newlines_stays_in_bounded_memory(harness: Harness) -> None:
    size = 128 * 2**20  # written before the server reads its first request
    tracemalloc.start()
    try:
        await harness.start(
            [abusive_server("loud", "stderr-flood", "--megabytes", "128", timeout=30)]
        )
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    connection = harness.connection("loud")
    assert connection.ready, connection.state.last_error
    assert list(connection.state.stderr) == [kept_of_e_line(size)]
    assert peak < 8 * 2**20, f"{peak:,} bytes held while 128 MiB of stderr went by"
    assert (await harness.orchestrator.execute("loud_echo", {"text": "heard"})).data == "heard"
