"""The body of an HTTP answer from outside (a web page, SearXNG, the MCP Registry, Ollama's
web API), read with a cap on what it holds once decoded.

A server may compress its answer (``Content-Encoding``), even several times over (``gzip,
gzip``), whatever it was asked: a few kilobytes can decode to gigabytes. The body is read
raw and decoded here, chunk by chunk, each decoder giving at most what the cap still allows,
so what is held stays bounded by the cap whatever the server sends; reading stops at the cap.
Only the encodings asked for (``ACCEPT_ENCODING``) are decoded; any other is refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

ACCEPT_ENCODING = "gzip, deflate"  # what read_body decodes: the Accept-Encoding to send
MAX_ENCODINGS = 4  # stacked encodings past this are refused
CHUNK = 64 * 1024  # what one decoder hands the next at a time
PULL = 1024 * 1024  # what is decoded at a time into the body


class BodyTooLarge(Exception):
    """The body holds more than the cap, decoded."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {size_text(limit)}")
        self.limit = limit


class BodyUnreadable(Exception):
    """The body is in an encoding not asked for, or its compressed data is damaged."""


@dataclass(frozen=True)
class Body:
    data: bytes  # at most the cap, decoded
    cut: bool  # there was more: only the first ``limit`` bytes were read


def size_text(size: int) -> str:
    """A byte count as a person reads it: 4 MiB, 512 KiB, 100 bytes."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size} bytes"


class _Inflater:
    """One encoding's decoder, fed compressed bytes, pulled for at most n decoded ones."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_fallback = encoding == "deflate"  # "deflate" is zlib data, or raw deflate
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding != "deflate" else 15)
        self._tail = b""
        self._first = b""  # deflate: what came before the format was known

    @property
    def done(self) -> bool:
        return self._z.eof

    def feed(self, data: bytes) -> None:
        if not self._z.eof:
            self._tail += data

    def pull(self, n: int) -> bytes:
        if self._z.eof or n <= 0:  # (a max_length of 0 would mean no limit at all)
            self._tail = b""
            return b""
        data, self._tail = self._tail, b""
        try:
            out = self._z.decompress(data, n)
        except zlib.error as exc:
            if not self._raw_fallback:
                raise BodyUnreadable(f"its {self.encoding} data is damaged ({exc})") from None
            self._raw_fallback = False  # sent without the zlib header: raw deflate
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            self._tail = self._first + data
            return self.pull(n)
        if self._raw_fallback:
            self._first += data[: len(data) - len(self._z.unconsumed_tail)]
            if out or len(self._first) > 2:  # the header was read: no second guess
                self._raw_fallback, self._first = False, b""
        self._tail = self._z.unconsumed_tail
        return out


def decoders_for(headers: Any) -> list[_Inflater]:
    """The decoders of an answer's Content-Encoding, outermost first; BodyUnreadable for an
    encoding not asked for."""
    named = [
        part.strip().lower()
        for value in headers.get_list("content-encoding")
        for part in value.split(",")
    ]
    codings = [c for c in named if c and c != "identity"]
    if len(codings) > MAX_ENCODINGS:
        raise BodyUnreadable(f"it is encoded {len(codings)} times over")
    for coding in codings:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise BodyUnreadable(f"it is encoded as {coding!r}, which was not asked for")
    # Encodings are listed in the order they were applied: the last one is undone first.
    return [_Inflater("deflate" if c == "deflate" else "gzip") for c in reversed(codings)]


def _drain(stages: list[_Inflater], index: int, n: int) -> bytes:
    """At most n decoded bytes out of stage ``index``, pulling from the stages before it as
    it needs (never more than CHUNK from each at a time)."""
    stage = stages[index]
    while True:
        out = stage.pull(n)
        if out or index == 0 or stage.done:  # what follows its end is never decoded
            return out
        more = _drain(stages, index - 1, CHUNK)
        if not more:
            return b""
        stage.feed(more)


async def read_body(response: httpx.Response, limit: int, *, cut: bool = False) -> Body:
    """The decoded body of a streamed ``response``, at most ``limit`` bytes. Past the cap:
    BodyTooLarge, or with ``cut`` the first ``limit`` bytes (nothing more is read either
    way). BodyUnreadable for an encoding not asked for or damaged data."""
    stages = decoders_for(response.headers)
    body = bytearray()
    raw_read = 0
    # Compressed data never needs to be much larger than what it decodes to.
    raw_limit = limit + limit // 4 + CHUNK
    over = False
    async for chunk in response.aiter_raw():
        raw_read += len(chunk)
        if stages:
            stages[0].feed(chunk)
            while piece := _drain(stages, len(stages) - 1, min(limit + 1 - len(body), PULL)):
                body += piece
                if len(body) > limit:
                    break
        else:
            body += chunk[: limit + 1 - len(body)]
        if len(body) > limit or raw_read > raw_limit:
            over = True
            break
    if not over:
        return Body(bytes(body), False)
    if not cut:
        raise BodyTooLarge(limit)
    return Body(bytes(body[:limit]), True)


def is_event_stream(response: Any) -> bool:
    """An answer read as it comes, event by event (MCP's SSE), not as one body."""
    kind = response.headers.get("content-type", "")
    return str(kind).split(";")[0].strip().lower() == "text/event-stream"


def bounded_transport(
    inner: Any,
    limit: int,
    *,
    http: Any = None,
    streamed: Callable[[Any], bool] = lambda response: False,
) -> Any:
    """A transport whose answers are read whole, decoded, through read_body (BodyTooLarge past
    ``limit``): for a client whose own reading is not ours (the ollama package's, the MCP
    SDK's). ``http`` is the client's module (httpx, or httpx2: the same interface); an answer
    ``streamed`` says is read as it comes is passed on as it is."""
    if http is None:
        import httpx as http

    class Bounded(http.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.headers["accept-encoding"] = ACCEPT_ENCODING
            response = await inner.handle_async_request(request)
            if streamed(response):
                return response
            try:
                body = await read_body(response, limit)
            finally:
                await response.aclose()
            headers = [
                (k, v)
                for k, v in response.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
            ]
            return http.Response(
                response.status_code,
                headers=headers,
                content=body.data,
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await inner.aclose()

    return Bounded()


__all__ = [
    "ACCEPT_ENCODING",
    "Body",
    "BodyTooLarge",
    "BodyUnreadable",
    "bounded_transport",
    "is_event_stream",
    "read_body",
    "size_text",
]
