"""Resources a server is asked to tell of changes to: a subscriptions/listen stream from
protocol 2026-07-28 on, resources/subscribe before. Who listens to a resource is told its URI
at each change, whichever way the news came."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Callable, Iterator

from mcp import Client, MCPError
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPDeprecationWarning


@contextlib.contextmanager
def older_protocol() -> Iterator[None]:
    """Roots and logging/setLevel are deprecated from protocol 2026-07-28 on, and they are
    how servers of the handshake era are spoken to: no warning for using them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


class ResourceWatches:
    """One connection's watched resources: who is told of each one's changes
    (``listeners``), and each watch's stream, or None for a subscription of the handshake era."""

    def __init__(self) -> None:
        self.listeners: dict[str, set[Callable[[str], None]]] = {}
        self._streams: dict[str, asyncio.Task[None] | None] = {}

    async def watch(self, client: Client, uri: str, time_limit: float) -> None:
        """Ask the server to tell of changes to the resource. TimeoutError or MCPError when
        it cannot."""
        if uri in self._streams:
            return
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stream = asyncio.create_task(self._stream(client, uri, acked))
        try:
            async with asyncio.timeout(time_limit):
                await asyncio.shield(acked)
        except ListenNotSupportedError:
            async with asyncio.timeout(time_limit):
                with older_protocol():
                    await client.subscribe_resource(uri)
            self._streams[uri] = None
            return
        except BaseException:
            stream.cancel()
            raise
        self._streams[uri] = stream

    async def unwatch(self, client: Client | None, uri: str, time_limit: float) -> None:
        """Stop the server telling of changes to the resource (``client``: the live one, if
        any, to unsubscribe on)."""
        if uri not in self._streams:
            return
        stream = self._streams.pop(uri)
        if stream is not None:
            stream.cancel()
            return
        if client is not None:
            with contextlib.suppress(MCPError, TimeoutError), older_protocol():
                async with asyncio.timeout(time_limit):
                    await client.unsubscribe_resource(uri)

    def updated(self, uri: str) -> None:
        """A handshake-era subscription's news (a listen stream tells its own)."""
        if uri in self._streams and self._streams[uri] is None:
            self._tell(uri)

    def _tell(self, uri: str) -> None:
        for listener in list(self.listeners.get(uri, ())):
            listener(uri)

    async def _stream(self, client: Client, uri: str, acked: asyncio.Future[None]) -> None:
        try:
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                acked.set_result(None)
                async for _event in subscription:
                    self._tell(uri)
        except Exception as exc:
            if not acked.done():
                acked.set_exception(exc)
