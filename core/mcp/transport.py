"""How one connection attempt reaches its server and what it asks first: the HTTP transports
(SSE, or streamable HTTP over diana's own httpx client, with the server's headers and OAuth)
and the listing of every page of its tools. The stdio transport is core/mcp/stdio.py's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from ..config.mcp_servers import MCPServerConfig
from ..content.http_body import bounded_transport, is_event_stream
from .failures import ServerDown

MAX_TOOL_PAGES = 100
# An answer that is not an event stream (JSON: a result, OAuth metadata, a token) past this,
# decoded, ends the attempt.
MAX_BODY_BYTES = 64 << 20


def bounded_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """The HTTP client of a connection (and of its OAuth sign-in): every answer but an event
    stream read decoded up to MAX_BODY_BYTES."""
    transport = bounded_transport(
        httpx2.AsyncHTTPTransport(), MAX_BODY_BYTES, http=httpx2, streamed=is_event_stream
    )
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout or httpx2.Timeout(30.0, read=300),
        auth=auth,
        transport=transport,
    )


def http_transport(
    config: MCPServerConfig, auth: httpx2.Auth | None
) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
    """The transport of a server reached over HTTP: SSE, or streamable HTTP."""
    assert config.url is not None
    if config.transport == "sse":
        return sse_client(
            config.url,
            headers=config.headers or None,
            timeout=config.timeout,
            sse_read_timeout=300,
            httpx_client_factory=bounded_client,
            auth=auth,
        )
    return _streamable_http(config, auth)


@contextlib.asynccontextmanager
async def _streamable_http(
    config: MCPServerConfig, auth: httpx2.Auth | None
) -> AsyncIterator[TransportStreams]:
    assert config.url is not None
    timeout = httpx2.Timeout(config.timeout, read=300)
    async with bounded_client(headers=config.headers, timeout=timeout, auth=auth) as http:
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


async def list_every_tool(client: Client, time_limit: float) -> list[types.Tool]:
    """Every page of tools/list, bounded: one timeout for all pages, no cursor twice.
    ServerDown saying which bound it broke."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    try:
        async with asyncio.timeout(time_limit):
            for _page in range(MAX_TOOL_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
                if cursor in seen:
                    raise ServerDown(f"tools/list repeated the page cursor {cursor!r}")
                seen.add(cursor)
            else:
                raise ServerDown(f"tools/list did not end after {MAX_TOOL_PAGES} pages")
    except TimeoutError:
        raise ServerDown(f"listing its tools took longer than {time_limit:g} s") from None
    return tools
