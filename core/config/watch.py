"""Noticing that a config file changed, by polling a digest of its content (portable, and
cheap for files this small: a read a second). Size and modification time are not enough: a
file copied over another with its time kept (`cp -p`, an editor's backup restored, a sync
tool) can have both the same and say something else."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from .settings import ConfigError, read_config_bytes

Stamp = tuple[str, str] | None
POLL_INTERVAL = 1.0


def file_stamp(path: Path) -> Stamp:
    """What the file holds now: its path and a digest of its content; None when nothing is
    there. A file that cannot be read as a config file (a dangling or looping link, a FIFO,
    one past the size limit) is stamped with why, so a file turning into one, or one such
    link replacing another, is a change: the reload that follows reports it."""
    try:
        content = read_config_bytes(path)
    except ConfigError as exc:
        if not path.is_symlink() and not path.exists():
            return None
        return (str(path), f"unreadable: {exc.message}")
    return (str(path), hashlib.sha256(content).hexdigest())


async def watch_file(
    locate: Callable[[], Path],
    changed: Callable[[], Awaitable[None]],
    *,
    interval: float = POLL_INTERVAL,
) -> None:
    """Call ``changed`` whenever the content of the file ``locate()`` names changes (edited,
    replaced, removed); runs until cancelled. ``changed`` must not raise: report problems (a
    file that became unreadable is a ConfigError to show, never a reason to fall back to
    defaults), keep watching."""
    seen = file_stamp(locate())
    while True:
        await asyncio.sleep(interval)
        stamp = file_stamp(locate())
        if stamp != seen:
            seen = stamp
            await changed()


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task (a watcher) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
