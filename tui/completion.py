"""Completion as ghost text in an input (→ or End takes it): a prompt's arguments, asked of
the server (completion/complete), and `@server:uri` in the chat, from the servers' resources."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable

from textual.suggester import Suggester

RESOURCES_KEPT = 30.0  # seconds the chat's list of resources is used before it is asked again


class AskedSuggester(Suggester):
    """The first value ``complete`` gives that goes on from what was typed."""

    def __init__(self, complete: Callable[[str], Awaitable[list[str]]]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._complete = complete

    async def get_suggestion(self, value: str) -> str | None:
        try:
            offered_values = await self._complete(value)
        except Exception:  # the form closed meanwhile, say: no suggestion, no failure
            return None
        for offered in offered_values:
            if offered.startswith(value) and offered != value:
                return offered
        return None


Resources = Callable[[], Awaitable[list[tuple[str, str]]]]  # (server, uri) of each resource
AT = re.compile(r"(?:^|\s)@([A-Za-z0-9_.-]*)(?::(\S*))?$")


class ResourceSuggester(Suggester):
    """`@` then a server's name, then `:` and one of its resources' URIs."""

    def __init__(self, servers: Callable[[], list[str]], resources: Resources) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._servers = servers
        self._resources = resources
        self._listed: list[tuple[str, str]] = []
        self._listed_at = -RESOURCES_KEPT

    async def get_suggestion(self, value: str) -> str | None:
        found = AT.search(value)
        if found is None:
            return None
        server, uri = found.group(1), found.group(2)
        if uri is None:
            names = [name for name in self._servers() if name.startswith(server) and name != server]
            return value + names[0][len(server) :] + ":" if names else None
        if time.monotonic() - self._listed_at > RESOURCES_KEPT:
            self._listed = await self._resources()
            self._listed_at = time.monotonic()
        for owner, offered in self._listed:
            if owner == server and offered.startswith(uri) and offered != uri:
                return value + offered[len(uri) :]
        return None
