"""Completion as ghost text in an input (→ or End takes it): a prompt's arguments, asked of
the server (completion/complete), and in the chat `/command`, `/server:prompt` and
`@server:uri`, from the commands and the servers' prompts and resources."""

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


Listing = Callable[[], Awaitable[list[tuple[str, str]]]]  # (server, uri or prompt name)
AT = re.compile(r"(?:^|\s)@([A-Za-z0-9_.-]*)(?::(\S*))?$")
SLASH = re.compile(r"^/([A-Za-z0-9_.-]*)(?::(\S*))?$")


class ChatSuggester(Suggester):
    """In the chat's input: `/` then a command or a server's name, then `:` and one of its
    prompts; `@` then a server's name, then `:` and one of its resources' URIs."""

    def __init__(
        self,
        commands: list[str],
        servers: Callable[[], list[str]],
        resources: Listing,
        prompts: Listing,
    ) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._commands = commands  # without their slash
        self._servers = servers
        self._lists = {"@": _Kept(resources), "/": _Kept(prompts)}

    async def get_suggestion(self, value: str) -> str | None:
        found = SLASH.search(value)
        sign = "/"
        if found is None:
            found, sign = AT.search(value), "@"
            if found is None:
                return None
        name, rest = found.group(1), found.group(2)
        if rest is None:  # a command (after /) or a server's name, then `:`
            names = [c for c in self._commands if sign == "/"]
            names += [f"{server}:" for server in self._servers()]
            for offered in names:
                if offered.startswith(name) and offered not in (name, f"{name}:"):
                    return value + offered[len(name) :]
            return None
        for owner, offered in await self._lists[sign].get():
            if owner == name and offered.startswith(rest) and offered != rest:
                return value + offered[len(rest) :]
        return None


class _Kept:
    """A listing asked of the servers at most every RESOURCES_KEPT seconds."""

    def __init__(self, listing: Listing) -> None:
        self._listing = listing
        self._listed: list[tuple[str, str]] = []
        self._listed_at = -RESOURCES_KEPT

    async def get(self) -> list[tuple[str, str]]:
        if time.monotonic() - self._listed_at > RESOURCES_KEPT:
            self._listed = await self._listing()
            self._listed_at = time.monotonic()
        return self._listed
