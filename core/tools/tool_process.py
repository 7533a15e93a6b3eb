"""Running a tool's code in a child process that really ends when its call does.

The child is started contained (core/system/processes.py): it dies with diana, and what it starts
stays in its tree even if it double-forks or calls setsid. When the call ends — the child
exits, the time is up, or the call is cancelled — the whole tree is frozen and killed, and the
call returns only once it is gone. Output is captured and cut to a limit, with a marker saying
how much was left out; past a bound in bytes it is read and thrown away, so a child that floods
its output costs no more memory than that bound."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..system import processes

OUTPUT_LIMIT = 20_000  # characters of stdout and of stderr kept per call
KEEP_BYTES = 1 << 20  # bytes of each stream held in memory; the rest is counted, not kept
EXIT_POLL = 0.02
# Once the child has exited, how long its output may still take to arrive: a process it left
# behind holding the pipes must not keep the call waiting.
OUTPUT_DRAIN = 0.2


@dataclass(frozen=True)
class ProcessOutcome:
    exit_code: int
    stdout: str
    stderr: str
    stdout_dropped: int = 0  # bytes of stdout past ``keep_stdout``, read and not kept


def cut(text: str, limit: int | None = OUTPUT_LIMIT, dropped: int = 0) -> str:
    """The text, or its first ``limit`` characters and a marker saying how much is missing
    (``dropped`` bytes were never kept at all)."""
    if limit is None or (len(text) <= limit and not dropped):
        return text
    missing = f"{len(text) - limit} more characters" if len(text) > limit else ""
    if dropped:
        missing += (" and " if missing else "") + f"{dropped} more bytes"
    return text[:limit] + f"… [cut: {missing}]"


async def run_process(
    argv: list[str],
    *,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    limit: int | None = OUTPUT_LIMIT,
    keep_stdout: int = KEEP_BYTES,
) -> ProcessOutcome:
    """Run to completion; then, or when the caller is cancelled (a timeout), kill whatever
    the process and its descendants left running. Each stream is cut to ``limit`` characters
    (None: not cut); at most ``keep_stdout`` bytes of stdout (KEEP_BYTES of stderr) are
    held, and how many more there were is told."""
    tree = await processes.spawn(
        argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    process = tree.process
    assert process.stdout is not None and process.stderr is not None
    reading = asyncio.gather(_read(process.stdout, keep_stdout), _read(process.stderr, KEEP_BYTES))
    feeding = asyncio.ensure_future(_feed(process, stdin))
    exited = asyncio.ensure_future(_exited(process))
    try:
        either: list[asyncio.Future[Any]] = [reading, exited]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            await process.wait()  # its output has ended: now its exit
        else:  # it exited, and something it started holds its output open
            await asyncio.wait([reading], timeout=OUTPUT_DRAIN)
        tree.kill()  # whatever it left behind; then its output ends too
        (out, out_dropped), (err, err_dropped) = await reading
    finally:
        for task in (reading, feeding, exited):
            task.cancel()
        await tree.close()
        await asyncio.gather(reading, feeding, exited, return_exceptions=True)
    return ProcessOutcome(
        process.returncode if process.returncode is not None else -1,
        cut(out.decode(errors="replace"), limit, out_dropped),
        cut(err.decode(errors="replace"), OUTPUT_LIMIT, err_dropped),
        out_dropped,
    )


async def _read(stream: asyncio.StreamReader, keep: int) -> tuple[bytes, int]:
    """The stream to its end: its first ``keep`` bytes, and how many more it held."""
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(1 << 16):
        room = max(0, keep - len(kept))
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped


async def _feed(process: asyncio.subprocess.Process, data: bytes | None) -> None:
    if process.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            process.stdin.write(data)
            await process.stdin.drain()
        process.stdin.close()
        await process.stdin.wait_closed()


async def _exited(process: asyncio.subprocess.Process) -> None:
    # Not process.wait(): that also waits until every holder of its pipes has closed them.
    while process.returncode is None:  # noqa: ASYNC110 - no event exists for "exited"
        await asyncio.sleep(EXIT_POLL)
