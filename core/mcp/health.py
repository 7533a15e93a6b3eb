"""Whether a connected server still answers: a health probe (the protocol's ping where it has
one, else one tools/list round trip, since 2026-07-28 has no ping) that gives up only after a
stretch in which the server sent nothing at all, since its reply can queue behind a large
message still arriving. A local (stdio) server is probed every few seconds; a remote one is
probed far less often while idle, and at once when a call to it fails."""

from __future__ import annotations

import asyncio
import math
import time

import mcp_types as types
from mcp import Client

# Seconds between probes of an idle remote (HTTP, SSE) server: every 3 s would be some 1,200
# requests an hour to a hosted service; a failed call probes it at once instead.
REMOTE_PROBE_INTERVAL = 60.0
# The first protocol without ping (its servers are probed with tools/list).
NO_PING_PROTOCOL = "2026-07-28"


def has_ping(protocol_version: str | None) -> bool:
    """Whether the negotiated protocol (a date) still has ping."""
    return protocol_version is not None and protocol_version < NO_PING_PROTOCOL


class SilenceWatch:
    """When the server was last heard (any bytes on its stdout) and since when a probe has
    waited for its reply."""

    def __init__(self) -> None:
        self.last_heard = -math.inf  # time.monotonic() of the last bytes on the server's stdout
        self._probe_sent: float | None = None  # time.monotonic() of the probe awaiting a reply

    def heard(self) -> None:
        self.last_heard = time.monotonic()

    def unanswered_for(self) -> float:
        """Seconds the server has left a health probe unanswered without sending anything:
        0 when no probe waits (over stdio any byte counts as an answer)."""
        sent = self._probe_sent
        if sent is None:
            return 0.0
        return max(0.0, time.monotonic() - max(sent, self.last_heard))

    async def probe(
        self, client: Client, silence: float, server: str, protocol_version: str | None = None
    ) -> None:
        """One ping (or, without ping, tools/list) round trip; TimeoutError once ``silence``
        seconds passed in which the server sent nothing."""
        # Our wait below is the limit; the SDK's own one (config.timeout) must not come first.
        request = (
            client.session.send_request(
                types.PingRequest(), types.EmptyResult, request_read_timeout_seconds=math.inf
            )
            if has_ping(protocol_version)
            else client.session.send_request(
                types.ListToolsRequest(),
                types.ListToolsResult,
                request_read_timeout_seconds=math.inf,
            )
        )
        reply = asyncio.create_task(request, name=f"mcp-probe-{server}")
        sent = self._probe_sent = time.monotonic()
        try:
            while not reply.done():
                silent_until = max(sent, self.last_heard) + silence
                if silent_until <= time.monotonic():
                    raise TimeoutError
                await asyncio.wait([reply], timeout=silent_until - time.monotonic())
            reply.result()
        finally:
            self._probe_sent = None
            reply.cancel()
