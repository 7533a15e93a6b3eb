"""Conversations kept in SQLite, so the app reopens the last one where it was left."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import aiosqlite

from ..store import to_json

TITLE_LENGTH = 60


class Kind(StrEnum):
    CHAT = "chat"  # a message the model sees again in later requests
    GAP = "gap"  # a tool-gap report: the model sees its summary
    ERROR = "error"  # shown to the person only (Ollama down, a cancelled turn)


@dataclass(frozen=True)
class Message:
    role: str  # user, assistant or tool
    kind: Kind
    content: str = ""
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    data: Any = None  # a tool call's record or a gap report, for showing it again
    correlation_id: str | None = None
    created_at: str = ""

    def for_model(self) -> dict[str, Any] | None:
        """The message as Ollama's /api/chat takes it, or None if the model never sees it."""
        if self.kind is Kind.ERROR:
            return None
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_name:
            message["tool_name"] = self.tool_name
        return message


class ConversationStore:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def latest(self) -> str | None:
        async with self._db.execute(
            "SELECT id FROM conversations ORDER BY updated_at DESC, rowid DESC LIMIT 1"
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else str(row["id"])

    async def create(self, conversation_id: str, model: str, at: datetime) -> str:
        await self._db.execute(
            "INSERT INTO conversations (id, model, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (conversation_id, model, at.isoformat(), at.isoformat()),
        )
        await self._db.commit()
        return conversation_id

    async def append(self, conversation_id: str, message: Message, at: datetime) -> None:
        await self._db.execute(
            "INSERT INTO messages (conversation_id, role, kind, content, thinking, tool_calls, "
            "tool_name, data, correlation_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conversation_id,
                message.role,
                message.kind.value,
                message.content,
                message.thinking,
                None if message.tool_calls is None else to_json(message.tool_calls),
                message.tool_name,
                None if message.data is None else to_json(message.data),
                message.correlation_id,
                at.isoformat(),
            ),
        )
        title = message.content.strip().splitlines()[0][:TITLE_LENGTH] if message.content else ""
        await self._db.execute(
            "UPDATE conversations SET updated_at = ?, "
            "title = CASE WHEN title = '' AND ? = 'user' THEN ? ELSE title END WHERE id = ?",
            (at.isoformat(), message.role, title, conversation_id),
        )
        await self._db.commit()

    async def messages(self, conversation_id: str) -> list[Message]:
        async with self._db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        ) as cursor:
            rows = await cursor.fetchall()
        return [
            Message(
                role=row["role"],
                kind=Kind(row["kind"]),
                content=row["content"],
                thinking=row["thinking"],
                tool_calls=None if row["tool_calls"] is None else json.loads(row["tool_calls"]),
                tool_name=row["tool_name"],
                data=None if row["data"] is None else json.loads(row["data"]),
                correlation_id=row["correlation_id"],
                created_at=row["created_at"],
            )
            for row in rows
        ]
