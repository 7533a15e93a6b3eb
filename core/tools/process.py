"""Running a tool's code in a child process that really ends when its time is up.

The child leads its own process group, so a timeout or a cancel kills it and everything it
started (SIGTERM, then SIGKILL after a short grace), and the call returns only once they are
gone. Output is captured and cut to a limit, with a marker saying how much was left out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

OUTPUT_LIMIT = 20_000  # characters of stdout and of stderr kept per call
KILL_GRACE = 0.5


@dataclass(frozen=True)
class ProcessOutcome:
    exit_code: int
    stdout: str
    stderr: str


def cut(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """The text, or its first ``limit`` characters and a marker saying how many are missing."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [cut: {len(text) - limit} more characters]"


async def run_process(
    argv: list[str],
    *,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    limit: int = OUTPUT_LIMIT,
) -> ProcessOutcome:
    """Run to completion; cancelling the caller (a timeout) kills the whole process group."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = await process.communicate(stdin)
    except BaseException:
        await _kill_group(process)
        raise
    # A child that outlived its leader (started in the background) is not left behind either.
    await _kill_group(process)
    return ProcessOutcome(
        process.returncode if process.returncode is not None else -1,
        cut(out.decode(errors="replace"), limit),
        cut(err.decode(errors="replace"), limit),
    )


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        if process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), KILL_GRACE)
        if process.returncode is not None and not _group_alive(process.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
