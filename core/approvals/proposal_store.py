"""Proposals in SQLite: created by any process, decided exactly once by any process.

A decision is one conditional UPDATE (``... WHERE status = 'pending'``): of two processes that
approve together, exactly one changes the row, and only that one executes the call. The
executor writes its identity (pid and process start time) on the row; a later start that finds
an approved or executing proposal whose executor is gone marks it ``interrupted`` (``withdrawn``
if its call had not started) and never runs it again on its own.

An approval is bound to the call a person saw. Each proposal carries a digest of its tool,
agent and arguments, signed with a key kept beside the database (not in it), and the key's
fingerprint; approving checks the row still matches it, and the app also sends the digest of
the row it showed. A proposal signed with a key that is gone cannot be checked: it is
withdrawn, never taken for changed, and the call must be made again. Every approval adds a row
to ``proposal_runs``, which nothing removes, and a line to the run ledger beside the key
(``proposals.runs``), in the transaction that approves it and before the call runs: if the
ledger cannot be written the proposal stays pending, and one whose status was set back to
pending is refused, even with its ``proposal_runs`` row deleted or the database restored from
an older copy. Once settled, a proposal's secret-named arguments are ***.

A proposal whose answer only a waiting process can use (a server's sampling request, made by
the process whose server asked) records that process; once it is gone the proposal is
withdrawn by whichever process lists, shows or approves it, and never runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from ..calls.sampling_call import asks_sampling
from ..models import ErrorCode, ToolResult
from ..storage.call_record import RAN, CallRecord
from ..storage.db import Database, StorageError, T, Work
from ..storage.schema import connect
from ..storage.stored import scrub_rows, stored_json, stored_text
from ..system.clock import Clock, SystemClock
from ..system.os_processes import identity_alive, process_identity
from .keyfile import KEY_GONE, ProposalKey, call_digest, key_gone, key_id, unverified
from .ledger import RUNS_FILE, RunLedger
from .listing import Listing
from .proposal import (
    OPEN,
    SETTLED,
    AlreadyDecided,
    DamagedProposal,
    Proposal,
    ProposalChanged,
    ProposalStatus,
    ProposalWithdrawn,
    UnknownProposal,
    make_again,
    proposal_from_row,
    stored_units,
    waiter_gone,
)

ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: easy to read and type
ID_LENGTH = 6
RAN_BEFORE = "it was approved once already: a proposal never runs twice"
NEVER_STARTED = "the process that approved it stopped before the call started: it did not run"


def random_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


class ProposalStore:
    """The proposals table, on its own connection so a decision never waits behind a batch
    of execution-log rows. Every write is one transaction (core/storage/db.py)."""

    def __init__(
        self,
        db: Database,
        new_id: Callable[[], str] | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._db = db
        self.identity = process_identity()
        self._new_id = new_id or random_id
        self._clock = clock or SystemClock()  # when diana itself withdraws a proposal
        self._key = ProposalKey(db.path.parent)
        self._key.current()  # a key that cannot be used is said at once, not at a decision
        self._ledger = RunLedger(db.path.parent / RUNS_FILE)
        self._listings: dict[tuple[ProposalStatus, ...], Listing] = {}
        self._listing_turn = asyncio.Lock()
        # What changed_elsewhere knows of: the data version last seen, and the proposals'
        # clock (proposals_clock, bumped by every change of a row) up to which every change
        # was made here or already told of. None: not looked at yet.
        self._version: int | None = None
        self._known_tick: int | None = None

    @classmethod
    async def open(
        cls, path: Path, new_id: Callable[[], str] | None = None, *, clock: Clock | None = None
    ) -> ProposalStore:
        ProposalKey(path.parent).current()  # before the database is opened: nothing to close
        return cls(await connect(path), new_id, clock=clock)

    async def close(self) -> None:
        await self._db.close()

    async def data_version(self) -> int:
        """Changes whenever another connection commits: cheap to poll."""
        row = await self._db.read_one("PRAGMA data_version")
        return int(row[0]) if row else 0

    async def changed_elsewhere(self) -> bool:
        """Whether another connection (another process, or this one's execution log) changed
        the proposals since the last look. The data version tells cheaply that something was
        committed elsewhere; the proposals' clock tells whether it was a proposal, and is
        moved past the changes this store made itself (its callers have them already).
        The first look only takes note."""
        version = await self.data_version()
        if version == self._version:
            return False
        self._version = version
        row = await self._db.read_one("SELECT tick FROM proposals_clock")
        tick = int(row[0]) if row else 0
        first, known = self._known_tick is None, self._known_tick
        self._known_tick = tick
        return not first and tick != known

    async def _write(self, work: Work[T], *, until_landed: bool = False) -> T:
        """``work`` in one write transaction (Database.write); when nothing else changed the
        proposals since the last look, its own changes count as known."""

        async def noting(connection: aiosqlite.Connection) -> T:
            before = await _tick(connection)
            result = await work(connection)
            if before == self._known_tick:
                self._known_tick = await _tick(connection)
            return result

        return await self._db.write(noting, until_landed=until_landed)

    async def create(
        self,
        *,
        tool: str,
        agent: str | None,
        arguments: dict[str, Any],
        risk: str,
        reason: str,
        confidence: float | None,
        correlation_id: str,
        origin: str,
        at: datetime,
        server_identity: str | None = None,
    ) -> Proposal:
        """``server_identity``: the program the call's MCP server runs (its launch identity),
        signed with the call: the approval is for that program's tool."""
        # Intact, not cut to size: these arguments are what runs when it is approved.
        stored_arguments = json.dumps(arguments, ensure_ascii=False)
        digest = call_digest(self._key.current(), tool, agent, arguments, server_identity)
        # A server's sampling request is answered to the process whose server asked (this
        # one): once it is gone, the proposal has no one to answer.
        waiter = self.identity if asks_sampling(tool, arguments) is not None else None

        async def insert(connection: aiosqlite.Connection) -> aiosqlite.Row:
            estimate = await estimated_cost(connection, tool)
            for _ in range(20):
                proposal_id = self._new_id()
                cursor = await connection.execute(
                    "INSERT OR IGNORE INTO proposals (id, tool, agent, arguments, risk, reason, "
                    "confidence, correlation_id, origin, status, created_at, updated_at, digest, "
                    "waiter, estimated_cost, server_identity) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
                    (
                        proposal_id,
                        tool,
                        agent,
                        stored_arguments,
                        risk,
                        reason,
                        confidence,
                        correlation_id,
                        origin,
                        at.isoformat(),
                        at.isoformat(),
                        digest,
                        waiter,
                        estimate,
                        server_identity,
                    ),
                )
                if cursor.rowcount == 1:
                    return await _existing_row(connection, proposal_id)
            raise RuntimeError("could not find a free proposal id")

        return proposal_from_row(await self._write(insert))

    async def get(self, proposal_id: str) -> Proposal:
        """The proposal as it is now: one pending that can no longer run (its key or its
        waiter gone) is withdrawn first."""
        row = await self._db.read_one(
            "SELECT * FROM proposals WHERE id = ?", (proposal_id.strip().lower(),)
        )
        if row is None:
            raise UnknownProposal(proposal_id)
        proposal = proposal_from_row(row)
        if await self._withdraw_stale([proposal]):
            return await self.get(proposal.id)
        return proposal

    async def find(
        self,
        correlation_id: str,
        tool: str,
        *,
        proposal_id: str | None = None,
        during: tuple[str, str] | None = None,
    ) -> Proposal | None:
        """The proposal behind a logged call of ``tool``: of those with its correlation id,
        the one it names, else the one created ``during`` the call (its started and
        finished ISO times), else the newest."""
        start, end = during if during is not None else ("", "")
        row = await self._db.read_one(
            "SELECT * FROM proposals WHERE correlation_id = ? AND tool = ? "
            "ORDER BY (id = ?) DESC, (created_at BETWEEN ? AND ?) DESC, created_at DESC, "
            "rowid DESC LIMIT 1",
            (correlation_id, tool, proposal_id or "", start, end),
        )
        return None if row is None else proposal_from_row(row)

    async def select(
        self, statuses: tuple[ProposalStatus, ...] | None = OPEN, limit: int | None = None
    ) -> list[Proposal]:
        """Newest first (all of them unless ``limit``); a row that cannot be read is in the
        list, marked damaged. A whole list (no limit) is kept, and later brought up to date
        from the rows changed since, whoever changed them."""
        for _ in range(2):  # again once, after withdrawing those that can no longer run
            signer = key_id(self._key.current())
            if limit is not None or not statuses:
                listed = [proposal_from_row(row) for row in await self._read_rows(statuses, limit)]
                suspects = listed
            else:
                async with self._listing_turn:
                    listing = await self._listing(tuple(statuses))
                listed = listing.newest_first()
                # Each is checked against the key once per key: then only the waited-on
                # ones need a look (one made with another key since is withdrawn when
                # approved).
                suspects = listing.waited() if signer == listing.checked_with else listed
                listing.checked_with = signer
            if not await self._withdraw_stale(suspects):
                break
        return listed

    @staticmethod
    def _stale(proposal: Proposal, signer: str) -> str | None:
        """Why a pending proposal can never run now, or None: the key that signed it is not
        the one on disk now (whose fingerprint is ``signer``), or the process its answer
        would go to has ended."""
        if proposal.status is not ProposalStatus.PENDING or proposal.damaged:
            return None
        if key_gone(signer, proposal):
            return f"{KEY_GONE}; {make_again(proposal)}"
        if proposal.waiter is not None and not identity_alive(proposal.waiter):
            return f"{waiter_gone(proposal)}; {make_again(proposal)}"
        return None

    async def _withdraw_stale(self, proposals: list[Proposal]) -> bool:
        """Withdraw the pending proposals among these that can never run; whether any was."""
        signer = key_id(self._key.current())
        stale = [p.id for p in proposals if self._stale(p, signer) is not None]
        if not stale:
            return False
        at = self._clock.now()

        async def withdraw(connection: aiosqlite.Connection) -> None:
            for proposal_id in stale:
                row = await _row(connection, proposal_id)
                proposal = None if row is None else proposal_from_row(row)
                why = None if proposal is None else self._stale(proposal, signer)
                if proposal is not None and why is not None:  # still pending, still stale
                    await _withdraw_row(connection, proposal, at, why)

        await self._write(withdraw)
        return True

    async def _read_rows(
        self, statuses: tuple[ProposalStatus, ...] | None, limit: int | None = None
    ) -> list[aiosqlite.Row]:
        if statuses:
            marks = ", ".join("?" for _ in statuses)
            query = (
                f"SELECT rowid, * FROM proposals WHERE status IN ({marks}) "
                "ORDER BY created_at DESC, rowid DESC LIMIT ?"
            )
            params: tuple[Any, ...] = (*[s.value for s in statuses], limit or -1)
        else:
            query = "SELECT rowid, * FROM proposals ORDER BY created_at DESC, rowid DESC LIMIT ?"
            params = (limit or -1,)
        return await self._db.read(query, params)

    async def _listing(self, statuses: tuple[ProposalStatus, ...]) -> Listing:
        """The whole list of proposals in ``statuses``, up to date: the rows stamped since it
        was last read are read again; a row deleted from it, or a clock that went back (the
        file replaced), means reading it whole (keeping the proposals that did not change).
        Each read is one statement, so it sees one state of the file."""
        values = [s.value for s in statuses]
        marks = ", ".join("?" for _ in statuses)
        listing = self._listings.get(statuses)
        if listing is not None:
            # One row at least (of NULLs where no row changed): the clock, how many are in
            # the list now, and each row stamped since the list was read.
            rows = await self._db.read(
                "SELECT (SELECT tick FROM proposals_clock) AS tick, (SELECT count(*) FROM "
                f"proposals WHERE status IN ({marks})) AS listed, p.rowid AS rowid, p.* "
                "FROM (SELECT 1) LEFT JOIN proposals AS p ON p.revision > ?",
                (*values, listing.clock),
            )
            clock = rows[0]["tick"]
            if clock is not None and clock >= listing.clock:
                for row in rows:
                    if row["id"] is not None:
                        listing.put(row, statuses)
                if rows[0]["listed"] == len(listing.rows):
                    listing.clock = clock
                    return listing
        rows = await self._db.read(
            "SELECT (SELECT tick FROM proposals_clock) AS tick, rowid, * FROM proposals "
            f"WHERE status IN ({marks})",
            values,
        )
        # A clock read as lower than it is only means reading more rows again next time.
        whole = Listing(int(rows[0]["tick"] or 0) if rows else 0)
        whole.load(rows, listing)
        self._listings[statuses] = whole
        return whole

    async def approve(
        self,
        proposal_id: str,
        *,
        by: str,
        at: datetime,
        seen: str | None = None,
        moved: Callable[[Proposal], str | None] | None = None,
    ) -> Proposal:
        """pending -> approved, by exactly one caller; the others get AlreadyDecided. Only
        the call that was proposed runs, and only once: a damaged row raises DamagedProposal;
        a row whose call no longer matches its signed digest, or that was approved before,
        is rejected and raises ProposalChanged; one that can never run (its key gone, or no
        one waiting for its answer) is withdrawn and raises ProposalWithdrawn. ``seen``: the
        digest of the proposal as the person was shown it; if the row changed since, nothing
        is decided (ProposalChanged). The approval is in the run ledger before the row says
        approved: if the ledger cannot be written (StorageError), the proposal still waits.
        ``moved`` says why a proposal can no longer run where its call would go now (its MCP
        server runs another program): it is withdrawn, in the same transaction."""
        proposal_id = proposal_id.strip().lower()
        ledgered = False  # this approval's ledger line, written in a try that did not commit

        async def decide(connection: aiosqlite.Connection) -> tuple[str, aiosqlite.Row]:
            nonlocal ledgered
            if ledgered:  # an earlier try of this transaction was rolled back
                self._ledger.take_back(proposal_id)
                ledgered = False
            row = await _existing_row(connection, proposal_id)
            proposal = proposal_from_row(row)
            if proposal.damaged:
                return "damaged", row
            if proposal.status is not ProposalStatus.PENDING:
                return "decided", row
            key = self._key.current()
            stale = self._stale(proposal, key_id(key))
            if stale is None and moved is not None and unverified(key, proposal) is None:
                stale = moved(proposal)
            if stale is not None:
                await _withdraw_row(connection, proposal, at, stale)
                return "withdrawn", await _existing_row(connection, proposal_id)
            if seen is not None and seen != proposal.digest:
                return "changed since shown", row
            refusal = unverified(key, proposal)
            if refusal is None:
                cursor = await connection.execute(
                    "INSERT OR IGNORE INTO proposal_runs (proposal_id, approved_at) VALUES (?, ?)",
                    (proposal_id, at.isoformat()),
                )
                ran = cursor.rowcount != 1 or proposal_id in self._ledger.read()
                refusal = RAN_BEFORE if ran else None
            if refusal is not None:
                await _settle_row(
                    connection,
                    proposal,
                    ProposalStatus.REJECTED,
                    at,
                    by="diana",
                    reject_reason=refusal,
                )
                return refusal, await _existing_row(connection, proposal_id)
            await connection.execute(
                "UPDATE proposals SET status = 'approved', decided_at = ?, decided_by = ?, "
                "executor = ?, updated_at = ? WHERE id = ? AND status = 'pending'",
                (at.isoformat(), by, self.identity, at.isoformat(), proposal_id),
            )
            # Last, before the commit: a ledger that cannot be written rolls all of this back,
            # and the proposal still waits (it never shows as approved).
            self._ledger.add(proposal_id)
            ledgered = True
            return "approved", await _existing_row(connection, proposal_id)

        try:
            outcome, row = await self._write(decide)
        except Exception:
            # Not committed (a cancellation is left alone: its commit may have landed).
            if ledgered:
                with contextlib.suppress(StorageError):
                    self._ledger.take_back(proposal_id)
            raise
        proposal = proposal_from_row(row)
        if outcome == "approved":
            return proposal
        if outcome == "damaged":
            raise DamagedProposal(proposal)
        if outcome == "decided":
            raise AlreadyDecided(proposal)
        if outcome == "withdrawn":
            raise ProposalWithdrawn(proposal)
        if outcome == "changed since shown":
            raise ProposalChanged(
                proposal, "it changed after it was shown to you; look at it again"
            )
        raise ProposalChanged(proposal, f"{outcome}; it is now rejected")

    async def reject(
        self, proposal_id: str, *, by: str, at: datetime, reason: str | None = None
    ) -> Proposal:
        proposal_id = proposal_id.strip().lower()

        async def decide(connection: aiosqlite.Connection) -> tuple[bool, aiosqlite.Row]:
            row = await _existing_row(connection, proposal_id)
            if row["status"] != ProposalStatus.PENDING.value:
                return False, row
            await _settle_row(
                connection,
                proposal_from_row(row),
                ProposalStatus.REJECTED,
                at,
                by=by,
                reject_reason=reason,
            )
            return True, await _existing_row(connection, proposal_id)

        changed, row = await self._write(decide)
        if not changed:
            raise AlreadyDecided(proposal_from_row(row))
        return proposal_from_row(row)

    async def withdraw(self, proposal_id: str, *, at: datetime, why: str) -> Proposal:
        """Settle a pending proposal without running it (whoever waited for it stopped):
        one UPDATE of a pending row, so it is either withdrawn here or decided by a person,
        never both. AlreadyDecided if a person was first."""
        proposal_id = proposal_id.strip().lower()

        async def settle(connection: aiosqlite.Connection) -> tuple[bool, aiosqlite.Row]:
            row = await _existing_row(connection, proposal_id)
            if row["status"] != ProposalStatus.PENDING.value:
                return False, row
            await _withdraw_row(connection, proposal_from_row(row), at, why)
            return True, await _existing_row(connection, proposal_id)

        changed, row = await self._write(settle)
        if not changed:
            raise AlreadyDecided(proposal_from_row(row))
        return proposal_from_row(row)

    async def mark_executing(self, proposal_id: str, at: datetime) -> None:
        async def executing(connection: aiosqlite.Connection) -> None:
            await connection.execute(
                "UPDATE proposals SET status = 'executing', updated_at = ? "
                "WHERE id = ? AND status = 'approved'",
                (at.isoformat(), proposal_id),
            )

        await self._write(executing, until_landed=True)

    async def finish(
        self, proposal_id: str, result: ToolResult, at: datetime, ran: CallRecord | None = None
    ) -> Proposal:
        """Record how an approved call ended (``ran``: its run as the execution log keeps
        it, whose time and cost the proposal keeps too). Retried until it lands: the call
        ran, and its record must not be lost (the stored result is cut to size, never
        refused)."""
        status = ProposalStatus.SUCCEEDED if result.success else ProposalStatus.FAILED
        return await self._finish(
            proposal_id,
            status,
            at,
            result=result.data,
            error=result.error,
            error_code=result.error_code.value if result.error_code else None,
            ran=ran,
        )

    async def interrupt(self, proposal_id: str, at: datetime, error: str) -> Proposal:
        """This process is stopping while the approved call runs: whether it had its
        effect is not known, so it is interrupted (never re-run on its own). If the call
        had not started (still approved, not executing), it is withdrawn instead."""
        return await self._finish(proposal_id, ProposalStatus.INTERRUPTED, at, error=error)

    async def _finish(
        self,
        proposal_id: str,
        status: ProposalStatus,
        at: datetime,
        *,
        result: Any = None,
        error: str | None = None,
        error_code: str | None = None,
        ran: CallRecord | None = None,
    ) -> Proposal:
        async def update(connection: aiosqlite.Connection) -> aiosqlite.Row:
            row = await _existing_row(connection, proposal_id)
            started = row["status"] == ProposalStatus.EXECUTING.value
            if status is ProposalStatus.INTERRUPTED and row["status"] == "approved":
                # Its call never started: nothing is unknown about it.
                await _withdraw_row(connection, proposal_from_row(row), at, error or NEVER_STARTED)
            elif started or row["status"] == ProposalStatus.APPROVED.value:
                await _settle_row(
                    connection,
                    proposal_from_row(row),
                    status,
                    at,
                    result=result,
                    error=error,
                    error_code=error_code,
                )
                if ran is not None:
                    await connection.execute(
                        "UPDATE proposals SET ran_ms = ?, cost_units = ? WHERE id = ?",
                        (ran.latency_ms, ran.cost_units, row["id"]),
                    )
            return await _existing_row(connection, proposal_id)

        return proposal_from_row(await self._write(update, until_landed=True))

    async def mark_interrupted(self, at: datetime) -> list[str]:
        """Executing proposals whose executor is gone: interrupted, not re-run. Approved
        ones whose executor is gone never started their call: withdrawn. The ids of both."""

        async def sweep(connection: aiosqlite.Connection) -> list[str]:
            async with connection.execute(
                "SELECT * FROM proposals WHERE status IN ('approved', 'executing')"
            ) as cursor:
                rows = await cursor.fetchall()
            orphans = [row for row in rows if not identity_alive(row["executor"])]
            for row in orphans:
                if row["status"] == ProposalStatus.APPROVED.value:
                    await _withdraw_row(connection, proposal_from_row(row), at, NEVER_STARTED)
                    continue
                await _settle_row(
                    connection,
                    proposal_from_row(row),
                    ProposalStatus.INTERRUPTED,
                    at,
                    error="the process running it stopped before it finished",
                )
            return [row["id"] for row in orphans]

        return await self._write(sweep)


async def _tick(connection: aiosqlite.Connection) -> int:
    """The proposals' clock: moved by every insert, update and delete of a proposal."""
    async with connection.execute("SELECT tick FROM proposals_clock") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def _settle_row(
    connection: aiosqlite.Connection,
    proposal: Proposal,
    status: ProposalStatus,
    at: datetime,
    *,
    by: str | None = None,
    reject_reason: str | None = None,
    result: Any = None,
    error: str | None = None,
    error_code: str | None = None,
) -> None:
    """A proposal's last state. Its secret-named arguments are kept in full only while it
    may still run; settled, they are *** like everywhere else they are shown."""
    notes: list[str] = []
    at_text = at.isoformat()
    await connection.execute(
        "UPDATE proposals SET status = ?, arguments = COALESCE(?, arguments), result = ?, "
        "error = ?, "
        "error_code = ?, note = ?, reject_reason = COALESCE(?, reject_reason), "
        "decided_at = COALESCE(decided_at, ?), decided_by = COALESCE(decided_by, ?), "
        "finished_at = ?, updated_at = ? WHERE id = ?",
        (
            status.value,
            _scrubbed(proposal),
            None if result is None else stored_json(result, "result", notes),
            stored_text(error, "error", notes),
            error_code,
            "; ".join(notes) or None,
            reject_reason,
            at_text if by is not None else None,
            by,
            at_text,
            at_text,
            proposal.id,
        ),
    )


async def _withdraw_row(
    connection: aiosqlite.Connection, proposal: Proposal, at: datetime, why: str
) -> None:
    """Settled by diana without running: ``why`` says what happened and what to do."""
    await _settle_row(
        connection,
        proposal,
        ProposalStatus.WITHDRAWN,
        at,
        by="diana",
        error=why,
        error_code=ErrorCode.CANCELLED.value,
    )


async def scrub_settled(connection: aiosqlite.Connection, text: str, marker: str) -> int:
    """Replace ``text`` by ``marker`` in the arguments, result and error of every settled
    proposal (one that may still run is bound to its exact arguments), inside the caller's
    write transaction; how many changed."""
    settled = ", ".join(f"'{status.value}'" for status in SETTLED)
    columns = {"arguments": True, "result": True, "error": False}
    return await scrub_rows(
        connection, "proposals", columns, text, marker, where=f"status IN ({settled})"
    )


def _scrubbed(proposal: Proposal) -> str | None:
    """The arguments to store with secrets as ***; None (left as they are) if unreadable."""
    if proposal.damaged and "arguments" in proposal.damaged:
        return None
    return json.dumps(proposal.shown_arguments, ensure_ascii=False)


async def _row(connection: aiosqlite.Connection, proposal_id: str) -> aiosqlite.Row | None:
    async with connection.execute("SELECT * FROM proposals WHERE id = ?", (proposal_id,)) as c:
        return await c.fetchone()


async def _existing_row(connection: aiosqlite.Connection, proposal_id: str) -> aiosqlite.Row:
    row = await _row(connection, proposal_id)
    if row is None:
        raise UnknownProposal(proposal_id)
    return row


# Calls of a tool an estimate of its cost is taken from: the most recent that ran.
ESTIMATE_FROM = 100


async def estimated_cost(connection: aiosqlite.Connection, tool: str) -> float | None:
    """Units a call of ``tool`` is likely to cost: the median of its most recent calls that
    ran (of any process); None if it has never run."""
    ran = ", ".join(f"'{status}'" for status in RAN)
    async with connection.execute(
        f"SELECT cost_units FROM execution_log WHERE tool = ? AND status IN ({ran}) "
        "AND cost_units IS NOT NULL ORDER BY id DESC LIMIT ?",
        (tool, ESTIMATE_FROM),
    ) as cursor:
        costs = sorted(
            u for (value,) in await cursor.fetchall() if (u := stored_units(value)) is not None
        )
    if not costs:
        return None
    middle = len(costs) // 2
    median = costs[middle] if len(costs) % 2 else (costs[middle - 1] + costs[middle]) / 2
    return round(median, 3)
