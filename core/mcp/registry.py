"""The MCP Registry: finding servers, and the config entry that runs one.

Any registry speaking the official MCP Registry API (``settings.json`` ``"registry": {"url":
...}``, by default https://registry.modelcontextprotocol.io) is asked ``GET
/v0.1/servers?search=&limit=&cursor=`` (``/v0/servers`` for an older one) and ``GET
/v0.1/servers/{name}/versions/{version|latest}``. Each entry is a ``server.json``: name, title,
description, version, repository, ``packages`` (npm, pypi, oci, ...: identifier, version,
transport, environment variables, arguments) and ``remotes`` (streamable-http or sse URLs with
headers), with the registry's ``_meta`` (status, whether it is the latest version).

What a registry answers is data from outside: its size, the number of entries and every text
in them are bounded, and nothing in it is followed as an instruction. Answers are kept in a
cache under the data dir for ``registry.cache_ttl`` seconds; when the registry cannot be
reached, the cache answers (however old) and says so.

An entry, and the mcp-servers.json entry that runs it, is core/mcp/registry_entry.py's.
``candidates`` here searches the registry for servers that may offer a capability a request
needed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..config.settings import RegistrySettings
from ..content.http_body import ACCEPT_ENCODING, BodyTooLarge, BodyUnreadable, read_body
from ..content.jsontext import JSONProblem, parse_json
from ..system.clock import Clock
from ..system.files import write_private
from ..web.addresses import AddressRule
from .registry_entry import Answer, RegistryServer, bounded, read_entry
from .venv_install import RegistryEntryError

REGISTRY_DIR = "registry"  # under the data dir: the cache of the registry's answers
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # a registry answer past this is refused
MAX_SERVERS = 100  # entries kept from one answer
SEARCH_LIMIT = 100  # the most a search asks for (the official registry's page size limit)


class RegistryError(Exception):
    """The registry could not answer, and the cache holds nothing for the question."""


class RegistryClient:
    """Asks one registry; every answer goes through the cache under ``cache_dir``."""

    def __init__(
        self,
        settings: RegistrySettings,
        cache_dir: Path,
        clock: Clock,
        servers_dir: Path | None = None,
        address_rule: AddressRule | None = None,
    ) -> None:
        self.url = settings.url
        # Where an entry's remote may point: web_fetch's rule, as settings.json's web allows.
        self.address_rule = address_rule or AddressRule()
        self.servers_dir = servers_dir  # where PyPI servers get a virtual environment
        self.ttl = timedelta(seconds=settings.cache_ttl)
        self.timeout = settings.timeout
        self.cache_dir = cache_dir
        self._clock = clock

    async def search(self, query: str, *, limit: int = 10, cursor: str | None = None) -> Answer:
        """Servers whose name holds ``query`` (the registry decides how it matches), the
        latest version of each, active ones first."""
        params = {"search": query.strip(), "limit": str(max(1, min(limit, SEARCH_LIMIT)))}
        params["version"] = "latest"
        if cursor:
            params["cursor"] = cursor
        try:
            body, fetched_at, offline, cached = await self._get("servers", params)
        except RegistryNotFound:
            raise RegistryError(
                f"{self.url} does not answer as an MCP Registry (no /v0.1/servers, no "
                "/v0/servers); check registry.url in settings.json"
            ) from None
        servers = [s for s in map(read_entry, _listed(body)) if s is not None][:MAX_SERVERS]
        servers.sort(key=lambda s: s.deprecated)  # stable: the registry's order otherwise
        metadata = body.get("metadata") if isinstance(body, dict) else None
        next_cursor = metadata.get("nextCursor") if isinstance(metadata, dict) else None
        return Answer(
            servers[:limit],
            bounded(next_cursor) if isinstance(next_cursor, str) and next_cursor else None,
            fetched_at,
            cached,
            offline,
        )

    async def server(self, name: str, version: str | None = None) -> RegistryServer:
        """One server by its registry name, at ``version`` (default: the latest)."""
        path = f"servers/{quote(name, safe='')}/versions/{quote(version or 'latest', safe='')}"
        try:
            body, _at, _offline, _cached = await self._get(path, {})
        except RegistryNotFound:
            raise RegistryEntryError(self._not_found(name, version)) from None
        found = read_entry(body)
        if found is None or found.name != name:
            raise RegistryEntryError(self._not_found(name, version))
        return found

    def _not_found(self, name: str, version: str | None) -> str:
        at = f" at version {version}" if version else ""
        return f"the registry {self.url} has no server {name}{at} (diana servers search finds one)"

    async def _get(
        self, path: str, params: dict[str, str]
    ) -> tuple[Any, datetime, str | None, bool]:
        """The JSON answer to ``path`` (fresh from the cache, else from the registry, else
        from the cache however old, saying why): (body, fetched at, offline reason, cached)."""
        key = self._key(path, params)
        kept = self._cached(key)
        now = self._clock.now()
        if kept is not None and now - kept[1] < self.ttl:
            return kept[0], kept[1], None, True
        try:
            body = await self._fetch(path, params)
        except RegistryUnreachable as exc:
            if kept is None:
                raise RegistryError(f"{exc}; nothing is cached for it") from None
            return kept[0], kept[1], f"{exc}: answered from the cache", True
        self._keep(key, body, now)
        return body, now, None, False

    async def _fetch(self, path: str, params: dict[str, str]) -> Any:
        import httpx

        try:
            async with httpx.AsyncClient(
                timeout=self.timeout,
                follow_redirects=True,
                verify=_tls(),
                headers={"accept-encoding": ACCEPT_ENCODING},
            ) as client:
                for api in ("v0.1", "v0"):
                    answer = await self._ask(client, f"{self.url}/{api}/{path}", params)
                    if answer is not None:
                        return answer
        except httpx.TooManyRedirects:
            raise RegistryError(f"the registry {self.url} redirected too many times") from None
        except (httpx.TransportError, OSError) as exc:
            raise RegistryUnreachable(f"the registry {self.url} is not reachable ({exc})") from None
        raise RegistryNotFound(path)

    async def _ask(self, client: Any, url: str, params: dict[str, str]) -> Any:
        """The JSON at ``url``; None when it is not there (404: an older API, or no such
        server)."""
        async with client.stream("GET", url, params=params) as response:
            if response.status_code == 404:
                return None
            if response.status_code >= 500:
                raise RegistryUnreachable(
                    f"the registry {self.url} answered HTTP {response.status_code}"
                )
            if response.status_code != 200:
                raise RegistryError(
                    f"the registry {self.url} refused the request: HTTP {response.status_code}"
                )
            try:
                body = await read_body(response, MAX_RESPONSE_BYTES)
            except BodyTooLarge as exc:
                raise RegistryError(
                    f"the registry {self.url} answered {exc}; nothing of it was used"
                ) from None
            except BodyUnreadable as exc:
                raise RegistryError(
                    f"the registry {self.url} answered something unreadable: {exc}"
                ) from None
        try:
            return parse_json(body.data.decode("utf-8"))
        except (UnicodeDecodeError, JSONProblem) as exc:
            raise RegistryError(
                f"the registry {self.url} answered something not JSON: {exc}"
            ) from None

    def _key(self, path: str, params: dict[str, str]) -> str:
        asked = json.dumps([self.url, path, sorted(params.items())])
        return hashlib.sha256(asked.encode()).hexdigest()[:32]

    def _cached(self, key: str) -> tuple[Any, datetime] | None:
        try:
            kept = json.loads((self.cache_dir / f"{key}.json").read_text("utf-8"))
            return kept["body"], datetime.fromisoformat(kept["fetched_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or damaged: asked anew

    def _keep(self, key: str, body: Any, now: datetime) -> None:
        try:
            write_private(
                self.cache_dir / f"{key}.json",
                json.dumps({"fetched_at": now.isoformat(), "body": body}),
                durable=False,
            )
        except OSError:
            pass  # the cache is an aid: the answer is used all the same


@functools.cache
def _tls() -> Any:
    """One TLS context for every request: making one reads the system's certificates, which
    takes longer than asking a nearby registry."""
    import ssl

    return ssl.create_default_context()


class RegistryUnreachable(Exception):
    """The registry could not be asked (network, time-out, its own failure)."""


class RegistryNotFound(Exception):
    """Neither API version has what was asked for."""


def _listed(body: Any) -> list[Any]:
    servers = body.get("servers") if isinstance(body, dict) else None
    return servers[:MAX_SERVERS] if isinstance(servers, list) else []


# -- candidates for what a request needed ------------------------------------------------------

STOPWORDS = frozenset(
    {"api", "tool", "tools", "data", "the", "a", "an", "of", "and", "to", "mcp", "server"}
)


def capability_words(capability: str) -> list[str]:
    """The words of a capability's name worth searching for (``financial_data_api`` →
    ``financial``), most telling first; all of them when every one is a stopword."""
    words = [w for w in re.split(r"[^a-z0-9]+", capability.lower()) if len(w) > 1]
    kept = [w for w in words if w not in STOPWORDS]
    return kept or words


def relevance(server: RegistryServer, words: list[str]) -> float:
    """How well an entry matches the words: in its name counts most, then title, then
    description; deprecated entries are never candidates."""
    if server.deprecated:
        return 0.0
    name = server.name.lower()
    title = (server.server.title or "").lower()
    description = server.server.description.lower()
    score = 0.0
    for word in words:
        score += 3.0 * (word in name) + 2.0 * (word in title) + 1.0 * (word in description)
    return score


async def candidates(
    client: RegistryClient, capability: str, *, limit: int = 3
) -> list[RegistryServer]:
    """The registry's best ``limit`` entries for a missing capability, searched by its
    words (each word on its own: a registry matches names by substring)."""
    words = capability_words(capability)
    found: dict[str, RegistryServer] = {}
    answers = await asyncio.gather(
        *(client.search(word, limit=10) for word in words[:4]), return_exceptions=True
    )
    for answer in answers:
        if isinstance(answer, Answer):
            for server in answer.servers:
                found.setdefault(server.name, server)
    ranked = sorted(
        (s for s in found.values() if relevance(s, words) > 0),
        key=lambda s: (-relevance(s, words), s.name),
    )
    return ranked[:limit]
