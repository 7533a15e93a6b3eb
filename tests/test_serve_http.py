"""`diana serve --http`: the gateway over streamable HTTP on the loopback address, driven by
the official SDK client with a client's bearer token. The token names the host (not what it
calls itself); no token, a wrong or removed one is 401; a foreign Origin or Host (DNS
rebinding) is 403; only the token's hash is kept; anything but loopback is refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from .commands import diana_here, diana_here_async
from .database import proposal_statuses
from .serving import (
    Waiting,
    configure,
    http_gateway,
    http_host,
    lines,
    new_token,
    text_of,
)
from .waits import until

pytestmark = pytest.mark.processes  # every test here starts diana serve and an MCP server


def status_of(url: str, **headers: str) -> int:
    """The HTTP status of an MCP initialize request with these headers."""
    params = {
        "protocolVersion": types.LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    }
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    body = json.dumps(message).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


async def test_a_host_with_its_token_calls_through_the_gate_named_by_the_token(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    token = new_token(config_dir, data_dir, "laptop")
    assert token not in (data_dir / "host-tokens.json").read_text()  # only its hash is kept
    with http_gateway(config_dir, data_dir) as url:
        async with http_host(url, token) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"append_append", "append_count", "save_fact"} <= names
            assert text_of(await session.call_tool("append_count", {})) == "0"

            waiting = Waiting()
            call = asyncio.ensure_future(
                session.call_tool("append_append", {"mark": "web"}, progress_callback=waiting)
            )
            proposal_id = await waiting.proposal_id()
            assert lines(marks) == []
            approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
            assert approved.returncode == 0, approved.stderr
            assert text_of(await asyncio.wait_for(call, 30)) == "appended web"
    assert lines(marks) == ["web"]
    logged = json.loads((await diana_here_async(config_dir, data_dir, "log", "--json")).stdout)
    # The token's client, though the host calls itself claude-code in clientInfo.
    assert {call["origin"] for call in logged if call["tool"] == "append_count"} == {"host:laptop"}


def test_no_wrong_or_removed_token_is_401_and_a_foreign_origin_or_host_is_403(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, tmp_path / "marks")
    token = new_token(config_dir, data_dir, "laptop")
    other = new_token(config_dir, data_dir, "desktop")
    with http_gateway(config_dir, data_dir) as url:
        port = url.split(":")[2].split("/")[0]
        assert status_of(url, Authorization=f"Bearer {token}") == 200
        assert status_of(url) == 401
        assert status_of(url, Authorization=f"Bearer {token}x") == 401
        assert status_of(url, Authorization=f"Basic {token}") == 401
        assert status_of(url, Authorization=f"Bearer {token}", Origin="http://evil.example") == 403
        rebound = {"Authorization": f"Bearer {token}", "Host": f"evil.example:{port}"}
        assert status_of(url, **rebound) == 403
        assert status_of(url, Authorization=f"Bearer {token}", Origin=url.rsplit("/", 1)[0]) == 200
        removed = diana_here(config_dir, data_dir, "serve", "token", "remove", "laptop")
        assert removed.returncode == 0, removed.stderr
        assert status_of(url, Authorization=f"Bearer {token}") == 401  # at once
        assert status_of(url, Authorization=f"Bearer {other}") == 200  # the others stay


def test_only_loopback_is_served_and_no_token_says_so(config_dir: Path, data_dir: Path) -> None:
    for address in ("0.0.0.0", "192.168.1.10", "example.com"):
        refused = diana_here(config_dir, data_dir, "serve", "--http", "--bind", address)
        assert refused.returncode == 2 and "loopback" in refused.stderr, address
    alone = diana_here(config_dir, data_dir, "serve", "--port", "9000")
    assert alone.returncode == 2 and "--port goes with --http" in alone.stderr
    with http_gateway(config_dir, data_dir, "--no-token") as url:
        assert status_of(url) == 200
    listed = diana_here(config_dir, data_dir, "serve", "token", "list")
    assert "No client has a token" in listed.stdout
    bad = diana_here(config_dir, data_dir, "serve", "token", "add", "../x")
    assert bad.returncode == 2 and "cannot name a client" in bad.stderr


# A host in a process of its own: calls the destructive tool over HTTP and waits (killed).
KILLED_HOST = """
import asyncio, sys, httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
async def main(url, token):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=600) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("append_append", {"mark": "gone"})
asyncio.run(main(*sys.argv[1:]))
"""


def test_a_host_killed_mid_wait_over_http_withdraws_its_proposal(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Over HTTP a host that vanishes (killed: no cancellation sent, its connection closed)
    takes its held call back like a stdio host that leaves: withdrawn, never run."""
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    token = new_token(config_dir, data_dir, "laptop")
    with http_gateway(config_dir, data_dir) as url:
        host = subprocess.Popen([sys.executable, "-c", KILLED_HOST, url, token])
        try:
            until(lambda: "pending" in dict(proposal_statuses(data_dir)).values(), within=60)
        finally:
            host.kill()
            host.wait()
        until(lambda: "withdrawn" in dict(proposal_statuses(data_dir)).values(), within=30)
        (taken_back,) = listed(config_dir, data_dir, "withdrawn")
        late = diana_here(config_dir, data_dir, "approve", taken_back["id"])
        assert late.returncode != 0
    assert lines(marks) == []


def listed(config_dir: Path, data_dir: Path, status: str) -> list[dict[str, object]]:
    shown = diana_here(config_dir, data_dir, "proposals", "--all", "--json")
    assert shown.returncode == 0, shown.stderr
    return [p for p in json.loads(shown.stdout) if p["status"] == status]


def test_a_session_is_its_clients_alone_another_token_on_it_is_refused(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    laptop = {"Authorization": f"Bearer {new_token(config_dir, data_dir, 'laptop')}"}
    intruder = {"Authorization": f"Bearer {new_token(config_dir, data_dir, 'intruder')}"}

    def send(method: str, headers: dict[str, str], message: dict[str, Any] | None) -> Any:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode() if message else None
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json, text/event-stream")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.headers
        except urllib.error.HTTPError as refused:
            return refused.code, refused.headers

    hello = {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "laptop", "version": "1"}}  # fmt: skip
    with http_gateway(config_dir, data_dir) as url:
        status, headers = send("POST", laptop, {"id": 1, "method": "initialize", "params": hello})
        assert status == 200
        session = {
            "Mcp-Session-Id": headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-11-25",
        }
        mine, theirs = {**laptop, **session}, {**intruder, **session}
        assert send("POST", mine, {"method": "notifications/initialized"})[0] == 202
        call = {"name": "append_append", "arguments": {"mark": "stolen"}}
        assert send("POST", theirs, {"id": 2, "method": "tools/call", "params": call})[0] == 404
        assert send("DELETE", theirs, None)[0] == 404  # nor can it end laptop's session
        assert send("POST", mine, {"id": 3, "method": "ping"})[0] == 200  # laptop's goes on
        assert send("DELETE", mine, None)[0] == 200
    assert lines(marks) == []
