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
import bisect
import contextlib
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import aiosqlite

from ..calls import RAN, one_line
from ..clock import Clock, SystemClock
from ..db import Database, StorageError
from ..files import UnreadableFile, file_kind, read_regular
from ..models import ErrorCode, ToolResult
from ..os_processes import identity_alive, process_identity
from ..sampling import asks_sampling, sampling_summary
from ..schema import connect
from ..stored import loaded_json, stored_json, stored_text
from ..telemetry import redact

ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: easy to read and type
ID_LENGTH = 6
KEY_FILE = "proposals.key"  # beside the database; signs each proposal's call
RUNS_FILE = "proposals.runs"  # beside the key: one line per proposal ever approved
RUNS_LIMIT = 256 << 20  # 25 million approvals
KEY_BYTES = 32
KEY_ID_LENGTH = 16  # hex characters of the signing key's fingerprint, before each digest
TAMPERED = "its tool, agent or arguments were changed after it was proposed"
RAN_BEFORE = "it was approved once already: a proposal never runs twice"
UNSIGNED = "it was made by an older diana and cannot be checked: make the call again"
KEY_GONE = "the proposal key is gone; this proposal cannot be verified, so it never runs"
NEVER_STARTED = "the process that approved it stopped before the call started: it did not run"


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    # Settled without running, by diana: it cannot be checked, no one waits for its answer
    # any more, or the process that approved it stopped first. ``error`` says which.
    WITHDRAWN = "withdrawn"
    # Never stored: how a row whose status cannot be read is shown.
    DAMAGED = "damaged"


OPEN = (ProposalStatus.PENDING,)
SETTLED = (
    ProposalStatus.SUCCEEDED,
    ProposalStatus.FAILED,
    ProposalStatus.REJECTED,
    ProposalStatus.INTERRUPTED,
    ProposalStatus.WITHDRAWN,
)


class UnknownProposal(LookupError):
    """No proposal has this id."""


class DamagedProposal(Exception):
    """The proposal's row cannot be read whole, so it cannot be approved."""

    def __init__(self, proposal: Proposal) -> None:
        super().__init__(
            f"proposal {proposal.id} is damaged ({proposal.damaged}): it cannot run; "
            f"reject it to clear it"
        )
        self.proposal = proposal


class ProposalChanged(Exception):
    """The stored call is not the one proposed, or not the one the person was shown."""

    def __init__(self, proposal: Proposal, why: str) -> None:
        super().__init__(f"proposal {proposal.id} was not approved: {why}")
        self.proposal = proposal


class AlreadyDecided(Exception):
    """The proposal was decided before this decision: says what it is now."""

    def __init__(self, proposal: Proposal) -> None:
        if proposal.status is ProposalStatus.WITHDRAWN:  # why, and what to do instead
            said = f"proposal {proposal.id} was withdrawn without running: {proposal.error}"
        else:
            now = SETTLED_WORDS.get(proposal.status.value, f"it is {proposal.status.value}")
            said = f"proposal {proposal.id} was already decided: {now}"
        super().__init__(said)
        self.proposal = proposal


class ProposalWithdrawn(AlreadyDecided):
    """Found unable to run when it was to be approved (its key is gone, or no one waits for
    its answer any more): it is withdrawn now, and the message says why and what to do."""


# What became of a decided proposal, as a sentence ends.
SETTLED_WORDS = {
    "approved": "it was approved and is about to run",
    "executing": "it was approved and is running",
    "succeeded": "it was approved and ran",
    "failed": "it was approved, ran and failed",
    "rejected": "it was rejected",
    "interrupted": "it was interrupted while it ran",
    "withdrawn": "it was withdrawn without running",
}


@dataclass(frozen=True)
class Proposal:
    id: str
    tool: str
    agent: str | None
    arguments: dict[str, Any]  # intact: this is what runs when approved
    risk: str
    reason: str
    confidence: float | None
    correlation_id: str
    origin: str
    status: ProposalStatus
    created_at: str
    decided_at: str | None = None
    decided_by: str | None = None
    reject_reason: str | None = None
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    finished_at: str | None = None
    note: str | None = None  # what had to change to store the result
    damaged: str | None = None  # what in its row cannot be read
    digest: str | None = None  # the signed digest of (tool, agent, arguments) when proposed
    waiter: str | None = None  # the process its answer goes to, if only that one can use it
    # Units its call is likely to cost: the median of its tool's recent calls that ran, when
    # it was made (None: the tool had never run).
    estimated_cost: float | None = None

    @property
    def shown_arguments(self) -> dict[str, Any]:
        """The arguments as a person may see them: secrets replaced by ***."""
        shown = redact(self.arguments)
        return shown if isinstance(shown, dict) else {}

    @property
    def summary(self) -> str:
        """The arguments in one line, as a list shows them (a sampling request as what it
        asks the model)."""
        if asks_sampling(self.tool, self.arguments) is not None:
            return sampling_summary(self.shown_arguments)
        return one_line(self.shown_arguments)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "agent": self.agent,
            "arguments": self.shown_arguments,
            "risk": self.risk,
            "reason": self.reason,
            "confidence": self.confidence,
            "estimated_cost": self.estimated_cost,
            "correlation_id": self.correlation_id,
            "origin": self.origin,
            "status": self.status.value,
            "created_at": self.created_at,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
            "reject_reason": self.reject_reason,
            "result": redact(self.result),
            "error": self.error,
            "error_code": self.error_code,
            "finished_at": self.finished_at,
            "note": self.note,
            "damaged": self.damaged,
        }


class _Listing:
    """Proposals in some statuses as last read, with each one's place in the order
    (created_at, then rowid) and the revision its row had."""

    def __init__(self, clock: int) -> None:
        self.clock = clock
        self.rows: dict[str, tuple[tuple[bool, Any, int], int, Proposal]] = {}
        self._order: list[tuple[tuple[bool, Any, int], str]] = []  # oldest first
        self._waited: set[str] = set()  # those whose answer a process waits for
        self.checked_with: str | None = None  # the signing key all were last checked with

    def load(self, rows: list[aiosqlite.Row], earlier: _Listing | None) -> None:
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
        return place, revision, _proposal(row)

    def newest_first(self) -> list[Proposal]:
        rows = self.rows
        return [rows[proposal_id][2] for _, proposal_id in reversed(self._order)]

    def waited(self) -> list[Proposal]:
        """Those whose answer a process waits for (few, of many)."""
        return [self.rows[proposal_id][2] for proposal_id in self._waited]


def signing_key(directory: Path) -> bytes:
    """The key that signs proposals, made once per data dir (readable by its owner only) by
    whichever process comes first; every process then reads the same key."""
    path = directory / KEY_FILE
    if not os.path.lexists(path):
        directory.mkdir(parents=True, exist_ok=True)
        staged = directory / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(staged, path)  # atomic, and never replaces a key another process made
        except FileExistsError:
            pass
        finally:
            staged.unlink()
    try:
        key = read_regular(path, KEY_BYTES, "a proposal key")
    except UnreadableFile as exc:
        raise StorageError(
            f"the proposal key {path} {exc.reason}; move it aside (pending proposals will "
            "then have to be made again)"
        ) from None
    if len(key) != KEY_BYTES:
        raise StorageError(
            f"{path} is not a proposal key ({len(key)} bytes, not {KEY_BYTES}); move it aside "
            "(pending proposals will then have to be made again)"
        )
    return key


class ProposalKey:
    """The signing key as its file holds it now: read again when the file changes, and made
    anew when it is gone, so every process signs new proposals with the one key on disk (a
    process holding a deleted key in memory would sign what no other process can check)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: tuple[int, int, int, int] | None = None
        self._key = b""

    def current(self) -> bytes:
        seen = self._stamp()
        if seen is None or seen != self._seen:
            self._key = signing_key(self.directory)
            self._seen = self._stamp()
        return self._key

    def _stamp(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.directory / KEY_FILE)
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class RunLedger:
    """The ids of proposals ever approved, one per line, in a file beside the key: it is not
    in the database, so no edit or restore of the database makes an approved proposal run
    again. Lines are appended whole (O_APPEND), so processes never interleave within one. A
    line ``-ID`` takes back the approval before it, written only when the transaction that
    approved it did not commit. The file is only ever opened as itself (never through a
    symbolic link) and must be a regular file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: set[str] = set()
        self._read_to = 0
        self._file: tuple[int, int] | None = None  # (device, inode) of the file read

    def read(self) -> set[str]:
        """Every id in the ledger (what was read before is kept; only the rest is read)."""
        fd = self._open(os.O_RDONLY, "read")
        if fd is None:
            return self._known
        try:
            info = os.fstat(fd)
            if info.st_size > RUNS_LIMIT:
                raise StorageError(
                    f"{self.path} is larger than {RUNS_LIMIT >> 20} MiB, too large for the "
                    "list of proposals that ran; nothing was approved"
                )
            if (info.st_dev, info.st_ino) != self._file or info.st_size < self._read_to:
                # Another file, or one cut shorter: read it from the start.
                self._known, self._read_to = set(), 0
                self._file = (info.st_dev, info.st_ino)
            data = os.pread(fd, info.st_size - self._read_to, self._read_to)
        except OSError as exc:
            raise StorageError(
                f"cannot read {self.path}: {exc.strerror}; nothing was approved"
            ) from None
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode("ascii", "replace").split():
            if line.startswith("-"):
                self._known.discard(line[1:])
            else:
                self._known.add(line)
        self._read_to += end
        return self._known

    def add(self, proposal_id: str) -> None:
        self._append(f"{proposal_id}\n")
        self._known.add(proposal_id)

    def take_back(self, proposal_id: str) -> None:
        """The approval just added did not reach the database: it does not count."""
        self._append(f"-{proposal_id}\n")
        self._known.discard(proposal_id)

    def _append(self, line: str) -> None:
        fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT, "write")
        assert fd is not None
        try:
            os.write(fd, line.encode("ascii", "replace"))
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(self._refusal(f"cannot be written: {exc.strerror}")) from None
        finally:
            os.close(fd)

    def _open(self, flags: int, verb: str) -> int | None:
        """The ledger opened as itself, a regular file; None if there is none (to read).
        StorageError naming the file, what is there instead and what to do."""
        # O_NONBLOCK: a FIFO put in its place is refused, never waited on.
        flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENOENT and verb == "read":
                return None
            raise StorageError(self._refusal(self._what_is_there(exc, verb))) from None
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise StorageError(
                self._refusal(f"is {file_kind(kind)}, not a regular file", move_aside=True)
            )
        return fd

    def _what_is_there(self, exc: OSError, verb: str) -> str:
        try:
            mode = os.lstat(self.path).st_mode
        except OSError:
            return f"cannot be {'read' if verb == 'read' else 'written'}: {exc.strerror}"
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(self.path)
            except OSError:
                target = "something that cannot be read"
            return f"is a symbolic link to {target}, not a regular file"
        if not stat.S_ISREG(mode):
            return f"is {file_kind(mode)}, not a regular file"
        return f"cannot be {'read' if verb == 'read' else 'written'}: {exc.strerror}"

    def _refusal(self, what: str, *, move_aside: bool = False) -> str:
        if "symbolic link" in what:
            todo = "put the file itself there, not a link to it"
        elif move_aside or "not a regular file" in what:
            todo = "move it aside"
        else:
            todo = "make it a file you can read and write"
        return (
            f"the list of proposals that ran {self.path} {what}; {todo}. Nothing was "
            "approved: the proposal still waits"
        )


def key_id(key: bytes) -> str:
    """The fingerprint of a signing key: which key signed a proposal, without the key."""
    return hashlib.sha256(b"diana proposal key\0" + key).hexdigest()[:KEY_ID_LENGTH]


def _signature(key: bytes, tool: str, agent: str | None, arguments: Any) -> str:
    canonical = json.dumps(
        [tool, agent, arguments], sort_keys=True, ensure_ascii=True, separators=(",", ":")
    )
    return hmac.new(key, canonical.encode(), "sha256").hexdigest()


def call_digest(key: bytes, tool: str, agent: str | None, arguments: Any) -> str:
    """The signed digest of one call: what an approval is bound to, after the fingerprint of
    the key that signed it (so a key that is gone is told from a call that changed)."""
    return f"{key_id(key)}:{_signature(key, tool, agent, arguments)}"


def _unverified(key: bytes, proposal: Proposal) -> str | None:
    """Why the proposal's call cannot be trusted to be the one proposed; None if it can."""
    digest = proposal.digest
    if not isinstance(digest, str):
        return UNSIGNED if digest is None else TAMPERED
    signer, marked, _ = digest.rpartition(":")
    if marked and signer != key_id(key):
        return KEY_GONE
    expected = (
        call_digest(key, proposal.tool, proposal.agent, proposal.arguments)
        if marked
        else _signature(key, proposal.tool, proposal.agent, proposal.arguments)  # older diana
    )
    return None if hmac.compare_digest(expected.encode(), digest.encode()) else TAMPERED


def _key_gone(signer: str, proposal: Proposal) -> bool:
    """Whether the proposal was signed by another key than the one whose fingerprint is
    ``signer`` (the one on disk now)."""
    digest = proposal.digest
    if not isinstance(digest, str):
        return False
    signed_by, marked, _ = digest.rpartition(":")
    return bool(marked) and signed_by != signer


def make_again(proposal: Proposal) -> str:
    """How a person gets a withdrawn proposal's call made again."""
    server = asks_sampling(proposal.tool, proposal.arguments)
    if server is not None:
        return f"MCP server {server} must ask again"
    return (
        f"to run it, make the call again (ask again in the chat, or `diana call "
        f"{proposal.tool} --args JSON` with the arguments shown): it is proposed anew"
    )


def random_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def waiter_gone(proposal: Proposal) -> str:
    """Why a proposal whose waiting process ended is withdrawn."""
    pid = (proposal.waiter or "").partition(":")[0]
    server = asks_sampling(proposal.tool, proposal.arguments)
    who = f"MCP server {server}'s request" if server is not None else "it"
    return (
        f"the diana process that {who} came through (pid {pid}) has ended, so no one waits "
        "for the answer"
    )


class ProposalStore:
    """The proposals table, on its own connection so a decision never waits behind a batch
    of execution-log rows. Every write is one transaction (core/db.py)."""

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
        self._listings: dict[tuple[ProposalStatus, ...], _Listing] = {}
        self._listing_turn = asyncio.Lock()

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
    ) -> Proposal:
        # Intact, not cut to size: these arguments are what runs when it is approved.
        stored_arguments = json.dumps(arguments, ensure_ascii=False)
        digest = call_digest(self._key.current(), tool, agent, arguments)
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
                    "waiter, estimated_cost) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)",
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
                    ),
                )
                if cursor.rowcount == 1:
                    return await _existing_row(connection, proposal_id)
            raise RuntimeError("could not find a free proposal id")

        return _proposal(await self._db.write(insert))

    async def get(self, proposal_id: str) -> Proposal:
        """The proposal as it is now: one pending that can no longer run (its key or its
        waiter gone) is withdrawn first."""
        row = await self._db.read_one(
            "SELECT * FROM proposals WHERE id = ?", (proposal_id.strip().lower(),)
        )
        if row is None:
            raise UnknownProposal(proposal_id)
        proposal = _proposal(row)
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
        return None if row is None else _proposal(row)

    async def select(
        self, statuses: tuple[ProposalStatus, ...] | None = OPEN, limit: int | None = None
    ) -> list[Proposal]:
        """Newest first (all of them unless ``limit``); a row that cannot be read is in the
        list, marked damaged. A whole list (no limit) is kept, and later brought up to date
        from the rows changed since, whoever changed them."""
        for _ in range(2):  # again once, after withdrawing those that can no longer run
            signer = key_id(self._key.current())
            if limit is not None or not statuses:
                listed = [_proposal(row) for row in await self._read_rows(statuses, limit)]
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
        if _key_gone(signer, proposal):
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
                proposal = None if row is None else _proposal(row)
                why = None if proposal is None else self._stale(proposal, signer)
                if proposal is not None and why is not None:  # still pending, still stale
                    await _withdraw_row(connection, proposal, at, why)

        await self._db.write(withdraw)
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

    async def _listing(self, statuses: tuple[ProposalStatus, ...]) -> _Listing:
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
        whole = _Listing(int(rows[0]["tick"] or 0) if rows else 0)
        whole.load(rows, listing)
        self._listings[statuses] = whole
        return whole

    async def approve(
        self, proposal_id: str, *, by: str, at: datetime, seen: str | None = None
    ) -> Proposal:
        """pending -> approved, by exactly one caller; the others get AlreadyDecided. Only
        the call that was proposed runs, and only once: a damaged row raises DamagedProposal;
        a row whose call no longer matches its signed digest, or that was approved before,
        is rejected and raises ProposalChanged; one that can never run (its key gone, or no
        one waiting for its answer) is withdrawn and raises ProposalWithdrawn. ``seen``: the
        digest of the proposal as the person was shown it; if the row changed since, nothing
        is decided (ProposalChanged). The approval is in the run ledger before the row says
        approved: if the ledger cannot be written (StorageError), the proposal still waits."""
        proposal_id = proposal_id.strip().lower()
        ledgered = False  # this approval's ledger line, written in a try that did not commit

        async def decide(connection: aiosqlite.Connection) -> tuple[str, aiosqlite.Row]:
            nonlocal ledgered
            if ledgered:  # an earlier try of this transaction was rolled back
                self._ledger.take_back(proposal_id)
                ledgered = False
            row = await _existing_row(connection, proposal_id)
            proposal = _proposal(row)
            if proposal.damaged:
                return "damaged", row
            if proposal.status is not ProposalStatus.PENDING:
                return "decided", row
            key = self._key.current()
            stale = self._stale(proposal, key_id(key))
            if stale is not None:
                await _withdraw_row(connection, proposal, at, stale)
                return "withdrawn", await _existing_row(connection, proposal_id)
            if seen is not None and seen != proposal.digest:
                return "changed since shown", row
            refusal = _unverified(key, proposal)
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
            outcome, row = await self._db.write(decide)
        except Exception:
            # Not committed (a cancellation is left alone: its commit may have landed).
            if ledgered:
                with contextlib.suppress(StorageError):
                    self._ledger.take_back(proposal_id)
            raise
        proposal = _proposal(row)
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
                _proposal(row),
                ProposalStatus.REJECTED,
                at,
                by=by,
                reject_reason=reason,
            )
            return True, await _existing_row(connection, proposal_id)

        changed, row = await self._db.write(decide)
        if not changed:
            raise AlreadyDecided(_proposal(row))
        return _proposal(row)

    async def mark_executing(self, proposal_id: str, at: datetime) -> None:
        await self._db.execute(
            "UPDATE proposals SET status = 'executing', updated_at = ? "
            "WHERE id = ? AND status = 'approved'",
            (at.isoformat(), proposal_id),
            until_landed=True,
        )

    async def finish(self, proposal_id: str, result: ToolResult, at: datetime) -> Proposal:
        """Record how an approved call ended. Retried until it lands: the call ran, and its
        record must not be lost (the stored result is cut to size, never refused)."""
        status = ProposalStatus.SUCCEEDED if result.success else ProposalStatus.FAILED
        return await self._finish(
            proposal_id,
            status,
            at,
            result=result.data,
            error=result.error,
            error_code=result.error_code.value if result.error_code else None,
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
    ) -> Proposal:
        async def update(connection: aiosqlite.Connection) -> aiosqlite.Row:
            row = await _existing_row(connection, proposal_id)
            started = row["status"] == ProposalStatus.EXECUTING.value
            if status is ProposalStatus.INTERRUPTED and row["status"] == "approved":
                # Its call never started: nothing is unknown about it.
                await _withdraw_row(connection, _proposal(row), at, error or NEVER_STARTED)
            elif started or row["status"] == ProposalStatus.APPROVED.value:
                await _settle_row(
                    connection,
                    _proposal(row),
                    status,
                    at,
                    result=result,
                    error=error,
                    error_code=error_code,
                )
            return await _existing_row(connection, proposal_id)

        return _proposal(await self._db.write(update, until_landed=True))

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
                    await _withdraw_row(connection, _proposal(row), at, NEVER_STARTED)
                    continue
                await _settle_row(
                    connection,
                    _proposal(row),
                    ProposalStatus.INTERRUPTED,
                    at,
                    error="the process running it stopped before it finished",
                )
            return [row["id"] for row in orphans]

        return await self._db.write(sweep)


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


def _proposal(row: aiosqlite.Row) -> Proposal:
    """A row as a Proposal; what cannot be read is named in ``damaged``, never raised."""
    damage: list[str] = []
    arguments = loaded_json(row["arguments"], "arguments", damage)
    if not isinstance(arguments, dict):
        if not damage:
            damage.append("arguments are not a JSON object")
        arguments = {}
    try:
        status = ProposalStatus(row["status"])
    except ValueError:
        damage.append(f"status {row['status']!r} is not one diana knows")
        status = ProposalStatus.DAMAGED
    return Proposal(
        id=row["id"],
        tool=row["tool"],
        agent=row["agent"],
        arguments=arguments,
        risk=row["risk"],
        reason=row["reason"],
        confidence=row["confidence"],
        correlation_id=row["correlation_id"],
        origin=row["origin"],
        status=status,
        created_at=row["created_at"],
        decided_at=row["decided_at"],
        decided_by=row["decided_by"],
        reject_reason=row["reject_reason"],
        result=loaded_json(row["result"], "result", damage),
        error=row["error"],
        error_code=row["error_code"],
        finished_at=row["finished_at"],
        note=row["note"],
        damaged="; ".join(damage) or None,
        digest=row["digest"],
        waiter=row["waiter"],
        estimated_cost=_units(row["estimated_cost"]),
    )


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
            u for (value,) in await cursor.fetchall() if (u := _units(value)) is not None
        )
    if not costs:
        return None
    middle = len(costs) // 2
    median = costs[middle] if len(costs) % 2 else (costs[middle - 1] + costs[middle]) / 2
    return round(median, 3)


def _units(value: Any) -> float | None:
    """A stored number of units, or None for what is not one (a damaged row)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)
