"""Conversations kept in SQLite, so the app reopens the last one where it was left."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import aiosqlite

from ..storage.db import Database
from ..storage.stored import loaded_json, stored_json, stored_text
from .images import image_payloads

TITLE_LENGTH = 60
# Which front end began a conversation: each reopens only its own.
APP = "app"  # the workbench
CLI = "cli"  # `diana ask`


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
    # A tool call's record or a gap report, for showing it again; a question's images.
    data: Any = None
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
        if self.role == "user" and (images := image_payloads(self.data)):
            message["images"] = images
        return message


KINDS = {kind.value for kind in Kind}


class ConversationStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.db = db

    async def latest(self, origin: str) -> str | None:
        """The conversation ``origin`` (APP or CLI) had last: the one it last wrote to."""
        row = await self._db.read_one(
            "SELECT id FROM conversations WHERE origin = ? "
            "ORDER BY updated_at DESC, rowid DESC LIMIT 1",
            (origin,),
        )
        return None if row is None else str(row["id"])

    async def create(
        self,
        conversation_id: str,
        model: str,
        at: datetime,
        origin: str,
        *,
        system: str = "",
        options: dict[str, Any] | None = None,
    ) -> str:
        """A new conversation, with its own system prompt and Ollama options (chat/chats.py)."""
        notes: list[str] = []
        await self._db.execute(
            "INSERT INTO conversations (id, model, created_at, updated_at, origin, system, "
            "options) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                conversation_id,
                model,
                at.isoformat(),
                at.isoformat(),
                origin,
                stored_text(system, "system prompt", notes) or "",
                stored_json(options or {}, "options", notes),
            ),
        )
        return conversation_id

    async def append(
        self, conversation_id: str, message: Message, at: datetime, model: str | None = None
    ) -> None:
        """Add a message; ``model``: the one the conversation now uses (kept with it)."""
        notes: list[str] = []  # what had to change so SQLite can store it (not kept)
        content = stored_text(message.content, "content", notes) or ""
        row = (
            conversation_id,
            message.role,
            message.kind.value,
            content,
            stored_text(message.thinking, "thinking", notes),
            None
            if message.tool_calls is None
            else stored_json(message.tool_calls, "tool calls", notes),
            stored_text(message.tool_name, "tool name", notes),
            None if message.data is None else stored_json(message.data, "data", notes),
            stored_text(message.correlation_id, "correlation id", notes),
            at.isoformat(),
        )
        title = content.strip().splitlines()[0][:TITLE_LENGTH] if content.strip() else ""

        async def insert(connection: aiosqlite.Connection) -> None:
            await connection.execute(
                "INSERT INTO messages (conversation_id, role, kind, content, thinking, "
                "tool_calls, tool_name, data, correlation_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            await connection.execute(
                "UPDATE conversations SET updated_at = ?, model = coalesce(?, model), "
                "title = CASE WHEN title = '' AND ? = 'user' THEN ? ELSE title END WHERE id = ?",
                (at.isoformat(), model, message.role, title, conversation_id),
            )

        await self._db.write(insert)

    async def messages(self, conversation_id: str) -> list[Message]:
        # Text read as bytes: a row another program wrote that is not UTF-8 reads with U+FFFD
        # for its bad bytes, and the conversation still opens.
        columns = ", ".join(f"CAST({c} AS BLOB) AS {c}" for c in TEXT_COLUMNS)
        rows = await self._db.read(
            f"SELECT {columns} FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        messages = []
        for read in rows:
            row = {c: None if read[c] is None else decoded(read[c]) for c in TEXT_COLUMNS}
            damage: list[str] = []
            tool_calls = loaded_json(row["tool_calls"], "tool calls", damage)
            messages.append(
                Message(
                    role=row["role"] or "",
                    kind=Kind(row["kind"]) if row["kind"] in KINDS else Kind.ERROR,
                    content=row["content"] or "",
                    thinking=row["thinking"],
                    tool_calls=tool_calls if isinstance(tool_calls, list) else None,
                    tool_name=row["tool_name"],
                    data=loaded_json(row["data"], "data", damage),
                    correlation_id=row["correlation_id"],
                    created_at=row["created_at"] or "",
                )
            )
        return messages


TEXT_COLUMNS = (
    "role",
    "kind",
    "content",
    "thinking",
    "tool_calls",
    "tool_name",
    "data",
    "correlation_id",
    "created_at",
)


def decoded(value: bytes | str | None) -> str:
    """A column read as bytes, as text: bytes that are not UTF-8 become U+FFFD."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "replace")
