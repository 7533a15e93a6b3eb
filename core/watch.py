"""Noticing that a file changed, by polling its size and modification time (portable, and
cheap at one stat a second)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

Stamp = tuple[str, float, int] | None
POLL_INTERVAL = 1.0


def file_stamp(path: Path) -> Stamp:
    """What the file looks like now; None when nothing is there. A link that leads nowhere
    (dangling, a loop) is stamped as the link itself, so a file turning into one, or one
    such link replacing another, is a change: the reload that follows reports it."""
    try:
        info = path.stat()
    except OSError:
        try:
            info = path.lstat()
        except OSError:
            return None
        return (str(path), info.st_mtime_ns / 1e9, -1)
    return (str(path), info.st_mtime_ns / 1e9, info.st_size)


async def watch_file(
    locate: Callable[[], Path],
    changed: Callable[[], Awaitable[None]],
    *,
    interval: float = POLL_INTERVAL,
) -> None:
    """Call ``changed`` whenever the file ``locate()`` names is replaced or edited; runs until
    cancelled. ``changed`` must not raise: report problems (a file that became unreadable is
    a ConfigError to show, never a reason to fall back to defaults), keep watching."""
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
