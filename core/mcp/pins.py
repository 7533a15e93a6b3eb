"""Tool pins: a server's tool is held when its definition changes after it was first offered.

The first time any diana process lists a server's tool (to offer it to the chat's model, or a
command's call), its definition as diana exposes it (name, description, input schema,
annotations) is recorded in SQLite by hash, keyed by the server's launch identity (the program
it runs, core/config/mcp_servers.py) and the tool's exposed name. A later listing that offers a
different definition (a reconnect, an update, a tools/list_changed mid-session) marks the tool
held: every call of it is refused before it reaches the server, in every process, until a
person accepts the new definition (`diana tools accept NAME`). The accepted definition is never
replaced by a listing, only by that acceptance, and a hold is never lifted by a listing (a
process still seeing the old definition does not undo what another saw).

A call's check reads no row while its tool is known clean (pinned as offered, nothing held):
that is kept in memory for the very definition object checked, so a re-listing (a new object)
is checked against the table again; and every process that holds or accepts a tool appends a
byte to ``tool_pins.changed`` beside the database, which every other process stats at each
check and, seeing it changed, forgets what it knew. What is known clean is read again at the
latest after CLEAN_FOR seconds whatever the file says.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from ..models import ToolDefinition
from ..storage.db import Database
from ..system.clock import Clock
from ..system.files import open_private
from ..system.telemetry import StructuredLog

PINNED_PARTS = ("name", "description", "parameters", "annotations")
# Beside the database: a byte is appended each time any process holds or accepts a tool.
CHANGED_FILE = "tool_pins.changed"
# Seconds a tool known clean is answered from memory before the table is read again.
CLEAN_FOR = 2.0


class UnknownHeldTool(LookupError):
    """A name that no held tool has (`diana tools accept NAME`)."""

    def __init__(self, name: str, held: list[str]) -> None:
        hint = f" (held now: {', '.join(held)})" if held else " (no tool is held)"
        super().__init__(f"no held tool named {name!r}{hint}")
        self.name = name


def pinned_form(definition: ToolDefinition) -> dict[str, Any]:
    """What of a definition is pinned: what the model (or a host) is shown of the tool."""
    shown = definition.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {part: shown.get(part) for part in PINNED_PARTS}


def digest_of(form: dict[str, Any]) -> str:
    """sha256 of the definition as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(form, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ToolChange:
    """A held tool: the definition a person accepted and the one its server offers now."""

    server: str
    tool: str
    accepted: dict[str, Any]
    offered: dict[str, Any]
    changed_at: datetime

    def changed_parts(self) -> list[str]:
        """Which parts differ: description, input schema, annotations (or name)."""
        labels = {"parameters": "input schema"}
        return [
            labels.get(part, part)
            for part in PINNED_PARTS
            if self.accepted.get(part) != self.offered.get(part)
        ]

    def differences(self) -> list[tuple[str, str, str]]:
        """(part, old, new) for each part that differs, old and new as compact JSON (a
        description as its text); annotations by the hints that differ."""
        rows: list[tuple[str, str, str]] = []
        for part in PINNED_PARTS:
            old, new = self.accepted.get(part), self.offered.get(part)
            if old == new:
                continue
            if part == "annotations" and isinstance(old, dict) and isinstance(new, dict):
                for hint in sorted(set(old) | set(new)):
                    if old.get(hint) != new.get(hint):
                        rows.append(
                            (
                                f"annotations.{hint}",
                                _compact(old.get(hint)),
                                _compact(new.get(hint)),
                            )
                        )
                continue
            if part == "parameters" and isinstance(old, dict) and isinstance(new, dict):
                for key in sorted(set(old) | set(new)):
                    if old.get(key) != new.get(key):
                        rows.append(
                            (f"input schema.{key}", _compact(old.get(key)), _compact(new.get(key)))
                        )
                continue
            shown = {"parameters": "input schema"}.get(part, part)
            as_text = (lambda v: v) if isinstance(old, str) and isinstance(new, str) else _compact
            rows.append((shown, as_text(old), as_text(new)))
        return rows

    def public(self) -> dict[str, Any]:
        """As `diana tools changes --json` prints it."""
        return {
            "server": self.server,
            "tool": self.tool,
            "changed": self.changed_parts(),
            "changed_at": self.changed_at.isoformat(),
            "accepted": self.accepted,
            "offered": self.offered,
            "differences": [
                {"part": part, "old": old, "new": new} for part, old, new in self.differences()
            ],
        }


def held_message(tool: str, parts: list[str]) -> str:
    what = ", ".join(parts) if parts else "definition"
    return (
        f"{tool} is held: its definition changed since it was accepted ({what}); not run. "
        f"A person reviews it with `diana tools changes` and accepts it with "
        f"`diana tools accept {tool}`"
    )


class ToolPins:
    """The pins table (``tool_pins``), shared by every diana process on the data dir."""

    def __init__(self, db: Database, clock: Clock, log: StructuredLog | None = None) -> None:
        self._db = db
        self._clock = clock
        self._log = log
        self._changed = db.path.parent / CHANGED_FILE
        # (identity, tool) -> the definition object found clean, and until when (monotonic);
        # valid while the changed file is as it was when they were read (``_seen``).
        self._clean: dict[tuple[str, str], tuple[ToolDefinition, float]] = {}
        self._seen: tuple[int, int, int] | None = None

    def _stamp(self) -> tuple[int, int, int] | None:
        """The changed file as it is now (inode, size, mtime); None when it cannot be told."""
        try:
            info = os.stat(self._changed)
        except FileNotFoundError:
            return (0, 0, 0)
        except OSError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns)

    def _tell_every_process(self) -> None:
        """After a hold or an acceptance is committed: every process forgets what it knew."""
        self._clean.clear()
        try:
            fd = open_private(self._changed, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            try:
                os.write(fd, b".")
            finally:
                os.close(fd)
        except OSError as exc:  # the others read the table again within CLEAN_FOR seconds
            if self._log is not None:
                self._log.emit("tool_pins.tell_failed", "warning", error=str(exc))

    async def record(
        self, server: str, identity: str, definitions: Iterable[ToolDefinition]
    ) -> list[str]:
        """A server's tools as just listed: each seen the first time is pinned as it is; each
        that differs from its pin is held. Returns the names held by this listing."""
        now = self._clock.now().isoformat()
        forms = [(d.name, pinned_form(d)) for d in definitions]

        async def work(connection: aiosqlite.Connection) -> list[str]:
            newly: list[str] = []
            for name, form in forms:
                if await _observe(connection, server, identity, name, form, now):
                    newly.append(name)
            return newly

        newly = await self._db.write(work)
        if newly:
            self._tell_every_process()
            if self._log is not None:
                self._log.emit("tool_pins.held", "warning", server=server, tools=newly)
        return newly

    async def refusal(self, server: str, identity: str, definition: ToolDefinition) -> str | None:
        """Why a call of this tool must not run now (it is held), or None. A definition never
        seen before is pinned here, as it is offered by this call."""
        key = (identity, definition.name)
        stamp = self._stamp()
        if stamp is None or stamp != self._seen:
            self._clean.clear()
            self._seen = stamp
        else:
            known = self._clean.get(key)
            if known is not None and known[0] is definition and time.monotonic() < known[1]:
                return None
        why = await self._read_refusal(server, identity, definition)
        if why is None and stamp is not None:
            self._clean[key] = (definition, time.monotonic() + CLEAN_FOR)
        return why

    async def _read_refusal(
        self, server: str, identity: str, definition: ToolDefinition
    ) -> str | None:
        form = pinned_form(definition)
        digest = digest_of(form)
        row = await self._db.read_one(
            "SELECT digest, offered_digest, definition, offered FROM tool_pins "
            "WHERE identity = ? AND tool = ?",
            (identity, definition.name),
        )
        if row is not None and row["digest"] == digest and row["offered_digest"] is None:
            return None
        if row is None or (row["digest"] != digest and row["offered_digest"] != digest):
            now = self._clock.now().isoformat()

            async def work(connection: aiosqlite.Connection) -> bool:
                return await _observe(connection, server, identity, definition.name, form, now)

            if await self._db.write(work):
                self._tell_every_process()
            row = await self._db.read_one(
                "SELECT digest, offered_digest, definition, offered FROM tool_pins "
                "WHERE identity = ? AND tool = ?",
                (identity, definition.name),
            )
            if row is not None and row["digest"] == digest and row["offered_digest"] is None:
                return None  # first seen now, by this call
        if row is None:  # cannot happen: written above
            return held_message(definition.name, [])
        offered = json.loads(row["offered"]) if row["offered"] else form
        change = ToolChange(
            server, definition.name, json.loads(row["definition"]), offered, self._clock.now()
        )
        return held_message(definition.name, change.changed_parts())

    async def held_names(self, identity: str, definitions: Iterable[ToolDefinition]) -> set[str]:
        """Of these definitions of the server that runs this program, the names of those a
        call of would be refused now: held, or different from their pin (a change not
        recorded yet). One never pinned is not: it is offered for the first time."""
        rows = await self._db.read(
            "SELECT tool, digest, offered_digest FROM tool_pins WHERE identity = ?", (identity,)
        )
        pins = {row["tool"]: (row["digest"], row["offered_digest"]) for row in rows}
        held = set()
        for definition in definitions:
            pin = pins.get(definition.name)
            if pin is not None and (
                pin[1] is not None or pin[0] != digest_of(pinned_form(definition))
            ):
                held.add(definition.name)
        return held

    async def changes(self) -> list[ToolChange]:
        """Every held tool, oldest change first."""
        rows = await self._db.read(
            "SELECT server, tool, definition, offered, changed_at FROM tool_pins "
            "WHERE offered_digest IS NOT NULL ORDER BY changed_at, server, tool"
        )
        return [
            ToolChange(
                row["server"],
                row["tool"],
                json.loads(row["definition"]),
                json.loads(row["offered"]),
                datetime.fromisoformat(row["changed_at"]),
            )
            for row in rows
        ]

    async def accept(self, name: str) -> list[ToolChange]:
        """A person accepts the new definition of the held tool ``name`` (of every server
        whose tool of that name is held): it is pinned, and callable again."""
        now = self._clock.now().isoformat()

        async def work(connection: aiosqlite.Connection) -> list[ToolChange]:
            async with connection.execute(
                "SELECT server, tool, definition, offered, changed_at FROM tool_pins "
                "WHERE tool = ? AND offered_digest IS NOT NULL",
                (name,),
            ) as cursor:
                rows = list(await cursor.fetchall())
            await connection.execute(
                "UPDATE tool_pins SET digest = offered_digest, definition = offered, "
                "pinned_at = ?, offered_digest = NULL, offered = NULL, changed_at = NULL "
                "WHERE tool = ? AND offered_digest IS NOT NULL",
                (now, name),
            )
            return [
                ToolChange(
                    row[0],
                    row[1],
                    json.loads(row[2]),
                    json.loads(row[3]),
                    datetime.fromisoformat(row[4]),
                )
                for row in rows
            ]

        accepted = await self._db.write(work)
        if accepted:
            self._tell_every_process()
        if not accepted:
            raise UnknownHeldTool(name, sorted({c.tool for c in await self.changes()}))
        if self._log is not None:
            self._log.emit("tool_pins.accepted", "info", tool=name)
        return accepted


async def _observe(
    connection: aiosqlite.Connection,
    server: str,
    identity: str,
    name: str,
    form: dict[str, Any],
    now: str,
) -> bool:
    """Inside a write transaction: pin a definition seen the first time (the first writer
    wins), or hold the tool if it differs from its pin. True if it became held or its held
    definition changed now."""
    digest, text = digest_of(form), json.dumps(form, ensure_ascii=False, sort_keys=True)
    await connection.execute(
        "INSERT OR IGNORE INTO tool_pins (identity, tool, server, digest, definition, pinned_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (identity, name, server, digest, text, now),
    )
    cursor = await connection.execute(
        "UPDATE tool_pins SET offered_digest = ?, offered = ?, changed_at = ?, server = ? "
        "WHERE identity = ? AND tool = ? AND digest != ? "
        "AND (offered_digest IS NULL OR offered_digest != ?)",
        (digest, text, now, server, identity, name, digest, digest),
    )
    return cursor.rowcount > 0
