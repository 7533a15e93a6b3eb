"""`diana serve --http`: the gateway over streamable HTTP, on the loopback address only.

Before a request reaches MCP it must come from this machine's own pages, never another
site's: a ``Host`` that is not the loopback address and port diana listens on, or an
``Origin`` that is not that address, is refused (403: a page on another site that rebinds its
name to 127.0.0.1 cannot use diana). Then it must carry ``Authorization: Bearer TOKEN`` of a
named client (`diana serve token add NAME`), else 401; that name is the host's, whatever it
calls itself in clientInfo, and the session it opens is its own: another client's token
on it is refused (404). ``--no-token`` lets any local program in (for testing), and says so
at every start."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

from diana.core.api import Core, HostTokens

from .gateway import CLIENT_KEY, GONE_KEY, KEEP_ALIVE, MESSAGE_LIMIT, Gateway

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/mcp"
# Sessions open at once (the SDK refuses more with 503); the door remembers each one's client.
SESSIONS = 10_000
NO_TOKEN_CLIENT = "no-token"  # the client of every request under --no-token


def loopback(host: str) -> bool:
    """Whether ``host`` (an address or `localhost`) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in scope.get("headers") or []:
        found[key.decode("latin-1").lower()] = value.decode("latin-1")
    return found


async def _refuse(send: Send, status: int, message: str, **headers: str) -> None:
    body = json.dumps({"error": message}).encode()
    extra = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Door:
    """The checks before MCP (the module's docstring), as an ASGI app around the SDK's."""

    def __init__(self, inner: Any, port: int, tokens: HostTokens | None) -> None:
        self.inner = inner
        self.tokens = tokens
        names = ("127.0.0.1", "localhost", "[::1]")
        self.hosts = {f"{name}:{port}" for name in names}
        self.origins = {f"{scheme}://{host}" for scheme in ("http", "https") for host in self.hosts}
        # Each session's client, by session id: a session is used by the client that opened
        # it only, so no other token reads its answers, calls in it or ends it.
        self.sessions: OrderedDict[str, str] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        headers = _headers(scope)
        host, origin = headers.get("host"), headers.get("origin")
        if host not in self.hosts:
            await _refuse(send, 403, f"Host {host!r} is not diana's loopback address")
            return
        if origin is not None and origin not in self.origins:
            await _refuse(send, 403, f"Origin {origin!r} may not use diana")
            return
        if scope.get("path") != PATH:
            await _refuse(send, 404, f"diana serves MCP at {PATH}")
            return
        client = NO_TOKEN_CLIENT
        if self.tokens is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            named = self.tokens.client_of(token.strip()) if scheme.lower() == "bearer" else None
            if named is None:
                await _refuse(
                    send,
                    401,
                    "a bearer token of a client is needed (`diana serve token add NAME`)",
                    www_authenticate='Bearer realm="diana"',
                )
                return
            client = named
        session = headers.get("mcp-session-id")
        if session is not None and self.sessions.get(session) != client:
            await _refuse(send, 404, "no such session of this client: initialize a new one")
            return
        scope[CLIENT_KEY] = client
        gone = asyncio.Event()
        scope[GONE_KEY] = gone

        async def watched() -> Message:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()  # a call held for a person is taken back (gateway.py)
            return message

        async def sending(message: Message) -> None:
            if message.get("type") == "http.response.start":
                self._follow(scope, session, client, message)
            await send(message)

        await self.inner(scope, watched, sending)

    def _follow(self, scope: Scope, session: str | None, client: str, answer: Message) -> None:
        """Remember the session an answer opens, as its client's; forget one it ends."""
        if session is None:
            for key, value in answer.get("headers") or []:
                if key.lower() == b"mcp-session-id":
                    self.sessions[value.decode("latin-1")] = client
                    while len(self.sessions) > SESSIONS:  # the oldest must initialize again
                        self.sessions.popitem(last=False)
        elif scope.get("method") == "DELETE" and answer.get("status") == 200:
            self.sessions.pop(session, None)


async def serve_http(
    core: Core,
    port: int,
    *,
    bind: str = "127.0.0.1",
    tokens: bool = True,
    keep_alive: float = KEEP_ALIVE,
    only: str | None = None,
    ready: Callable[[int], None] | None = None,
) -> int:
    """Serve MCP over streamable HTTP at http://BIND:PORT/mcp until stopped (a signal).
    ``ready`` is told the port once it listens (0 asks the system for a free one)."""
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings

    gateway = Gateway(core, keep_alive=keep_alive, only=only)
    gateway.serving = asyncio.current_task()
    sock = _listening(bind, port)
    port = sock.getsockname()[1]
    door = Door(None, port, HostTokens(core.paths.data_dir) if tokens else None)
    manager = StreamableHTTPSessionManager(
        app=gateway.server,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(door.hosts),
            allowed_origins=sorted(door.origins),
        ),
        max_request_body_size=MESSAGE_LIMIT,
        max_sessions=SESSIONS,
    )
    door.inner = manager.handle_request
    config = uvicorn.Config(
        door, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=2
    )

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # diana's own handlers stop it (the command's task is cancelled)

    server = Server(config)
    core.log_event("serve.started", transport="http", port=port, only=only)
    following = asyncio.create_task(gateway.follow_changes(), name="serve-list-changes")
    try:
        async with manager.run():
            serving = asyncio.ensure_future(server.serve(sockets=[sock]))
            if ready is not None:  # it listens already: a host that connects now waits its turn
                ready(port)
            try:
                await serving
            finally:
                server.should_exit = True
                with contextlib.suppress(BaseException):
                    await asyncio.shield(serving)
    finally:
        following.cancel()
        with contextlib.suppress(BaseException):
            await following
        sock.close()
        core.log_event("serve.stopped", transport="http")
    return 0


def _listening(bind: str, port: int) -> Any:
    import socket

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock
