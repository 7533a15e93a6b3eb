"""Whether a connected server still answers: a health probe (one tools/list round trip; it
answers in both protocol generations, and 2026-07-28 has no ping) that gives up only after a
stretch in which the server sent nothing at all, since its reply can queue behind a large
message still arriving."""

from __future__ import annotations

import asyncio
import math
import time

import mcp_types as types
from mcp import Client


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

    async def probe(self, client: Client, silence: float, server: str) -> None:
        """One tools/list round trip; TimeoutError once ``silence`` seconds passed in which
        the server sent nothing."""
        # Our wait below is the limit; the SDK's own one (config.timeout) must not come first.
        reply = asyncio.create_task(
            client.session.send_request(
                types.ListToolsRequest(),
                types.ListToolsResult,
                request_read_timeout_seconds=math.inf,
            ),
            name=f"mcp-probe-{server}",
        )
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
