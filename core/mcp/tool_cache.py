"""The tool cache: each MCP server's tool list as diana last saw it, kept in SQLite.

Whenever any diana process connects to a server (the app, or a `diana` command), it writes
what the server listed: each tool's definition as the orchestrator registers it (name,
schema, annotations, risk) and the server's own name for it. A tool refused only because
another server offers the same name is written too: which of them answers to a name is
settled anew by each process among the servers it has (core/calls/orchestrator.py), so a server
that is gone gives the name back. A `diana` command reads it to
resolve a tool's name, check the arguments and decide approval before it starts anything;
the server starts only when a call runs (core/mcp/manager.py, on demand).

An entry is used while it is fresh: written for the server entry as it is now in
mcp-servers.json (its fingerprint: any change to the command, arguments, environment, URL or
timeouts makes another) and less than ``MAX_AGE`` old. Otherwise the server is connected, as
without a cache. An entry that cannot be read back (edited by hand, from another version)
counts as missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from ..config.mcp_servers import MCPServerConfig
from ..models import ToolDefinition
from ..storage.db import Database
from ..system.clock import Clock
from ..system.telemetry import StructuredLog

MAX_AGE = timedelta(hours=24)


@dataclass(frozen=True)
class CachedTools:
    """One server's entry: its tools by registered name, and when they were listed."""

    server: str
    fingerprint: str
    refreshed_at: datetime
    definitions: dict[str, ToolDefinition]
    originals: dict[str, str]  # registered name -> the name the server gave the tool

    def fresh_for(self, config: MCPServerConfig, now: datetime, max_age: timedelta) -> bool:
        return self.fingerprint == fingerprint(config) and now - self.refreshed_at < max_age


def fingerprint(config: MCPServerConfig) -> str:
    """Stands for everything in the entry that could change the server's tools (values of
    secrets included, so only a digest is stored)."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()


def not_cached(
    database: Path, configs: list[MCPServerConfig], now: datetime, max_age: timedelta = MAX_AGE
) -> list[MCPServerConfig]:
    """Of these servers, those with no entry that could stand in for connecting (by its
    fingerprint and age), read from the database file before the runtime opens it: a command
    connects these whatever else it does. (An entry found fresh here may still prove
    unreadable, and the server is then connected after all.)"""
    if not database.exists():
        return list(configs)  # nothing was ever cached here
    entries: dict[str, tuple[str, str]] = {}
    try:
        uri = f"{database.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            for server, print_, refreshed_at in db.execute(
                "SELECT server, fingerprint, refreshed_at FROM tool_cache"
            ):
                entries[server] = (print_, refreshed_at)
    except (sqlite3.Error, OSError, ValueError):
        return []  # unreadable now: only the runtime can tell, so none is said to need it

    def fresh(config: MCPServerConfig) -> bool:
        if config.name not in entries:
            return False
        print_, refreshed_at = entries[config.name]
        try:
            written = datetime.fromisoformat(refreshed_at)
            return print_ == fingerprint(config) and now - written < max_age
        except (TypeError, ValueError):
            return False

    return [config for config in configs if not fresh(config)]


def age_text(age: timedelta) -> str:
    """How long ago, for a person: `just now`, `5 min ago`, `3 h ago`, `2 days ago`."""
    seconds = max(0, int(age.total_seconds()))
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


class ToolCache:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        log: StructuredLog | None = None,
        max_age: timedelta = MAX_AGE,
    ) -> None:
        self._db = db
        self._clock = clock
        self._log = log
        self.max_age = max_age

    async def save(
        self, config: MCPServerConfig, tools: Iterable[tuple[str, ToolDefinition]]
    ) -> None:
        """The server's tools as just listed, as (the server's name, definition) pairs.
        A failure to write is logged: the cache is an aid, never a reason to fail."""
        listed = [
            {"server_tool": original, "definition": definition.model_dump(mode="json")}
            for original, definition in tools
        ]
        row = (
            config.name,
            fingerprint(config),
            self._clock.now().isoformat(),
            json.dumps(listed, ensure_ascii=False),
        )
        try:
            await self._db.execute(
                "INSERT INTO tool_cache (server, fingerprint, refreshed_at, tools) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (server) DO UPDATE SET "
                "fingerprint = excluded.fingerprint, refreshed_at = excluded.refreshed_at, "
                "tools = excluded.tools",
                row,
            )
        except Exception as exc:
            self._emit("tool_cache.save_failed", server=config.name, error=str(exc))

    async def fresh(self, config: MCPServerConfig) -> CachedTools | None:
        """The server's entry if it can stand in for connecting, else None."""
        entry = (await self._read(config.name)).get(config.name)
        if entry is None or not entry.fresh_for(config, self._clock.now(), self.max_age):
            return None
        return entry

    async def entries(self) -> dict[str, CachedTools]:
        """Every server's entry that can be read, fresh or not (for `diana tools`)."""
        return await self._read(None)

    async def _read(self, server: str | None) -> dict[str, CachedTools]:
        if server is None:
            rows = await self._db.read("SELECT * FROM tool_cache")
        else:
            rows = await self._db.read("SELECT * FROM tool_cache WHERE server = ?", (server,))
        entries = {}
        for row in rows:
            try:
                entries[row["server"]] = _loaded(row)
            except (ValueError, TypeError, KeyError, ValidationError) as exc:
                self._emit("tool_cache.damaged", server=str(row["server"]), error=str(exc))
        return entries

    def _emit(self, event: str, **fields: str) -> None:
        if self._log is not None:
            self._log.emit(event, "warning", **fields)


def _loaded(row: sqlite3.Row) -> CachedTools:
    """An entry read back; raises if any part of it is not what ``save`` wrote."""
    definitions: dict[str, ToolDefinition] = {}
    originals: dict[str, str] = {}
    for item in json.loads(row["tools"]):
        definition = ToolDefinition.model_validate(item["definition"])
        original = item["server_tool"]
        if not isinstance(original, str):
            raise TypeError("server_tool is not text")
        definitions[definition.name] = definition
        originals[definition.name] = original
    refreshed_at = datetime.fromisoformat(row["refreshed_at"])
    if refreshed_at.tzinfo is None:
        raise ValueError("refreshed_at has no time zone")
    return CachedTools(
        server=row["server"],
        fingerprint=row["fingerprint"],
        refreshed_at=refreshed_at,
        definitions=definitions,
        originals=originals,
    )
