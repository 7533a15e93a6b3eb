"""The stdio transport for local MCP servers.

The SDK's ``stdio_client`` hides the process; a person debugging a server needs its pid, its
exit code or signal, its stderr, and to see it marked down the moment it exits. This transport
speaks the same newline-delimited JSON-RPC and hands the SDK's ``ClientSession`` the same
streams, while keeping the process in view: it is started contained (core/mcp/launch.py,
perhaps early; core/system/processes.py: it dies with diana, and what it starts stays in its tree),
stderr lines go to a callback, bytes arriving on stdout are reported (a reply can queue behind
a large message, and the health check must not take the wait for silence), and an exit is
reported at once. What a server sends is bounded: a stderr line is cut at 64 KiB, and stdout
that is not JSON-RPC is reported with its first offending line. A stdout message past 64 MiB
is not kept: only its ends are looked at, to learn which request it answers, and that request
fails saying the message was larger than the limit while the connection goes on; one whose
request cannot be told, or that runs on without end, ends the connection, saying so.
Shutdown closes stdin, waits, then terminates the process group and finally freezes and kills
the whole tree; a server found hung, or stopped before its handshake finished, is killed at
once. Whatever interrupts the shutdown, the tree is killed: no server or anything it started
outlives its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import unicodedata
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from ..config.mcp_servers import MCPServerConfig
from ..system import processes
from . import launch

STDIN_CLOSE_GRACE = 2.0
TERMINATE_GRACE = 2.0
EXIT_POLL_INTERVAL = 0.02
STDOUT_DRAIN = 0.2
# How long an exit's report waits for the stderr the process wrote before it exited (its last
# line names the cause): long enough for a loaded machine, short enough that a child still
# holding the pipe open does not hold the report up.
STDERR_DRAIN = 1.0
# The most of one stderr line kept; a server may write megabytes without a newline.
STDERR_LINE_LIMIT = 64 * 1024
# The longest message taken from a server's stdout (one JSON-RPC message is one line): past
# it the connection ends, rather than memory growing for a line that may never end.
STDOUT_MESSAGE_LIMIT = 64 * 1024 * 1024
# An over-long message is read past (to go on with the next) for up to this many times the
# limit in all; longer, the connection ends rather than reading for ever.
SKIP_FACTOR = 16
ENDS_KEPT = 4096  # bytes of each end of an over-long message kept, to tell what it answers
READ_CHUNK = 64 * 1024
LIST_CHANGED = "notifications/tools/list_changed"
SHOWN_LINE = 200  # characters of an offending stdout line shown in an error
_ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")


@dataclass
class ProcessExit:
    code: int | None
    signal: int | None

    def describe(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        return f"exited with code {self.code}"


@dataclass
class ProcessWatch:
    """What the transport tells its owner about the process."""

    on_start: Callable[[int], None]
    on_stderr: Callable[[str], None]
    # Bytes arrived on stdout: the server is alive, even if the reply awaited is behind them.
    on_stdout_bytes: Callable[[], None]
    # (how it ended, whether it ended on its own rather than because we stopped it)
    on_exit: Callable[[ProcessExit, bool], None]
    # A line on stdout that is not a JSON-RPC message (as it came, uncut).
    on_bad_stdout: Callable[[str], None] = lambda _line: None
    # What the server did that ended the connection (a message past STDOUT_MESSAGE_LIMIT).
    on_protocol_error: Callable[[str], None] = lambda _reason: None
    # A message past STDOUT_MESSAGE_LIMIT was dropped and the connection goes on; what it was.
    on_dropped: Callable[[str], None] = lambda _what: None
    # A tools/list_changed announcement arrived. False: it adds nothing (a re-list is due
    # already), so it is dropped here rather than handed to the SDK (a flood costs less).
    on_list_changed: Callable[[], bool] = lambda: True
    # Whether a stop may first ask politely (close stdin, SIGTERM): not for a hung server.
    graceful: Callable[[], bool] = lambda: True


class LineSplitter:
    """Bytes in, complete lines out, in time linear in their length: only new bytes are
    searched for a newline, and a line is decoded once, when it is complete. With ``limit``,
    at most that many bytes of a line are kept; the rest are only counted, and the line says
    how many were cut."""

    def __init__(self, limit: int | None = None) -> None:
        self._held = bytearray()  # the start of a line whose newline has not come yet
        self._limit = limit
        self._cut = 0
        self.lines_cut = 0  # lines returned so far that were longer than the limit

    @property
    def overflowing(self) -> bool:
        """Whether the line not finished yet is already longer than the limit."""
        return self._cut > 0

    def feed(self, chunk: bytes) -> list[str]:
        held = self._held
        searched = len(held)  # what is held has no newline
        held += chunk
        lines = []
        start = 0
        while (end := held.find(b"\n", searched)) != -1:
            lines.append(self._line(held, start, end))
            start = searched = end + 1
        del held[:start]
        if self._limit is not None and len(held) > self._limit:
            self._cut += len(held) - self._limit
            del held[self._limit :]
        return lines

    def rest(self) -> str | None:
        """The unfinished last line, at the end of the stream."""
        if not self._held and not self._cut:
            return None
        line = self._line(self._held, 0, len(self._held))
        self._held.clear()
        return line

    def _line(self, held: bytearray, start: int, end: int) -> str:
        cut = self._cut
        if self._limit is not None and end - start > self._limit:
            cut += end - start - self._limit
            end = start + self._limit
        self._cut = 0
        if cut:
            self.lines_cut += 1
        with memoryview(held) as view:  # decoded straight from the buffer, not from a copy
            text = str(view[start:end], "utf-8", "replace")
        return f"{text} [{cut:,} more bytes of this line not kept]" if cut else text


@dataclass(frozen=True)
class Oversized:
    """A stdout message longer than the limit: its size and its two ends, nothing else."""

    size: int
    head: bytes
    tail: bytes


class MessageSplitter:
    """A server's stdout in, its messages (lines) out. A line longer than ``limit`` is not
    kept: from the moment it passes the limit only its first and last ENDS_KEPT bytes are,
    and it comes out as an Oversized when its newline comes."""

    def __init__(self, limit: int) -> None:
        self._held = bytearray()
        self._limit = limit
        self.skipping: int | None = None  # bytes so far of the over-long line being skipped
        self.head = b""  # its first bytes
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> list[str | Oversized]:
        out: list[str | Oversized] = []
        if self.skipping is not None:
            end = chunk.find(b"\n")
            self._skip(chunk if end == -1 else chunk[:end])
            if end == -1:
                return out
            out.append(Oversized(self.skipping, self.head, bytes(self._tail)))
            self.skipping, self.head, self._tail = None, b"", bytearray()
            chunk = chunk[end + 1 :]
        held = self._held
        searched = len(held)  # what is held has no newline
        held += chunk
        start = 0
        while (end := held.find(b"\n", searched)) != -1:
            if end - start > self._limit:
                head = bytes(held[start : start + ENDS_KEPT])
                out.append(Oversized(end - start, head, bytes(held[end - ENDS_KEPT : end])))
            else:
                with memoryview(held) as view:  # decoded straight from the buffer
                    out.append(str(view[start:end], "utf-8", "replace"))
            start = searched = end + 1
        del held[:start]
        if len(held) > self._limit:  # from here on, only its ends are kept
            self.skipping, self.head = 0, bytes(held[:ENDS_KEPT])
            self._skip(held)
            held.clear()
        return out

    def rest(self) -> str | Oversized | None:
        """What came after the last newline, once the stream has ended (None: nothing)."""
        if self.skipping is not None:
            skipped = Oversized(self.skipping, self.head, bytes(self._tail))
            self.skipping, self.head, self._tail = None, b"", bytearray()
            return skipped
        if not self._held:
            return None
        line = self._held.decode("utf-8", "replace")
        self._held.clear()
        return line

    def _skip(self, part: bytes | bytearray) -> None:
        assert self.skipping is not None
        self.skipping += len(part)
        self._tail += part[-ENDS_KEPT:]
        del self._tail[:-ENDS_KEPT]


def exit_of(returncode: int) -> ProcessExit:
    if returncode < 0:
        return ProcessExit(code=None, signal=-returncode)
    return ProcessExit(code=returncode, signal=None)


@contextlib.asynccontextmanager
async def stdio_transport(
    config: MCPServerConfig, watch: ProcessWatch
) -> AsyncIterator[TransportStreams]:
    # The process a command started early for this entry, or one started now.
    tree = launch.take_early(config) or await launch.start(config)
    process = tree.process
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    watch.on_start(process.pid)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    stdout_done = anyio.Event()
    stderr_done = anyio.Event()
    reported = False
    stopping = False
    ended_first = False  # it had exited before diana began to stop it

    def report_exit(spontaneous: bool) -> None:
        nonlocal reported
        if not reported and process.returncode is not None:
            reported = True
            watch.on_exit(exit_of(process.returncode), spontaneous or ended_first)

    async def read_stdout() -> None:
        limit = STDOUT_MESSAGE_LIMIT
        messages = MessageSplitter(limit)
        told = False  # the over-long message being skipped was answered for already
        async with read_send:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                while chunk := await stdout.read(READ_CHUNK):
                    watch.on_stdout_bytes()
                    ended = None
                    for item in messages.feed(chunk):
                        if isinstance(item, Oversized):
                            if not told:
                                ended = await drop(item.head, item.tail, item.size, limit)
                            told = False
                            if ended is not None:
                                break
                            continue
                        if _is_list_changed(item) and not watch.on_list_changed():
                            continue
                        if item.strip():
                            message = _parse(item)
                            if isinstance(message, Exception):
                                watch.on_bad_stdout(item)
                            else:
                                await read_send.send(message)
                    skipped = messages.skipping
                    if ended is None and skipped is not None:
                        if skipped > limit * SKIP_FACTOR:
                            ended = (
                                f"sent a message longer than {_size(limit * SKIP_FACTOR)} on "
                                f"stdout (the limit is {_size(limit)}) that did not end: the "
                                "connection was closed"
                            )
                        elif not told and _answered(messages.head, b"") is not None:
                            # Its request is known from its start: it fails now, not at its end.
                            ended = await drop(messages.head, b"", skipped, limit)
                            told = True
                    if ended is not None:
                        # Reported before the stream ends, so it is the reason given.
                        watch.on_protocol_error(ended)
                        break
        stdout_done.set()

    async def drop(head: bytes, tail: bytes, size: int, limit: int) -> str | None:
        """A message past the limit, not kept: the request it answers fails saying so, and
        the connection goes on. Why the connection must end instead, if it must."""
        answered = _answered(head, tail)
        # Its size when it ended; one answered for from its start is known to be past the limit.
        what = _size(size) if tail else f"more than {_size(limit)}"
        if answered is not None:
            error = {
                "code": types.INTERNAL_ERROR,
                "message": (
                    f"the answer is larger than the {_size(limit)} limit on one message from "
                    f"a server (it sent {what}); it was not kept, and the server is still "
                    "connected"
                ),
                "data": {"tooLarge": {"limit": limit, "size": size if tail else None}},
            }
            reply = {"jsonrpc": "2.0", "id": answered, "error": error}
            await read_send.send(
                SessionMessage(types.jsonrpc_message_adapter.validate_python(reply))
            )
            watch.on_dropped(f"an answer of {what} (the limit is {_size(limit)})")
            return None
        if "method" in _members(head, tail)[0]:  # a request or notification of its own
            watch.on_dropped(f"a message of {what} (the limit is {_size(limit)})")
            return None
        return (
            f"sent a message larger than the {_size(limit)} limit on stdout ({what}) that "
            "answers no request diana can tell: the connection was closed"
        )

    async def write_stdin() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with write_recv:
                async for message in write_recv:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write((text + "\n").encode())
                    await stdin.drain()

    async def read_stderr() -> None:
        lines = LineSplitter(limit=STDERR_LINE_LIMIT)
        with contextlib.suppress(OSError):
            while chunk := await stderr.read(READ_CHUNK):
                for line in lines.feed(chunk):
                    watch.on_stderr(line)
        if (last := lines.rest()) is not None:
            watch.on_stderr(last)
        stderr_done.set()

    async def watch_exit() -> None:
        # Poll rather than wait(): wait() also waits for pipe EOF, which a child of the
        # server holding the pipe open would delay.
        while process.returncode is None:  # noqa: ASYNC110 - no event exists for "exited"
            await anyio.sleep(EXIT_POLL_INTERVAL)
        spontaneous = not stopping  # as it was when the exit was seen
        # The reason given for the exit names its last stderr line: let what it wrote before
        # it exited be read first (a child still holding stderr cannot hold this up for long).
        with anyio.move_on_after(STDERR_DRAIN):
            await stderr_done.wait()
        report_exit(spontaneous)
        # Let the last lines it wrote arrive; a child still holding stdout must not keep
        # the session waiting, so then close the stream ourselves.
        with anyio.move_on_after(STDOUT_DRAIN):
            await stdout_done.wait()
        read_send.close()

    async with anyio.create_task_group() as group:
        group.start_soon(read_stdout)
        group.start_soon(write_stdin)
        group.start_soon(read_stderr)
        group.start_soon(watch_exit)
        try:
            yield read_recv, write_send
        finally:
            with anyio.CancelScope(shield=True):
                ended_on_its_own = False
                try:
                    if stdout_done.is_set():
                        # Its stdout closed first: it is ending on its own; let it be reaped
                        # (a loaded machine can take a while), so the exit is told as its own.
                        await _exited_within(process, STDIN_CLOSE_GRACE)
                    ended_on_its_own = ended_first = process.returncode is not None
                    stopping = True
                    await stop_process(tree, graceful=watch.graceful())
                finally:
                    # Even when this cleanup is cut short (a second cancellation): nothing
                    # of the server is left running.
                    stopping = True
                    tree.kill()
                    try:
                        with anyio.move_on_after(STDOUT_DRAIN):  # the last lines it wrote
                            await stdout_done.wait()
                            await stderr_done.wait()
                    finally:  # reaped and released even if that wait is cancelled
                        await tree.close()
                        report_exit(spontaneous=ended_on_its_own)
                        write_send.close()
                        read_recv.close()
            group.cancel_scope.cancel()


async def stop_process(tree: processes.ProcessTree, *, graceful: bool = True) -> None:
    """Politely, if ``graceful``: close stdin, wait; terminate the process group, wait. Then
    freeze and kill whatever is left of the tree."""
    process = tree.process
    if graceful and process.returncode is None:
        tree.remember()  # what it started, found again once it has gone
        if process.stdin is not None:
            process.stdin.close()
            with contextlib.suppress(OSError):
                await process.stdin.wait_closed()
        if not await _exited_within(process, STDIN_CLOSE_GRACE):
            tree.signal_group(signal.SIGTERM)
            await _exited_within(process, TERMINATE_GRACE)
    tree.kill()


async def _exited_within(process: asyncio.subprocess.Process, seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 - see watch_exit
            await anyio.sleep(EXIT_POLL_INTERVAL)
    return process.returncode is not None


def _size(count: int) -> str:
    return f"{count / 2**20:.4g} MiB" if count >= 2**20 else f"{count / 2**10:.4g} KiB"


def shown_line(line: str, limit: int = SHOWN_LINE) -> str:
    """A line a server wrote, fit to show a person: terminal escape sequences and control
    characters removed (a tab becomes a space), cut to ``limit`` characters."""
    text = _ESCAPE_SEQUENCE.sub("", line).replace("\t", " ")
    text = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf")).strip()
    return text if len(text) <= limit else text[:limit] + "…"


_KEY = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:\s*')
_SCALAR = r'(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)'
_LAST_MEMBER = re.compile(rf'[,{{]\s*("(?:[^"\\]|\\.)*")\s*:\s*({_SCALAR})\s*$')


def _members(head: bytes, tail: bytes) -> tuple[dict[str, Any], str | None]:
    """The top-level members of a JSON object that can be read from its first and last
    bytes alone (the plain values before its first large one, and after its last), and the
    name of that first large member."""
    found: dict[str, Any] = {}
    large: str | None = None
    text = head.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    position = text.find("{") + 1
    if position and not text[: position - 1].strip():
        while (key := _KEY.match(text, position)) is not None:
            name = json.loads(key.group(1))
            try:
                value, position = decoder.raw_decode(text, key.end())
            except ValueError:
                value = None  # a large value, cut short here
            if value is None or isinstance(value, dict | list):
                large = name
                break
            found[name] = value
            separator = re.compile(r"\s*,").match(text, position)
            if separator is None:
                break
            position = separator.end()
    end = tail.decode("utf-8", "replace").rstrip()
    if end.endswith("}"):
        end = end[:-1]
        for _ in range(8):
            member = _LAST_MEMBER.search(end)
            if member is None:
                break
            with contextlib.suppress(ValueError):
                found.setdefault(json.loads(member.group(1)), json.loads(member.group(2)))
            if member.group(0).startswith("{"):
                break  # that was the first member
            end = end[: member.start()].rstrip()
    return found, large


def _answered(head: bytes, tail: bytes) -> int | str | None:
    """The id of the request an over-long message answers, if it can be told: one whose
    large member is its result (or error), with an id of its own and no method."""
    members, large = _members(head, tail)
    answered = members.get("id")
    if "method" in members or large not in ("result", "error", None):
        return None
    if large is None and not tail:
        return None  # its start alone does not say what it is
    return answered if isinstance(answered, int | str) and not isinstance(answered, bool) else None


def _is_list_changed(line: str) -> bool:
    """Whether the line is a tools/list_changed notification (tested cheaply: the test runs
    on every line)."""
    if len(line) > 256 or LIST_CHANGED not in line:
        return False
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(message, dict)
        and message.get("method") == LIST_CHANGED
        and ("id" not in message)
    )


def _parse(line: str) -> SessionMessage | Exception:
    # json.loads, then validation: on a 50 MB result validate_json took 1.8 times as long and
    # needed 3.5 times the message's size on top of it, this about once; small ones are even.
    try:
        return SessionMessage(
            types.jsonrpc_message_adapter.validate_python(json.loads(line), by_name=False)
        )
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting json.loads refuses
        return exc
