"""The facts memory: what the assistant remembers, ranked by FTS5 (bm25)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import aiosqlite

from .db import Database

_WORD = re.compile(r"\w+", re.UNICODE)


class FactStore:
    """Facts the assistant remembers, ranked by FTS5 (bm25)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save(self, content: str, tags: list[str], source: str | None, at: datetime) -> int:
        async def insert(connection: aiosqlite.Connection) -> int:
            cursor = await connection.execute(
                "INSERT INTO facts (content, tags, source, created_at) VALUES (?, ?, ?, ?)",
                (content, " ".join(tags), source, at.isoformat()),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

        return await self._db.write(insert)

    async def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        words = _WORD.findall(query)
        if not words:
            return []
        # Quote every word so user text can never be read as FTS5 query syntax.
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = await self._db.read(
            "SELECT facts.id, facts.content, facts.tags, facts.source, facts.created_at, "
            "bm25(facts_fts) AS rank FROM facts_fts JOIN facts ON facts.id = facts_fts.rowid "
            "WHERE facts_fts MATCH ? ORDER BY rank LIMIT ?",
            (match, limit),
        )
        return [
            {
                "id": row["id"],
                "content": row["content"],
                "tags": row["tags"].split() if row["tags"] else [],
                "source": row["source"],
                "created_at": row["created_at"],
                "score": round(-float(row["rank"]), 4),
            }
            for row in rows
        ]
