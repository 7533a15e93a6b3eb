"""A host of `diana serve` as the tests play it: the config of one MCP server whose destructive
tool appends a line per call, the host's name, and a held call's progress as the host hears
it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from .commands import diana_argv, diana_aside, run_diana, start_diana
from .database import proposal_statuses

APPEND = str(Path(__file__).parent / "fixtures" / "append_server.py")
HOST = types.Implementation(name="claude-code", version="2.0.0")


def configure(config_dir: Path, marks: Path, **serve: Any) -> None:
    """One MCP server whose destructive tool appends a line per call (the count of runs)."""
    server = {"command": sys.executable, "args": [APPEND, "--file", str(marks)]}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"append": server}}))
    if serve:
        settings = json.loads((config_dir / "settings.json").read_text())
        (config_dir / "settings.json").write_text(json.dumps({**settings, "serve": serve}))


def lines(marks: Path) -> list[str]:
    return marks.read_text().splitlines() if marks.exists() else []


class Waiting:
    """A held call's progress as the host hears it: set once the first notification came."""

    def __init__(self) -> None:
        self.heard = asyncio.Event()
        self.messages: list[str] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")
        self.heard.set()

    async def proposal_id(self) -> str:
        await asyncio.wait_for(self.heard.wait(), 30)
        return self.messages[0].rsplit(" ", 1)[-1]


def text_of(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def running_with(word: str) -> list[int]:
    """The pids of running processes whose command line holds ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if status != "Z" and word in (entry / "cmdline").read_bytes().decode(
                    errors="replace"
                ):
                    found.append(int(entry.name))
    return found


def pending_proposals(config_dir: Path, data_dir: Path) -> list[dict[str, Any]]:
    listed = diana_aside(config_dir, data_dir, "proposals", "--json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))


KEEP_ALIVE = "0.2"  # seconds between progress notifications while a call waits

# Where npx keeps the packages it fetched (.ci/dev fetches the suite's before it runs).
NPX_CACHE = Path(os.environ.get("npm_config_cache") or Path.home() / ".npm") / "_npx"


def npx_command(command: str, *packages: str) -> list[str]:
    """``command`` of the npm ``packages`` (exact versions), as `npm exec` would run it: from
    npx's cache where they are there already (npm itself costs over a second of CPU each
    time it starts), else by `npm exec`, which fetches them."""
    for manifest in sorted(NPX_CACHE.glob("*/package.json")):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fetched = json.loads(manifest.read_text())["_npx"]["packages"]
            found = manifest.parent / "node_modules" / ".bin" / command
            if sorted(fetched) == sorted(packages) and os.access(found, os.X_OK):
                return [str(found)]
    return [
        "npm",
        "exec",
        "--yes",
        *(f"--package={package}" for package in packages),
        "--",
        command,
    ]


@contextlib.asynccontextmanager
async def stdio_host(config_dir: Path, data_dir: Path) -> AsyncIterator[ClientSession]:
    """A host connected to `diana serve`, started as the host's own child process (the
    official SDK client over stdio)."""
    argv = diana_argv(config_dir, data_dir, "serve", "--keep-alive", KEEP_ALIVE)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=HOST) as session,
    ):
        await session.initialize()
        yield session


@contextlib.contextmanager
def http_gateway(config_dir: Path, data_dir: Path, *extra: str) -> Iterator[str]:
    """`diana serve --http` on a free port; its MCP URL once it listens."""
    process = start_diana(
        config_dir, data_dir, "serve", "--http", "--port", "0", "--keep-alive", KEEP_ALIVE, *extra
    )
    try:
        assert process.stderr is not None
        said = ""
        while "serving MCP at " not in said:
            line = process.stderr.readline()
            assert line, f"diana serve --http did not start: {said}"
            said += line
        yield said.split("serving MCP at ", 1)[1].split()[0]
    finally:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        process.kill()
        process.wait()


def new_token(config_dir: Path, data_dir: Path, name: str) -> str:
    made = diana_aside(config_dir, data_dir, "serve", "token", "add", name)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@contextlib.asynccontextmanager
async def http_host(
    url: str, token: str, session_type: type[ClientSession] = ClientSession
) -> AsyncIterator[Any]:
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        session_type(read, write, client_info=HOST) as session,
    ):
        await session.initialize()
        yield session


# -- under load: ten hosts, fifty calls each at once (tests/test_serve_load.py, the bench) --

HOSTS = 10
CALLS = 50  # each host's, at once: one of them held for a person


def configure_two(config_dir: Path, allowed: Path, held: Path) -> None:
    """The same appending server twice: `allowed` runs whatever a host asks (policy allow),
    `held`'s destructive append waits for a person."""
    servers = {
        "allowed": {"command": sys.executable, "args": [APPEND, "--file", str(allowed)]},
        "held": {"command": sys.executable, "args": [APPEND, "--file", str(held)]},
    }
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"allowed": "allow"}}))


async def decide_every_held(
    config_dir: Path,
    data_dir: Path,
    verb: str,
    expected: int,
    together: asyncio.Barrier | None = None,
) -> dict[str, int]:
    """A `diana` process after another deciding whatever is pending with ``verb`` until
    ``expected`` held calls have been decided by anyone: the exit code of each decision.
    ``together``: wait until all ``expected`` are pending, pass the barrier with the other
    deciders, then try every one of them (approvals oldest first, rejections newest first),
    so that each is raced for by every decider whoever gets there first."""
    codes: dict[str, int] = {}
    async with asyncio.timeout(240):
        while True:
            proposals = await asyncio.to_thread(proposal_statuses, data_dir)
            pending = [proposal_id for proposal_id, status in proposals if status == "pending"]
            if len(proposals) >= expected and not pending:
                return codes
            if together is not None and len(pending) < expected:
                await asyncio.sleep(0.05)  # the hosts' held calls, arriving
                continue
            if together is not None:
                await together.wait()
                pending = pending if verb == "approve" else pending[::-1]
            for proposal_id in pending:
                if proposal_id not in codes:
                    decided = await run_diana(config_dir, data_dir, verb, proposal_id)
                    codes[proposal_id] = decided.returncode
            if together is not None:
                return codes  # it tried them all
            await asyncio.sleep(0.1)  # another process's proposals: read again


async def one_host(
    url: str, token: str, host: int, calls: int = CALLS, start: asyncio.Barrier | None = None
) -> list[tuple[str, types.CallToolResult]]:
    """Host ``host``'s ``calls``, all at once: its mark and what it got back for each.
    ``start``: connected, wait there for the other hosts, so all their calls go at once."""
    async with http_host(url, token) as session:
        if start is not None:
            await start.wait()
        marks = [f"h{host}-a{n}" for n in range(calls - 1)]
        made = [session.call_tool("allowed_append", {"mark": mark}) for mark in marks]
        held_mark = f"h{host}-held"
        made.append(session.call_tool("held_append", {"mark": held_mark}))
        results = await asyncio.gather(*made)
        return list(zip([*marks, held_mark], results, strict=True))
