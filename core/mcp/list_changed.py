"""tools/list_changed, throttled: however often a server announces a change, its tools are
listed again at most once per ``RELIST_INTERVAL`` seconds (the announcements meanwhile fold
into one re-list), and a flood of announcements is told in the log now and then."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable

RELIST_INTERVAL = 1.0
# Announcements between two re-lists that make a flood, and how often one is told in the log.
FLOOD_ANNOUNCEMENTS = 20
FLOOD_WARNING_INTERVAL = 60.0


class ListChangedThrottle:
    """One connection's announcements of changed tools; ``on_flood`` is told how many came
    between two re-lists when they make a flood (at most once per FLOOD_WARNING_INTERVAL)."""

    def __init__(self, on_flood: Callable[[int], None]) -> None:
        self.relist_interval = RELIST_INTERVAL
        self._on_flood = on_flood
        self._due = asyncio.Event()
        self._announcements = 0  # tools/list_changed since the last re-list
        self._flood_warned_at = -math.inf
        # Announcements ever, and how many of them a finished re-list covers: a call waits
        # until the tools it may use were listed after every change announced before it.
        self._total = 0
        self._covered = 0
        self._failed = False  # the last re-list failed
        self._progress = asyncio.Event()

    def announced(self) -> None:
        self._announcements += 1
        self._total += 1
        self._due.set()

    def is_news(self) -> bool:
        """Whether an announcement arriving now is news: not while a re-list is due."""
        if self._due.is_set():
            self._announcements += 1
            self._total += 1
            return False
        return True

    async def relists(self) -> AsyncIterator[int]:
        """Yield each time the tools are to be listed again: after an announcement, and no
        sooner than ``relist_interval`` seconds after the last re-list of this iteration.
        Each yields how many announcements the re-list covers (for ``listed``)."""
        last = -math.inf
        while True:
            await self._due.wait()
            # Announcements that arrive meanwhile fold into this one re-list.
            await asyncio.sleep(max(0.0, last + self.relist_interval - time.monotonic()))
            self._due.clear()
            last = time.monotonic()
            self._note_flood()
            yield self._total

    def listed(self, covering: int, ok: bool = True) -> None:
        """A re-list that covers ``covering`` announcements ended (``ok``: it listed them)."""
        self._covered = max(self._covered, covering)
        self._failed = not ok
        self._progress.set()
        self._progress = asyncio.Event()

    @property
    def announcements(self) -> int:
        """Announcements so far: a listing started now covers them all."""
        return self._total

    async def current(self, within: float) -> str | None:
        """Until every change announced so far is listed: None, or why the tools as last
        listed cannot be trusted (the re-list failed, or took longer than ``within``)."""
        wanted = self._total
        try:
            async with asyncio.timeout(within):
                while self._covered < wanted:
                    await self._progress.wait()
        except TimeoutError:
            return f"its tools changed and were not listed again within {within:g} s"
        return "its tools changed and could not be listed again" if self._failed else None

    def _note_flood(self) -> None:
        count, self._announcements = self._announcements, 0
        now = time.monotonic()
        if count >= FLOOD_ANNOUNCEMENTS and now - self._flood_warned_at >= FLOOD_WARNING_INTERVAL:
            self._flood_warned_at = now
            self._on_flood(count)
