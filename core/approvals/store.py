"""Proposals in SQLite: created by any process, decided exactly once by any process.

A decision is one conditional UPDATE (``... WHERE status = 'pending'``): of two processes that
approve together, exactly one changes the row, and only that one executes the call. The
executor writes its identity (pid and process start time) on the row; a later start that finds
an approved or executing proposal whose executor is gone marks it ``interrupted`` and never
runs it again on its own.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import aiosqlite

from ..models import ToolResult
from ..store import connect, to_json
from ..telemetry import redact

ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: easy to read and type
ID_LENGTH = 6


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"


OPEN = (ProposalStatus.PENDING,)
SETTLED = (
    ProposalStatus.SUCCEEDED,
    ProposalStatus.FAILED,
    ProposalStatus.REJECTED,
    ProposalStatus.INTERRUPTED,
)


class UnknownProposal(LookupError):
    """No proposal has this id."""


class AlreadyDecided(Exception):
    """The proposal was decided before this decision: says what it is now."""

    def __init__(self, proposal: Proposal) -> None:
        super().__init__(f"proposal {proposal.id} was already decided: it is {proposal.status}")
        self.proposal = proposal


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

    @property
    def shown_arguments(self) -> dict[str, Any]:
        """The arguments as a person may see them: secrets replaced by ***."""
        shown = redact(self.arguments)
        return shown if isinstance(shown, dict) else {}

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "agent": self.agent,
            "arguments": self.shown_arguments,
            "risk": self.risk,
            "reason": self.reason,
            "confidence": self.confidence,
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
        }


def random_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def process_identity(pid: int | None = None) -> str:
    """pid plus the process's start time, so a reused pid is not mistaken for us."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid)}"


def identity_alive(identity: str | None) -> bool:
    if not identity:
        return False
    pid_text, _, started = identity.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(pid) == started


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22: start time in clock ticks


class ProposalStore:
    """The proposals table, on its own connection so each decision is its own transaction."""

    def __init__(self, db: aiosqlite.Connection, new_id: Callable[[], str] | None = None) -> None:
        self._db = db
        self.identity = process_identity()
        self._new_id = new_id or random_id

    @classmethod
    async def open(cls, path: Path, new_id: Callable[[], str] | None = None) -> ProposalStore:
        return cls(await connect(path), new_id)

    async def close(self) -> None:
        await self._db.close()

    async def data_version(self) -> int:
        """Changes whenever another connection commits: cheap to poll."""
        async with self._db.execute("PRAGMA data_version") as cursor:
            row = await cursor.fetchone()
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
        for _ in range(20):
            proposal_id = self._new_id()
            cursor = await self._db.execute(
                "INSERT OR IGNORE INTO proposals (id, tool, agent, arguments, risk, reason, "
                "confidence, correlation_id, origin, status, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                (
                    proposal_id,
                    tool,
                    agent,
                    json.dumps(arguments),
                    risk,
                    reason,
                    confidence,
                    correlation_id,
                    origin,
                    at.isoformat(),
                    at.isoformat(),
                ),
            )
            await self._db.commit()
            if cursor.rowcount == 1:
                return await self.get(proposal_id)
        raise RuntimeError("could not find a free proposal id")

    async def get(self, proposal_id: str) -> Proposal:
        async with self._db.execute(
            "SELECT * FROM proposals WHERE id = ?", (proposal_id.strip().lower(),)
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            raise UnknownProposal(proposal_id)
        return _proposal(row)

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
        async with self._db.execute(
            "SELECT * FROM proposals WHERE correlation_id = ? AND tool = ? "
            "ORDER BY (id = ?) DESC, (created_at BETWEEN ? AND ?) DESC, created_at DESC, "
            "rowid DESC LIMIT 1",
            (correlation_id, tool, proposal_id or "", start, end),
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else _proposal(row)

    async def select(
        self, statuses: tuple[ProposalStatus, ...] | None = OPEN, limit: int = 1000
    ) -> list[Proposal]:
        """Newest first."""
        if statuses:
            marks = ", ".join("?" for _ in statuses)
            query = (
                f"SELECT * FROM proposals WHERE status IN ({marks}) "
                "ORDER BY created_at DESC, rowid DESC LIMIT ?"
            )
            params: tuple[Any, ...] = (*[s.value for s in statuses], limit)
        else:
            query = "SELECT * FROM proposals ORDER BY created_at DESC, rowid DESC LIMIT ?"
            params = (limit,)
        async with self._db.execute(query, params) as cursor:
            rows = await cursor.fetchall()
        return [_proposal(row) for row in rows]

    async def approve(self, proposal_id: str, *, by: str, at: datetime) -> Proposal:
        """pending -> approved, by exactly one caller; the others get AlreadyDecided."""
        return await self._decide(
            proposal_id, ProposalStatus.APPROVED, by=by, at=at, executor=self.identity
        )

    async def reject(
        self, proposal_id: str, *, by: str, at: datetime, reason: str | None = None
    ) -> Proposal:
        return await self._decide(
            proposal_id, ProposalStatus.REJECTED, by=by, at=at, reject_reason=reason
        )

    async def mark_executing(self, proposal_id: str, at: datetime) -> None:
        await self._db.execute(
            "UPDATE proposals SET status = 'executing', updated_at = ? "
            "WHERE id = ? AND status = 'approved'",
            (at.isoformat(), proposal_id),
        )
        await self._db.commit()

    async def finish(self, proposal_id: str, result: ToolResult, at: datetime) -> Proposal:
        status = ProposalStatus.SUCCEEDED if result.success else ProposalStatus.FAILED
        await self._db.execute(
            "UPDATE proposals SET status = ?, result = ?, error = ?, error_code = ?, "
            "finished_at = ?, updated_at = ? WHERE id = ? AND status IN ('approved', 'executing')",
            (
                status.value,
                None if result.data is None else to_json(result.data),
                result.error,
                result.error_code.value if result.error_code else None,
                at.isoformat(),
                at.isoformat(),
                proposal_id,
            ),
        )
        await self._db.commit()
        return await self.get(proposal_id)

    async def mark_interrupted(self, at: datetime) -> list[str]:
        """Approved or executing proposals whose executor is gone: interrupted, not re-run."""
        async with self._db.execute(
            "SELECT id, executor FROM proposals WHERE status IN ('approved', 'executing')"
        ) as cursor:
            rows = await cursor.fetchall()
        orphans = [row["id"] for row in rows if not identity_alive(row["executor"])]
        for proposal_id in orphans:
            await self._db.execute(
                "UPDATE proposals SET status = 'interrupted', updated_at = ?, error = ? "
                "WHERE id = ? AND status IN ('approved', 'executing')",
                (at.isoformat(), "the process running it stopped before it finished", proposal_id),
            )
        await self._db.commit()
        return orphans

    async def _decide(
        self,
        proposal_id: str,
        status: ProposalStatus,
        *,
        by: str,
        at: datetime,
        executor: str | None = None,
        reject_reason: str | None = None,
    ) -> Proposal:
        proposal_id = proposal_id.strip().lower()
        cursor = await self._db.execute(
            "UPDATE proposals SET status = ?, decided_at = ?, decided_by = ?, executor = ?, "
            "reject_reason = ?, updated_at = ? WHERE id = ? AND status = 'pending'",
            (
                status.value,
                at.isoformat(),
                by,
                executor,
                reject_reason,
                at.isoformat(),
                proposal_id,
            ),
        )
        await self._db.commit()
        proposal = await self.get(proposal_id)  # raises UnknownProposal
        if cursor.rowcount != 1:
            raise AlreadyDecided(proposal)
        return proposal


def _proposal(row: aiosqlite.Row) -> Proposal:
    return Proposal(
        id=row["id"],
        tool=row["tool"],
        agent=row["agent"],
        arguments=json.loads(row["arguments"]),
        risk=row["risk"],
        reason=row["reason"],
        confidence=row["confidence"],
        correlation_id=row["correlation_id"],
        origin=row["origin"],
        status=ProposalStatus(row["status"]),
        created_at=row["created_at"],
        decided_at=row["decided_at"],
        decided_by=row["decided_by"],
        reject_reason=row["reject_reason"],
        result=None if row["result"] is None else json.loads(row["result"]),
        error=row["error"],
        error_code=row["error_code"],
        finished_at=row["finished_at"],
    )
