"""A list of proposals kept between reads: brought up to date from the rows changed since,
so listing many proposals again reads only what changed."""

from __future__ import annotations

import bisect
from typing import Any

import aiosqlite

from .proposal import Proposal, ProposalStatus, proposal_from_row


class Listing:
    """Proposals in some statuses as last read, with each one's place in the order
    (created_at, then rowid) and the revision its row had."""

    def __init__(self, clock: int) -> None:
        self.clock = clock
        self.rows: dict[str, tuple[tuple[bool, Any, int], int, Proposal]] = {}
        self._order: list[tuple[tuple[bool, Any, int], str]] = []  # oldest first
        self._waited: set[str] = set()  # those whose answer a process waits for
        self.checked_with: str | None = None  # the signing key all were last checked with

    def load(self, rows: list[aiosqlite.Row], earlier: Listing | None) -> None:
        """Every row of the list, read whole; Proposals of unchanged rows kept from
        ``earlier``."""
        known = earlier.rows if earlier is not None else {}
        for row in rows:
            entry = self._entry(row, known.get(row["id"]))
            self.rows[row["id"]] = entry
            self._order.append((entry[0], row["id"]))
            if entry[2].waiter is not None:
                self._waited.add(row["id"])
        self._order.sort()

    def put(self, row: aiosqlite.Row, statuses: tuple[ProposalStatus, ...]) -> None:
        """A row changed: in the list as it is now if its status is one of ``statuses``,
        else out of it."""
        proposal_id = row["id"]
        known = self.rows.pop(proposal_id, None)
        self._waited.discard(proposal_id)
        if known is not None:
            del self._order[bisect.bisect_left(self._order, (known[0], proposal_id))]
        if row["status"] in statuses:
            entry = self._entry(row, known)
            self.rows[proposal_id] = entry
            if entry[2].waiter is not None:
                self._waited.add(proposal_id)
            bisect.insort(self._order, (entry[0], proposal_id))

    @staticmethod
    def _entry(
        row: aiosqlite.Row, known: tuple[tuple[bool, Any, int], int, Proposal] | None
    ) -> tuple[tuple[bool, Any, int], int, Proposal]:
        """(place, revision, proposal); the known Proposal if the row's revision is its."""
        created = row["created_at"]
        # SQLite orders text before blobs: a created_at damaged into a blob sorts last.
        place = (isinstance(created, bytes), created, row["rowid"])
        revision = row["revision"]
        if known is not None and known[1] == revision:
            return place, revision, known[2]
        return place, revision, proposal_from_row(row)

    def newest_first(self) -> list[Proposal]:
        rows = self.rows
        return [rows[proposal_id][2] for _, proposal_id in reversed(self._order)]

    def waited(self) -> list[Proposal]:
        """Those whose answer a process waits for (few, of many)."""
        return [self.rows[proposal_id][2] for proposal_id in self._waited]
