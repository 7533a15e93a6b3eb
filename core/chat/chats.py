"""The conversations a person has had, as a chat client keeps them: listed newest first,
found by the words said in them (SQLite FTS5), renamed, deleted, exported as Markdown or
JSON; each with its own system prompt and the Ollama options its turns are sent.

What a person types to search is never read as FTS5 syntax: each word is quoted (the
memory's ``quoted``), every word must be there, and the last may be the start of a word, so
a search typed letter by letter finds as it goes. Deleting a conversation deletes its
messages; the execution log keeps the record of every call that ran."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from ..content.text import without_surrogates
from ..memory.lexical import quoted
from ..storage.db import Database
from ..storage.stored import loaded_json, stored_json
from .conversation import ConversationStore, Kind, Message, decoded
from .images import stored_images

TITLE_LIMIT = 200  # characters of a title a person gives
SYSTEM_LIMIT = 32_000  # characters of a conversation's own system prompt
SEARCH_LIMIT = 500  # characters of a search
SEARCH_WORDS = 16  # words of a search looked for (past them, the rest is ignored)
LIST_LIMIT = 100_000
FORMATS = ("md", "json")
_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")


class UnknownChat(LookupError):
    """No conversation has that id."""

    def __init__(self, conversation_id: str) -> None:
        shown = conversation_id if len(conversation_id) <= 40 else conversation_id[:40] + "…"
        super().__init__(f"no conversation {shown!r} (diana chats list shows them)")
        self.conversation_id = conversation_id


class BadChatInput(ValueError):
    """A title, an option or a system prompt that cannot be kept; the message names it."""


# The options Ollama takes that a person may set per conversation: (type, least, most).
OPTIONS: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0.0, 2.0),
    "top_p": (float, 0.0, 1.0),
    "top_k": (int, 1, 1000),
    "min_p": (float, 0.0, 1.0),
    "num_ctx": (int, 256, 1_048_576),
    "num_predict": (int, -2, 1_048_576),
    "seed": (int, -(2**31), 2**31 - 1),
    "repeat_penalty": (float, 0.0, 10.0),
    "repeat_last_n": (int, -1, 1_048_576),
}


def option_range(name: str) -> tuple[type, float, float]:
    """What option ``name`` takes; BadChatInput naming the options there are otherwise."""
    if name not in OPTIONS:
        known = ", ".join(OPTIONS)
        raise BadChatInput(f"unknown option {_shown(name)}: the options are {known}")
    return OPTIONS[name]


def option_value(name: str, value: Any) -> int | float:
    """``value`` as option ``name`` takes it (text as typed, or a number); BadChatInput
    naming the option and what it takes otherwise."""
    kind, least, most = option_range(name)
    what = "a whole number" if kind is int else "a number"
    span = f"{what} from {least:g} to {most:g}"
    try:
        if isinstance(value, bool):
            raise ValueError
        number = kind(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise BadChatInput(f"{name} takes {span}, not {_shown(str(value))}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise BadChatInput(f"{name} takes {span}, not {_shown(str(value))}")
    if not least <= number <= most:
        raise BadChatInput(f"{name} takes {span}, not {_shown(str(value))}")
    return number


def checked_options(options: Any) -> dict[str, int | float]:
    """Stored options as they can be sent: any that is unknown or out of range is left out
    (a database written by hand, or by a later diana, never fails a turn)."""
    if not isinstance(options, dict):
        return {}
    kept: dict[str, int | float] = {}
    for name, value in options.items():
        try:
            kept[str(name)] = option_value(str(name), value)
        except BadChatInput:
            continue
    return kept


def options_text(options: dict[str, int | float]) -> str:
    """The options as a person reads them: ``temperature=0.2 seed=7``; "" when none."""
    return " ".join(f"{name}={value:g}" for name, value in options.items())


def title_text(title: str) -> str:
    """A title a person gave, as kept: one line, trimmed; BadChatInput when empty or long."""
    text = _SPACE.sub(" ", without_surrogates(title)).strip()
    text = "".join(c for c in text if c.isprintable())
    if not text:
        raise BadChatInput("a conversation's title cannot be empty")
    if len(text) > TITLE_LIMIT:
        raise BadChatInput(
            f"a conversation's title is at most {TITLE_LIMIT} characters, not {len(text):,}"
        )
    return text


def system_text(text: str) -> str:
    """A conversation's own system prompt, as kept ("" for none); BadChatInput when long."""
    kept = without_surrogates(text).strip()
    if len(kept) > SYSTEM_LIMIT:
        raise BadChatInput(
            f"a system prompt is at most {SYSTEM_LIMIT:,} characters, not {len(kept):,}"
        )
    return kept


def search_terms(text: str) -> list[tuple[str, str]]:
    """What a person typed to search, word by word: each word as a title holds it (lower
    case) and as an FTS5 query (quoted: never syntax); the last word also matches as the
    start of a word, for a search typed as it goes."""
    words = _WORD.findall(without_surrogates(text[:SEARCH_LIMIT]).lower())[:SEARCH_WORDS]
    terms = [(word, quoted(word)) for word in words]
    if terms:
        terms[-1] = (terms[-1][0], terms[-1][1] + "*")
    return terms


@dataclass(frozen=True)
class ChatSettings:
    """What a conversation's turns are sent besides its messages."""

    system: str = ""  # added to diana's own system prompt, whose rules stay
    options: dict[str, int | float] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatSummary:
    """One conversation, as the list shows it."""

    id: str
    title: str
    model: str
    messages: int
    created_at: str
    updated_at: str
    origin: str
    settings: ChatSettings

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "model": self.model,
            "messages": self.messages,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "origin": self.origin,
            "system": self.settings.system,
            "options": self.settings.options,
        }


# Text read as bytes and decoded here: a row another program wrote that is not UTF-8 is
# shown with U+FFFD for its bad bytes, never fails the list.
_SUMMARY = (
    "SELECT c.id, CAST(c.title AS BLOB) AS title, CAST(c.model AS BLOB) AS model, "
    "c.created_at, c.updated_at, c.origin, CAST(c.system AS BLOB) AS system, "
    "CAST(c.options AS BLOB) AS options, "
    "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS count, "
    "(SELECT MAX(m.id) FROM messages m WHERE m.conversation_id = c.id) AS last "
    "FROM conversations c"
)
# The one written to last first (within one clock tick, the one with the newest message).
_NEWEST = " ORDER BY c.updated_at DESC, coalesce(last, 0) DESC, c.rowid DESC"


def _summary(row: aiosqlite.Row) -> ChatSummary:
    damage: list[str] = []
    options = decoded(row["options"])
    return ChatSummary(
        id=str(row["id"]),
        title=decoded(row["title"]),
        model=decoded(row["model"]),
        messages=int(row["count"]),
        created_at=str(row["created_at"]),
        updated_at=str(row["updated_at"]),
        origin=str(row["origin"]),
        settings=ChatSettings(
            decoded(row["system"]),
            # Most have none: a list of hundreds reads no JSON for them.
            {}
            if options in ("", "{}")
            else checked_options(loaded_json(options, "options", damage)),
        ),
    )


class Chats:
    """The conversations in the database, for the list, the search and the commands."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.messages_of = ConversationStore(db).messages

    async def recent(self, limit: int = LIST_LIMIT) -> list[ChatSummary]:
        """Every conversation, the one used last first."""
        rows = await self._db.read(f"{_SUMMARY}{_NEWEST} LIMIT ?", (limit,))
        return [_summary(row) for row in rows]

    async def count(self) -> int:
        """How many conversations are kept."""
        row = await self._db.read_one("SELECT COUNT(*) AS n FROM conversations")
        return 0 if row is None else int(row["n"])

    async def search(self, text: str, limit: int = LIST_LIMIT) -> list[ChatSummary]:
        """The conversations that hold each word of ``text`` (the last may be the start of
        one), in their title or their messages, the one used last first."""
        terms = search_terms(text)
        if not terms:
            return await self.recent(limit)
        # Each word is in the title, or in a message of the person's or the model's: the
        # index's rowid carries the conversation's key (core/storage/schema.py), so a common
        # word's thousands of messages are never read, only their keys.
        holds = (
            "(instr(lower(c.title), ?) > 0 OR c.key IN (SELECT rowid >> 32 "
            "FROM conversation_words WHERE conversation_words MATCH ?))"
        )
        where = " AND ".join(holds for _ in terms)
        values = [value for term in terms for value in term]
        rows = await self._db.read(f"{_SUMMARY} WHERE {where}{_NEWEST} LIMIT ?", (*values, limit))
        return [_summary(row) for row in rows]

    async def get(self, conversation_id: str) -> ChatSummary:
        row = await self._db.read_one(f"{_SUMMARY} WHERE c.id = ?", (conversation_id,))
        if row is None:
            raise UnknownChat(conversation_id)
        return _summary(row)

    async def settings(self, conversation_id: str) -> ChatSettings:
        return (await self.get(conversation_id)).settings

    async def rename(self, conversation_id: str, title: str) -> ChatSummary:
        kept = title_text(title)
        await self._changed(
            conversation_id, "UPDATE conversations SET title = ? WHERE id = ?", (kept,)
        )
        return await self.get(conversation_id)

    async def set_settings(self, conversation_id: str, settings: ChatSettings) -> None:
        notes: list[str] = []
        await self._changed(
            conversation_id,
            "UPDATE conversations SET system = ?, options = ? WHERE id = ?",
            (system_text(settings.system), stored_json(settings.options, "options", notes)),
        )

    async def delete(self, conversation_id: str) -> ChatSummary:
        """Delete the conversation and its messages (the calls it made stay in the log)."""
        gone = await self.get(conversation_id)

        async def delete(connection: aiosqlite.Connection) -> int:
            await connection.execute(
                "DELETE FROM messages WHERE conversation_id = ?", (conversation_id,)
            )
            cursor = await connection.execute(
                "DELETE FROM conversations WHERE id = ?", (conversation_id,)
            )
            return cursor.rowcount

        if not await self._db.write(delete):
            raise UnknownChat(conversation_id)
        return gone

    async def export(self, conversation_id: str, form: str = "md") -> str:
        """The whole conversation as Markdown (``md``) or JSON: its title, model, system
        prompt and options, each message under its role, and each tool call with its
        arguments and what came of it."""
        if form not in FORMATS:
            raise BadChatInput(f"an export is md or json, not {_shown(form)}")
        summary = await self.get(conversation_id)
        messages = await self.messages_of(conversation_id)
        if form == "json":
            return json.dumps(
                {**summary.as_json(), "messages": [_message_json(m) for m in messages]},
                indent=2,
                ensure_ascii=False,
                default=str,
            )
        return markdown(summary, messages)

    async def _changed(self, conversation_id: str, sql: str, values: tuple[Any, ...]) -> None:
        """Run an UPDATE of one conversation; UnknownChat when there is none."""
        changed = await self._db.execute(sql, (*values, conversation_id))
        if not changed:
            raise UnknownChat(conversation_id)


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "role": message.role,
        "kind": message.kind.value,
        "content": message.content,
        "thinking": message.thinking,
        "tool_calls": message.tool_calls,
        "tool_name": message.tool_name,
        "outcome": message.data if message.role == "tool" else None,
        "images": [image.described() for image in stored_images(message.data)]
        if message.role == "user"
        else [],
        "created_at": message.created_at,
    }


ROLE_HEADINGS = {"user": "You", "assistant": "DIANA"}


def markdown(summary: ChatSummary, messages: list[Message]) -> str:
    lines = [f"# {_one_line(summary.title) or 'Untitled conversation'}", ""]
    lines.append(f"- model: {_one_line(summary.model)}")
    lines.append(f"- started: {summary.created_at}, last used: {summary.updated_at}")
    if summary.settings.options:
        lines.append(f"- options: {options_text(summary.settings.options)}")
    if summary.settings.system:
        lines += ["- system prompt:", "", *_fenced(summary.settings.system)]
    for message in messages:
        lines.append("")
        if message.role == "tool":
            lines += _tool_lines(message)
        elif message.kind is Kind.ERROR:
            lines.append(f"> {_one_line(message.content)}")
        else:
            heading = ROLE_HEADINGS.get(message.role, message.role)
            lines += [f"## {heading} ({message.created_at[:19]})", ""]
            if message.content:
                lines.append(message.content)
            if message.role == "user":
                lines += [f"- {image.shown}" for image in stored_images(message.data)]
            for call in message.tool_calls or []:
                asked = call.get("function", call) if isinstance(call, dict) else {}
                arguments = json.dumps(asked.get("arguments"), ensure_ascii=False, default=str)
                lines.append(f"- asked to call `{_one_line(str(asked.get('name')))}` {arguments}")
    return "\n".join(lines).rstrip() + "\n"


def _tool_lines(message: Message) -> list[str]:
    """A tool call's outcome: its name, arguments and status, then its result or error."""
    record = message.data if isinstance(message.data, dict) else {}
    name = _one_line(str(record.get("name") or message.tool_name or "?"))
    status = _one_line(str(record.get("status") or "?"))
    lines = [f"### Tool call `{name}`: {status}", ""]
    if "arguments" in record:
        arguments = json.dumps(record["arguments"], indent=2, ensure_ascii=False, default=str)
        lines += ["Arguments:", "", *_fenced(arguments, "json"), ""]
    if record.get("error"):
        lines.append(f"Error: {_one_line(str(record['error']))}")
    elif record.get("result") is not None:
        result = json.dumps(record["result"], indent=2, ensure_ascii=False, default=str)
        lines += ["Result:", "", *_fenced(result, "json")]
    elif not record:
        lines += _fenced(message.content)
    return lines


def _fenced(text: str, language: str = "") -> list[str]:
    """``text`` in a code block whose fence no line of it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", text, fence]


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "…")


__all__ = [
    "FORMATS",
    "OPTIONS",
    "BadChatInput",
    "ChatSettings",
    "ChatSummary",
    "Chats",
    "UnknownChat",
    "option_range",
    "option_value",
    "options_text",
    "search_terms",
]
