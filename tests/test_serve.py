"""`diana serve` over stdio, driven by the official MCP Python SDK client as another host would:
the tools it lists, an allowed call, a destructive call held as a proposal that names the
host, decided by `diana approve` / `diana reject` from another process than the gateway (the
test's own), and a host that stops waiting (cancel, or stdin closed) withdrawing it for good."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import select
import shlex
import shutil
import sqlite3
import subprocess
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from diana.core.api import Core
from diana.core.profiles import Profile
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from .commands import diana_argv, diana_aside, diana_here, diana_here_async
from .database import any_pending, query
from .serving import (
    HOST,
    KEEP_ALIVE,
    Waiting,
    configure,
    lines,
    npx_command,
    pending_proposals,
    running_with,
    text_of,
)
from .serving import stdio_host as host
from .waits import until

pytestmark = pytest.mark.processes  # every test here starts diana serve and an MCP server


async def proposal(config_dir: Path, data_dir: Path, proposal_id: str) -> Any:
    async with await Core.open(Profile.READ, config_dir, data_dir) as core:
        return await core.proposal(proposal_id)


async def test_a_host_sees_diana_tools_with_their_hints_and_an_allowed_call_returns(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    marks.write_text("one\ntwo\n")
    configure(config_dir, marks)
    async with host(config_dir, data_dir) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert tools["append_append"].annotations.destructive_hint is True
        assert tools["append_count"].annotations.read_only_hint is True
        assert "save_fact" in tools  # diana's own agents too
        assert tools["append_append"].input_schema["properties"]["mark"]["type"] == "string"

        counted = await session.call_tool("append_count", {})
        assert not counted.is_error
        assert text_of(counted) == "2"
        unknown = await session.call_tool("append_nope", {})
        assert unknown.is_error and "append_nope" in text_of(unknown)
    async with await Core.open(Profile.READ.but(execution_log=True), config_dir, data_dir) as core:
        logged = await core.query_calls(tool="append_count")
    assert [call.origin for call in logged] == ["host:claude-code"]


async def test_a_hosts_call_is_answered_only_once_it_is_logged_with_the_host(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """The record of a host's call, with its origin, is in the database before the host gets
    the result: while another process keeps the database locked for writing, the answer
    waits, not the record."""
    marks = tmp_path / "marks"
    marks.write_text("one\n")
    configure(config_dir, marks)
    async with host(config_dir, data_dir) as session:
        assert not (await session.call_tool("append_count", {})).is_error  # all set up
        with contextlib.closing(
            sqlite3.connect(data_dir / "diana.db", isolation_level=None)
        ) as other:
            other.execute("BEGIN IMMEDIATE")  # another process writing, for a while
            call = asyncio.ensure_future(session.call_tool("append_count", {}))
            answered, _ = await asyncio.wait({call}, timeout=3)
            other.execute("ROLLBACK")
        assert not answered  # not while its record could not be written
        assert not (await asyncio.wait_for(call, 60)).is_error
        logged = query(data_dir, "SELECT origin FROM execution_log WHERE tool = 'append_count'")
        assert logged == [("host:claude-code",), ("host:claude-code",)]


async def test_a_held_call_waits_with_progress_and_returns_its_result_once_approved(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    async with host(config_dir, data_dir) as session:
        waiting = Waiting()
        call = asyncio.ensure_future(
            session.call_tool("append_append", {"mark": "m1"}, progress_callback=waiting)
        )
        proposal_id = await waiting.proposal_id()
        held = await proposal(config_dir, data_dir, proposal_id)
        assert (held.status.value, held.origin) == ("pending", "host:claude-code")
        assert held.arguments == {"mark": "m1"}
        assert not call.done() and lines(marks) == []

        approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
        assert approved.returncode == 0, approved.stderr
        result = await asyncio.wait_for(call, 30)
        assert not result.is_error
        assert text_of(result) == "appended m1"
        assert len(waiting.messages) >= 1
    assert lines(marks) == ["m1"]  # run exactly once: by the approval, never again
    # The host's calls: the one it made (held) and the run of the proposal it made.
    logged = await diana_here_async(
        config_dir, data_dir, "log", "--client", "claude-code", "--json"
    )
    calls = [(call["tool"], call["status"]) for call in json.loads(logged.stdout)]
    assert calls == [("append_append", "approved"), ("append_append", "succeeded")]
    other = await diana_here_async(
        config_dir, data_dir, "stats", "--client", "someone-else", "--json"
    )
    assert json.loads(other.stdout)["tools"] == []
    mine = await diana_here_async(
        config_dir, data_dir, "stats", "--client", "claude-code", "--json"
    )
    (figures,) = json.loads(mine.stdout)["tools"]
    assert (figures["name"], figures["calls"], figures["succeeded"]) == ("append_append", 2, 1)


async def test_while_hosts_are_paused_a_call_the_policy_allows_waits_for_a_person(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """The kill switch, from another process while a host is connected: its next call of a
    read-only tool (which runs unasked) waits as a proposal saying hosts are paused; resumed,
    the same call runs at once."""
    configure(config_dir, tmp_path / "marks")
    async with host(config_dir, data_dir) as session:
        assert text_of(await session.call_tool("append_count", {})) == "0"
        paused = await diana_here_async(config_dir, data_dir, "serve", "pause")
        assert paused.returncode == 0, paused.stderr
        waiting = Waiting()
        call = asyncio.ensure_future(
            session.call_tool("append_count", {}, progress_callback=waiting)
        )
        held = await proposal(config_dir, data_dir, await waiting.proposal_id())
        assert held.status.value == "pending" and "hosts are paused" in held.reason

        resumed = await diana_here_async(config_dir, data_dir, "serve", "resume")
        assert resumed.returncode == 0, resumed.stderr
        assert text_of(await session.call_tool("append_count", {})) == "0"
        approved = await diana_here_async(config_dir, data_dir, "approve", held.id)
        assert approved.returncode == 0, approved.stderr
        assert text_of(await asyncio.wait_for(call, 30)) == "0"


async def test_a_rejected_call_is_a_tool_error_carrying_the_reason(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    async with host(config_dir, data_dir) as session:
        waiting = Waiting()
        call = asyncio.ensure_future(
            session.call_tool("append_append", {"mark": "no"}, progress_callback=waiting)
        )
        proposal_id = await waiting.proposal_id()
        rejected = await diana_here_async(
            config_dir, data_dir, "reject", proposal_id, "--reason", "not on a Friday"
        )
        assert rejected.returncode == 0, rejected.stderr
        result = await asyncio.wait_for(call, 30)
        assert result.is_error
        assert "rejected" in text_of(result) and "not on a Friday" in text_of(result)
    assert lines(marks) == []


async def test_a_host_that_cancels_withdraws_the_proposal_for_good(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    async with host(config_dir, data_dir) as session:
        waiting = Waiting()
        call = asyncio.ensure_future(
            session.call_tool("append_append", {"mark": "gone"}, progress_callback=waiting)
        )
        proposal_id = await waiting.proposal_id()
        call.cancel()  # the SDK tells diana: notifications/cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await call
        # The host is still connected: a call after the cancel is served as ever.
        assert text_of(await session.call_tool("append_count", {})) == "0"
        withdrawn = await proposal(config_dir, data_dir, proposal_id)
    assert withdrawn.status.value == "withdrawn"
    assert "stopped waiting" in (withdrawn.error or "")
    late = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
    assert late.returncode == 2 and "withdrawn" in late.stderr
    assert lines(marks) == []


def rpc(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    process.stdin.flush()


def read_message(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "diana serve closed stdout"
    return json.loads(line)  # anything but JSON-RPC on stdout fails here


def handshake(process: subprocess.Popen[bytes], host: str) -> None:
    """The host ``host`` initializes its session with diana serve."""
    rpc(process, {"id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": host, "version": "1"}}})  # fmt: skip
    assert read_message(process)["id"] == 1
    rpc(process, {"method": "notifications/initialized"})


def test_a_host_that_disconnects_mid_wait_withdraws_it_and_serve_exits_cleanly(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    argv = diana_argv(config_dir, data_dir, "serve", "--keep-alive", KEEP_ALIVE)
    errors = (tmp_path / "stderr").open("wb")
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    try:
        handshake(process, "codex")
        rpc(process, {"id": 2, "method": "tools/call", "params": {
            "name": "append_append", "arguments": {"mark": "x"},
            "_meta": {"progressToken": "t"}}})  # fmt: skip
        message = read_message(process)
        assert message["method"] == "notifications/progress", message
        proposal_id = str(message["params"]["message"]).rsplit(" ", 1)[-1]
        assert running_with(str(marks))  # the MCP server diana serve started
        assert process.stdin is not None
        process.stdin.close()  # the host goes away
        code = process.wait(60)
        assert process.stdout is not None
        stdout = process.stdout.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        errors.close()
    assert code == 0, (tmp_path / "stderr").read_text()
    assert running_with(str(marks)) == []  # no orphan: its MCP server ended with it
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in stdout.splitlines())
    withdrawn = asyncio.run(proposal(config_dir, data_dir, proposal_id))
    assert (withdrawn.status.value, withdrawn.origin) == ("withdrawn", "host:codex")
    late = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert late.returncode == 2
    assert lines(marks) == []


async def test_a_wait_past_serve_wait_ends_naming_the_proposal_which_stays_pending(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    # The wait of this host's own (claude-code): hosts that cut calls off sooner get less.
    configure(config_dir, marks, wait=600, clients={"claude-code": {"wait": 1}})
    async with host(config_dir, data_dir) as session:
        result = await asyncio.wait_for(session.call_tool("append_append", {"mark": "w"}), 30)
    assert result.is_error
    said = text_of(result)
    proposal_id = said.split("proposal ", 1)[1].split(" ", 1)[0]
    assert f"diana approve {proposal_id}" in said
    held = await proposal(config_dir, data_dir, proposal_id)
    assert held.status.value == "pending"  # still for a person to decide
    assert lines(marks) == []


def test_a_request_the_sdk_cannot_read_is_answered_with_a_parse_error_not_silence(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    argv = diana_argv(config_dir, data_dir, "serve")
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        handshake(process, "cursor")
        deep = json.loads("[" * 300 + "]" * 300)  # deeper than the SDK's JSON reader goes
        rpc(process, {"id": 7, "method": "tools/call", "params": {
            "name": "append_append", "arguments": {"mark": "d", "extra": deep}}})  # fmt: skip
        answer = read_message(process)
        assert answer["id"] == 7 and answer["error"]["code"] == -32700
        assert "recursion limit" in answer["error"]["message"]
        rpc(process, {"id": 8, "method": "ping"})  # and the host is served on
        assert read_message(process) == {"jsonrpc": "2.0", "id": 8, "result": {}}
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert lines(marks) == []


def test_serve_told_to_stop_mid_wait_withdraws_the_proposal_and_leaves_nothing_running(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    argv = diana_argv(config_dir, data_dir, "serve", "--keep-alive", KEEP_ALIVE)
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        handshake(process, "gemini-cli")
        rpc(process, {"id": 2, "method": "tools/call", "params": {
            "name": "append_append", "arguments": {"mark": "t"},
            "_meta": {"progressToken": "t"}}})  # fmt: skip
        message = read_message(process)
        proposal_id = str(message["params"]["message"]).rsplit(" ", 1)[-1]
        process.terminate()  # SIGTERM while the host still holds stdin open
        code = process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 130
    assert running_with(str(marks)) == []
    withdrawn = asyncio.run(proposal(config_dir, data_dir, proposal_id))
    assert withdrawn.status.value == "withdrawn"
    assert "diana serve" in (withdrawn.error or "") and "stopped" in (withdrawn.error or "")
    assert lines(marks) == []


# -- what a host's configuration needs ----------------------------------------------------------


def printed(config_dir: Path, data_dir: Path, host_name: str) -> tuple[str, str]:
    done = diana_aside(config_dir, data_dir, "serve", "--print-config", host_name)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_print_config_gives_each_host_its_own_format_with_this_diana_and_its_dirs(
    config_dir: Path, data_dir: Path
) -> None:
    """Every host's snippet parses in that host's format, starts this very diana by its
    absolute path on the same config and data dirs, and lets a call wait as long as
    serve.wait (and a little more) where the host has a limit of its own."""
    (config_dir / "settings.json").write_text(json.dumps({"serve": {"wait": 120}}))
    dirs = ["--config-dir", str(config_dir.resolve()), "--data-dir", str(data_dir.resolve())]
    entries = {}
    for name, key in (
        ("claude-desktop", "mcpServers"),
        ("cursor", "mcpServers"),
        ("gemini-cli", "mcpServers"),
        ("oterm", "mcpServers"),
        ("vscode", "servers"),
    ):
        snippet, where = printed(config_dir, data_dir, name)
        entries[name] = json.loads(snippet)[key]["diana"]
        assert where.startswith(f"diana: for {name}: ") and key in where
    codex = tomllib.loads(printed(config_dir, data_dir, "codex")[0])["mcp_servers"]["diana"]
    entries["codex"] = codex
    for name, entry in entries.items():
        assert Path(entry["command"]).is_absolute(), name
        assert entry["args"] == ["serve", *dirs], name
    assert entries["vscode"]["type"] == "stdio"
    assert codex["tool_timeout_sec"] == 150 and entries["gemini-cli"]["timeout"] == 150_000
    claude_code, _ = printed(config_dir, data_dir, "claude-code")
    command = shlex.split(claude_code)
    assert command[:6] == ["claude", "mcp", "add", "--scope", "user", "diana"]
    assert command[6:] == ["--", entries["cursor"]["command"], "serve", *dirs]

    unknown = diana_here(config_dir, data_dir, "serve", "--print-config", "notepad")
    assert unknown.returncode == 2 and "oterm" in unknown.stderr  # the hosts it knows
    odd = Path(os.fsdecode(bytes(config_dir) + b"-\xff"))  # a dir no host config can name
    odd.mkdir()
    refused = diana_here(odd, data_dir, "serve", "--print-config", "codex")
    assert refused.returncode == 2 and "is not UTF-8 text" in refused.stderr
    assert refused.stdout == ""
    (config_dir / "settings.json").write_text(json.dumps({"serve": {"wait": -1}}))
    bad = diana_here(config_dir, data_dir, "serve", "--print-config", "codex")
    assert bad.returncode == 2 and "serve.wait" in bad.stderr and bad.stdout == ""


async def test_a_host_started_from_the_printed_config_reaches_diana(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """The snippet is what a host runs: started as printed, by the SDK's client, it is
    diana serving this config's servers."""
    configure(config_dir, tmp_path / "marks")
    snippet, _ = printed(config_dir, data_dir, "cursor")
    entry = json.loads(snippet)["mcpServers"]["diana"]
    # As printed, plus the suite's $TMPDIR, which the SDK's client does not pass on (it gives a
    # server a few variables only): diana serve then forks its MCP server from the fork server.
    env = {"TMPDIR": os.environ["TMPDIR"]}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=HOST) as session,
    ):
        await session.initialize()
        assert "append_count" in {tool.name for tool in (await session.list_tools()).tools}


# -- the MCP Inspector's CLI as the host -----------------------------------------------------------

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"  # fetched by .ci/dev before the suite


@pytest.mark.skipif(shutil.which("npx") is None, reason="needs npx (Node.js)")
def test_the_mcp_inspector_cli_as_a_host_lists_tools_and_its_held_call_runs_once_approved(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Another implementation of MCP than diana's own SDK (the Inspector's CLI, in Node.js)
    starts `diana serve` as its server: it lists the tools, and its call of a destructive tool
    waits as a proposal naming it, runs once `diana approve` is given, and the result reaches
    it."""
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    cli = [*npx_command("mcp-inspector", INSPECTOR), "--cli"]
    inspector = [*cli, *diana_argv(config_dir, data_dir, "serve")]
    listed = subprocess.run(
        [*inspector, "--method", "tools/list"], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["tools"]}
    assert {"append_append", "append_count", "save_fact"} <= names

    call = [*inspector, "--method", "tools/call", "--tool-name", "append_append"]
    with subprocess.Popen(
        [*call, "--tool-arg", "mark=inspected"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as held:
        try:
            until(lambda: any_pending(data_dir), within=120)
            (waiting,) = pending_proposals(config_dir, data_dir)
            assert waiting["origin"] == "host:inspector-cli" and lines(marks) == []
            approved = diana_here(config_dir, data_dir, "approve", waiting["id"])
            assert approved.returncode == 0, approved.stderr
            out, err = held.communicate(timeout=120)
        finally:
            held.kill()
    assert held.returncode == 0, err
    assert json.loads(out)["content"][0]["text"] == "appended inspected"
    assert lines(marks) == ["inspected"]  # run once


# A line of LINE_MIB: five times what diana serve may have resident at its peak (PEAK_MIB;
# about 90 MiB is usual), and more than the address space it is allowed (CAP_MIB, over twice
# the 320 MiB it maps): held whole, it could neither be nor go unseen in the peak. (A 4 GiB
# line proved no more, for four times the bytes through the pipe.)
LINE_MIB = 1024
PEAK_MIB = 200
CAP_MIB = 768


def test_a_line_past_the_limit_is_never_held_whole_and_its_request_is_answered(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, tmp_path / "marks")
    # Not forked: the process started is the one that reads the line, whose memory is looked at.
    argv = diana_argv(config_dir, data_dir, "serve", forked=False)

    def capped() -> None:  # a reader that held the line whole would fail, not eat the machine
        resource.setrlimit(resource.RLIMIT_AS, (CAP_MIB << 20, CAP_MIB << 20))

    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=capped,
    )
    try:
        handshake(process, "cursor")
        assert process.stdin is not None
        chunk = b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "x": "' + b"y" * (1 << 20)

        def write_line() -> None:  # in a thread: a reader that died must not block the test
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                for _ in range(LINE_MIB):  # past the address space it may use
                    process.stdin.write(chunk)
                process.stdin.write(b"\n")
                process.stdin.flush()

        writer = threading.Thread(target=write_line, daemon=True)
        writer.start()
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 120)
        assert ready, "no answer to the over-long request"
        answer = read_message(process)
        assert answer["id"] == 7 and answer["error"]["code"] == -32700
        assert "larger than the 4 MiB limit" in answer["error"]["message"]
        status = Path(f"/proc/{process.pid}/status").read_text()
        peak_kb = int(status.split("VmHWM:")[1].split()[0])
        assert peak_kb < PEAK_MIB << 10  # resident at its peak: far below one line's size
        rpc(process, {"id": 8, "method": "ping"})  # and the host is served on
        assert read_message(process) == {"jsonrpc": "2.0", "id": 8, "result": {}}
        process.stdin.close()
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
