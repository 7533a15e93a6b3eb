"""The gateway's MCP server: the tools diana exposes, and each host's call through the gate.

A call the gate holds for a person (a proposal) keeps the host's request open until someone
decides, in the app, with `diana approve` / `diana reject`, or in any other process on the
same data dir; meanwhile the host hears a progress notification every ``keep_alive``
seconds when it asked for progress. The host cancelling the request, or going away, takes the
proposal back (withdrawn, never run). A wait longer than settings.json ``serve.wait`` ends
the request with the proposal's id; the proposal stays for a person to decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
from typing import Any

import anyio
from diana.core.api import Core
from diana.core.api.errors import AlreadyDecided
from diana.core.api.shown import without_surrogates
from diana.core.api.types import HOST_ORIGIN
from diana.core.models import ErrorCode, ToolDefinition, ToolResult
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

# Seconds between two progress notifications while a host's call waits for a person.
KEEP_ALIVE = 5.0
# The longest client name kept in a proposal's origin (a host names itself; it is a label).
NAME_LIMIT = 64
HOST_GONE = "the host that made the call stopped waiting for it (cancelled or disconnected)"
SERVE_STOPPED = "diana serve, which the call came through, was stopped before anyone decided"


# What the HTTP front (http.py) puts in a request's scope: the client its token names, and an
# event set once the host has closed the request's connection.
CLIENT_KEY = "diana.client"
GONE_KEY = "diana.gone"


def client_of_request(request: Any) -> str | None:
    """The client a request's token named (HTTP), or None (stdio: the host names itself)."""
    scope = getattr(request, "scope", None)
    return scope.get(CLIENT_KEY) if isinstance(scope, dict) else None


def host_gone(request: Any) -> asyncio.Event | None:
    """Set once the host closed the connection of the request (HTTP); None over stdio, where
    the host leaving ends the whole session instead."""
    scope = getattr(request, "scope", None)
    gone = scope.get(GONE_KEY) if isinstance(scope, dict) else None
    return gone if isinstance(gone, asyncio.Event) else None


def host_origin(client_name: str | None) -> str:
    """The origin a host's calls carry: ``host:`` and the name it gave in clientInfo, kept to
    plain characters, so no host can pass for diana, a person or another origin."""
    name = re.sub(r"[^A-Za-z0-9._@+/-]+", "-", without_surrogates(client_name or "")).strip("-")
    return f"{HOST_ORIGIN}{name[:NAME_LIMIT] or 'unknown'}"


def exposed_tool(definition: ToolDefinition) -> types.Tool:
    """A tool as a host sees it: diana's exposed name, its schema and its hints."""
    hints = definition.annotations
    return types.Tool(
        name=definition.name,
        description=definition.description,
        input_schema=definition.parameters,
        annotations=types.ToolAnnotations(
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )


def tool_result(result: ToolResult) -> types.CallToolResult:
    """A diana result as MCP content: the data (text as it is, anything else as JSON text),
    or diana's one-line error flagged as a tool error."""
    if not result.success:
        text = result.error or (result.error_code or ErrorCode.TOOL_EXECUTION_FAILED).value
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
    data = result.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def still_waiting(tool: str, proposal_id: str, waited: float) -> types.CallToolResult:
    text = (
        f"{tool} is still waiting for a person's decision after {waited:g} s: proposal "
        f"{proposal_id} (diana-tui's Approvals pane, `diana approve {proposal_id}` or "
        f"`diana reject {proposal_id}`). Once approved it runs once, there; `diana show "
        f"{proposal_id}` gives its result. Calling again makes a new proposal."
    )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class Gateway:
    """The MCP server other hosts talk to, over an opened core (``Profile.GATEWAY``)."""

    def __init__(self, core: Core, *, keep_alive: float = KEEP_ALIVE) -> None:
        self.core = core
        self.keep_alive = keep_alive
        # The task serving the host: cancelled, it is diana serve that stops (a signal).
        self.serving: asyncio.Task[Any] | None = None
        self.server: Server[Any] = Server(
            "diana",
            version=_version(),
            instructions=(
                "diana's tools. A call that could do harm waits for a person to approve it "
                "in diana; the request stays open meanwhile, with progress."
            ),
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # Every server has had its first attempt to connect, so a host's first list is whole.
        await self.core.wait_servers_ready()
        definitions = self.core.tool_definitions()
        return types.ListToolsResult(tools=[exposed_tool(d) for d, _agent in definitions])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        named = client_of_request(ctx.request)  # over HTTP, the client its token names
        client = ctx.session.client_params
        given = client.client_info.name if client is not None else None
        origin = host_origin(named if named is not None else given)
        arguments = dict(params.arguments or {})
        result = await self.core.call_tool(params.name, arguments, origin=origin)
        if result.error_code is not ErrorCode.PENDING_APPROVAL:
            return tool_result(result)
        proposal_id = str((result.data or {}).get("proposal_id", ""))
        self.core.log_event("serve.waiting", tool=params.name, proposal=proposal_id, host=origin)
        return await self._wait(ctx, params.name, proposal_id, origin)

    async def _wait(
        self, ctx: ServerRequestContext[Any], tool: str, proposal_id: str, origin: str
    ) -> types.CallToolResult:
        """Until a person decides ``proposal_id``, ``serve.wait`` passes, or the host stops
        waiting (this task cancelled): then the proposal is withdrawn, and never runs."""
        limit = self.core.settings.serve.wait_for(origin.removeprefix(HOST_ORIGIN))
        loop = asyncio.get_running_loop()
        started = loop.time()
        decided = asyncio.ensure_future(self.core.decided(proposal_id))
        gone = host_gone(ctx.request)
        leaving = asyncio.ensure_future(gone.wait()) if gone is not None else None
        try:
            while not decided.done():
                left = limit - (loop.time() - started)
                if left <= 0:
                    break
                waits = {decided} if leaving is None else {decided, leaving}
                await asyncio.wait(waits, timeout=min(self.keep_alive, left))
                if leaving is not None and leaving.done() and not decided.done():
                    # Over HTTP the host closed its connection: nobody waits for this call.
                    await self._withdraw(proposal_id, HOST_GONE)
                    return types.CallToolResult(
                        content=[types.TextContent(type="text", text=HOST_GONE)], is_error=True
                    )
                if not decided.done():
                    waited = loop.time() - started
                    await ctx.session.report_progress(
                        waited, None, f"waiting for a person to decide proposal {proposal_id}"
                    )
        except BaseException:
            # Cancelled by the host, or the host went away: take the proposal back first.
            stopped = self.serving is not None and self.serving.cancelling() > 0
            with anyio.CancelScope(shield=True):
                await self._withdraw(proposal_id, SERVE_STOPPED if stopped else HOST_GONE)
            raise
        finally:
            if not decided.done():
                decided.cancel()
            if leaving is not None:
                leaving.cancel()
        if not decided.done() or decided.cancelled():
            self.core.log_event("serve.still_waiting", proposal=proposal_id, waited=limit)
            return still_waiting(tool, proposal_id, limit)
        return tool_result(self.core.outcome(decided.result()))

    async def _withdraw(self, proposal_id: str, why: str) -> None:
        try:
            await self.core.withdraw(proposal_id, reason=why)
        except AlreadyDecided:  # a person decided first: their decision stands
            return
        except Exception as exc:  # noted; the proposal is still for a person to decide
            self.core.log_event(
                "serve.withdraw_failed", "error", proposal=proposal_id, error=str(exc)
            )
            return
        self.core.log_event("serve.withdrawn", proposal=proposal_id)

    async def run(self, read_stream: Any, write_stream: Any) -> None:
        await self.server.run(
            AnsweringUnreadable(read_stream, write_stream),
            write_stream,
            self.server.create_initialization_options(),
        )


# The request id near the start of a line the SDK could not read (nested too deep, ...).
REQUEST_ID = re.compile(rb'^\s*\{[^{}]{0,200}?"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,200}")')


class AnsweringUnreadable:
    """The host's messages as the server reads them, but a line that cannot be read as
    JSON-RPC (the SDK hands it over as an exception, and answers nothing) is answered here
    with a parse error, carrying the request's id when it can be found, so the host is not
    left waiting for an answer that never comes."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self._inner = inner
        self._write = write_stream

    def __getattr__(self, name: str) -> Any:  # last_context, close, aclose, ...
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    def __aiter__(self) -> AnsweringUnreadable:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def _answer(self, error: Exception) -> None:
        from mcp.shared.message import SessionMessage
        from pydantic import ValidationError

        line, why = "", str(error)
        if isinstance(error, ValidationError) and error.errors():
            first = error.errors()[0]
            line, why = str(first.get("input", "")), first.get("msg", why)
        found = REQUEST_ID.match(line[:1000].encode("utf-8", "replace"))
        request_id: int | str | None = None
        if found is not None:
            request_id = json.loads(found.group(1))
        message = f"parse error: the message could not be read: {why}"[:300]
        reply = types.JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=types.ErrorData(code=types.PARSE_ERROR, message=message),
        )
        await self._write.send(SessionMessage(reply))


def _version() -> str:
    from diana.tui.cli.version import version_text

    return version_text().removeprefix("diana ")


class StdinLines:
    """The host's lines on stdin, read by a daemon thread of this gateway's own, so a
    `diana serve` told to stop (SIGTERM, Ctrl-C) is not held up by a read that waits for
    the host (the SDK's own reader cannot be cancelled). Meanwhile fd 0 points at the null
    device, so nothing diana starts reads the host's messages."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue(maxsize=16)
        self._wire = os.dup(0)
        os.set_inheritable(self._wire, False)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        threading.Thread(target=self._read, name="serve-stdin", daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the loop closed: nobody reads any more
            with os.fdopen(self._wire, "rb", closefd=False) as wire:
                for raw in wire:
                    line = raw.decode("utf-8", "replace")
                    asyncio.run_coroutine_threadsafe(self._lines.put(line), self._loop).result()
            asyncio.run_coroutine_threadsafe(self._lines.put(None), self._loop).result()

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.get()
        if line is None:
            raise StopAsyncIteration
        return line

    def restore(self) -> None:
        """fd 0 is the host's stdin again (the reading thread may still hold its copy)."""
        with contextlib.suppress(OSError):
            os.dup2(self._wire, 0)


async def serve_stdio(core: Core, *, keep_alive: float = KEEP_ALIVE) -> int:
    """Serve MCP on stdin and stdout until the host closes stdin. While it serves, whatever
    else writes to stdout lands on stderr (the SDK points fd 1 there), so only MCP JSON-RPC
    reaches the host."""
    gateway = Gateway(core, keep_alive=keep_alive)
    gateway.serving = asyncio.current_task()
    core.log_event("serve.started", transport="stdio")
    stdin = StdinLines()
    try:
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            await gateway.run(read_stream, write_stream)
    finally:
        stdin.restore()
    core.log_event("serve.stopped", transport="stdio")
    return 0
