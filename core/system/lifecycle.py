"""Releasing what a Runtime acquired: newest first, each part once, whatever fails.

Start-up acquires many things in sequence (database connections, a writer task, watchers,
server processes). If any step fails, or when the runtime closes, everything acquired so far
must be let go, or the process cannot exit (aiosqlite's thread is not a daemon; a server
process would outlive us).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .telemetry import StructuredLog

T = TypeVar("T")
# How a part is let go (core/builders.py: each builder returns a part and its closer).
Closer = Callable[[], Awaitable[None] | None]

# The last line of defence against a part that never finishes closing (seconds); every
# part bounds its own shutdown well within this.
STEP_LIMIT = 60.0


class CloseError(Exception):
    """Some parts failed to close (the message names each); the others were closed."""


class Closing:
    """The parts to release, pushed as each is acquired."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Closer]] = []
        self.log: StructuredLog | None = None  # where failures are written, once it exists

    def push(self, what: str, close: Closer) -> None:
        self._steps.append((what, close))

    def take(self, what: str, built: tuple[T, Closer | None]) -> T:
        """A part a builder made: its closer is pushed (if it has one), the part returned."""
        part, close = built
        if close is not None:
            self.push(what, close)
        return part

    async def close(self) -> None:
        """Release everything; CloseError if any part failed to close."""
        failures = await self._release()
        if failures:
            raise CloseError("; ".join(failures))

    async def close_after_failure(self) -> None:
        """Release everything after start-up failed: the start-up error is the one raised,
        so failures here are only logged."""
        await self._release()

    async def _release(self) -> list[str]:
        failures: list[str] = []
        cancelled = False
        while self._steps:
            what, close = self._steps.pop()
            try:
                async with asyncio.timeout(STEP_LIMIT):
                    pending = close()
                    if inspect.isawaitable(pending):
                        await pending
            except asyncio.CancelledError:
                cancelled = True  # finish releasing first; the cancellation is raised after
                failures.append(f"closing {what} was cancelled")
            except Exception as exc:
                reason = (
                    f"did not finish within {STEP_LIMIT:g} s"
                    if isinstance(exc, TimeoutError)
                    else f"{type(exc).__name__}: {exc}"
                )
                failures.append(f"closing {what} failed: {reason}")
                if self.log is not None and not self.log.closed:
                    self.log.emit("runtime.close_failed", "error", part=what, error=reason)
        if cancelled:
            raise asyncio.CancelledError
        return failures
