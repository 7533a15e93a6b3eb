"""The web backends diana can use: a SearXNG instance (self-hosted) and Ollama's web API.

SearXNG is asked through its JSON API (``/search?q=…&format=json``); web_fetch then reads
pages itself (core/web/fetch.py). Ollama's hosted web search and fetch are asked through the
``ollama`` client's own ``web_search``/``web_fetch``, at ``https://ollama.com`` or, when the
settings name another address, there (the client's requests are sent to it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..content.http_body import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    BodyUnreadable,
    bounded_transport,
    read_body,
)
from ..content.jsontext import JSONProblem, parse_json

if TYPE_CHECKING:
    import httpx

OLLAMA_WEB = "https://ollama.com"
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a backend's answer past this, decoded, is refused
MAX_RESULTS_READ = 100  # results of one answer looked at
MAX_URL = 2048  # a result whose URL is longer is dropped (a cut URL would lead elsewhere)


class SearchFailed(Exception):
    """A backend that did not give results; one line saying why and what to do."""


@dataclass(frozen=True)
class Hit:
    title: str
    url: str
    snippet: str
    date: str | None = None


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clip(text: Any, limit: int) -> str:
    """One line of at most ``limit`` characters, with no control characters (a title is
    printed on terminals: an escape sequence in it must not reach one)."""
    value = CONTROL.sub("", " ".join(str(text or "")[: limit * 4].split()))
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _web_url(value: Any) -> str | None:
    """A result's URL if it is an http(s) one (a backend could send anything)."""
    if not isinstance(value, str) or len(value) > MAX_URL or CONTROL.search(value):
        return None
    if any(c.isspace() for c in value):
        return None
    try:
        scheme = urlsplit(value).scheme.lower()
    except ValueError:
        return None
    return value if scheme in ("http", "https") else None


def hits_of(results: Any, limit: int) -> list[Hit]:
    """The usable results of a backend's answer: each with an http(s) URL, at most ``limit``."""
    hits: list[Hit] = []
    for item in results[:MAX_RESULTS_READ] if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        url = _web_url(item.get("url"))
        if url is None or any(h.url == url for h in hits):
            continue
        date = item.get("publishedDate") or item.get("published_date")
        hits.append(
            Hit(
                title=_clip(item.get("title") or url, 300),
                url=url,
                snippet=_clip(item.get("content") or item.get("snippet"), 600),
                date=_clip(date, 40) if date else None,
            )
        )
        if len(hits) >= limit:
            break
    return hits


class SearXNG:
    name = "searxng"
    label = "SearXNG"

    def __init__(self, url: str, *, timeout: float, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"accept": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        # One client, made at the first search: its connections are kept, and making one
        # (TLS certificates loaded) costs more than a search on loopback.
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        import httpx  # loaded at the first search: a command that never searches never pays

        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout, headers={**self._headers, "accept-encoding": ACCEPT_ENCODING}
            )
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def search(self, query: str, max_results: int) -> list[Hit]:
        import httpx

        where = f"SearXNG at {self.url}"
        try:
            async with self._http().stream(
                "GET", f"{self.url}/search", params={"q": query, "format": "json"}
            ) as response:
                status = response.status_code
                body = await read_body(response, MAX_ANSWER_BYTES) if status == 200 else None
        except httpx.TimeoutException:
            raise SearchFailed(f"{where} did not answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise SearchFailed(
                f"{where} is not reachable ({type(exc).__name__}) — is it running?"
            ) from None
        except BodyTooLarge as exc:
            raise SearchFailed(f"{where} answered {exc}; nothing of it was used") from None
        except BodyUnreadable as exc:
            raise SearchFailed(f"{where} answered something unreadable: {exc}") from None
        if status == 403:
            raise SearchFailed(
                f"{where} refused a JSON search (HTTP 403): add json to search.formats in "
                "its settings.yml"
            )
        if body is None:
            raise SearchFailed(f"{where} answered HTTP {status}")
        try:
            answer = parse_json(body.data.decode("utf-8"))
        except (UnicodeDecodeError, JSONProblem):
            raise SearchFailed(f"{where} did not answer JSON (is the URL SearXNG's?)") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            raise SearchFailed(f"{where} answered JSON without a results list")
        return hits_of(answer["results"], max_results)

    async def probe(self) -> str | None:
        """None if the instance answers; else why not (nothing is searched)."""
        import httpx

        try:
            # Its status is all that counts: the body is never read.
            async with self._http().stream(
                "GET", f"{self.url}/healthz", timeout=min(self.timeout, 5)
            ) as response:
                status = response.status_code
        except httpx.HTTPError as exc:
            return f"SearXNG at {self.url} is not reachable ({type(exc).__name__})"
        if status >= 500:
            return f"SearXNG at {self.url} answered HTTP {status}"
        return None


def rebased(base: str) -> httpx.AsyncBaseTransport:
    """A transport that sends the ollama client's requests for ``https://ollama.com`` to
    ``base`` instead."""
    import httpx

    class Rebased(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self._base = httpx.URL(base)
            self._inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.host == "ollama.com":
                request.url = request.url.copy_with(
                    scheme=self._base.scheme,
                    host=self._base.host,
                    port=self._base.port,
                    path=self._base.path.rstrip("/") + request.url.path,
                )
                request.headers["host"] = request.url.netloc.decode("ascii")
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Rebased()


@dataclass(frozen=True)
class FetchedPage:
    url: str
    title: str | None
    text: str


class OllamaWeb:
    name = "ollama"
    label = "Ollama web search"

    def __init__(self, url: str | None, *, api_key: str | None, timeout: float) -> None:
        self.url = (url or OLLAMA_WEB).rstrip("/")
        self.timeout = timeout
        self._api_key = api_key

    def _client(self) -> Any:
        import ollama

        if not self._api_key:
            raise SearchFailed(
                "Ollama's web search needs an API key: set OLLAMA_API_KEY or web.api_key "
                "(https://ollama.com/settings/keys)"
            )
        import httpx

        headers = {"authorization": f"Bearer {self._api_key}"}
        inner = httpx.AsyncHTTPTransport() if self.url == OLLAMA_WEB else rebased(self.url)
        return ollama.AsyncClient(
            headers=headers,
            timeout=self.timeout,
            transport=bounded_transport(inner, MAX_ANSWER_BYTES),
        )

    async def _ask(self, method: str, *args: Any) -> Any:
        import httpx

        client = self._client()
        where = f"Ollama's web API at {self.url}"
        try:
            return await getattr(client, method)(*args)
        except (TimeoutError, httpx.TimeoutException):
            raise SearchFailed(f"{where} did not answer within {self.timeout:g} s") from None
        except ConnectionError:
            raise SearchFailed(f"{where} is not reachable") from None
        except BodyTooLarge as exc:
            raise SearchFailed(f"{where} answered {exc}; nothing of it was used") from None
        except BodyUnreadable as exc:
            raise SearchFailed(f"{where} answered something unreadable: {exc}") from None
        except Exception as exc:
            raise SearchFailed(_ollama_reason(where, exc)) from None
        finally:
            await client._client.aclose()

    async def search(self, query: str, max_results: int) -> list[Hit]:
        reply = await self._ask("web_search", query, max_results)
        results = [r.model_dump() for r in reply.results]
        return hits_of(results, max_results)

    async def fetch(self, url: str) -> FetchedPage:
        reply = await self._ask("web_fetch", url)
        return FetchedPage(url, reply.title or None, reply.content or "")

    async def close(self) -> None:
        pass  # each request's client is closed when it ends

    async def probe(self) -> str | None:
        # Nothing is sent to a hosted service only to see that it is there: its health is
        # what the last call found.
        return None


def _ollama_reason(where: str, exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    detail = " ".join(str(getattr(exc, "error", "") or exc).split())[:200]
    if status in (401, 403):
        return f"{where} refused the API key (HTTP {status}): check OLLAMA_API_KEY or web.api_key"
    if status == 429:
        return f"{where} says too many requests (HTTP 429): try again later"
    if isinstance(status, int) and status >= 0:
        return f"{where} answered HTTP {status}: {detail}"
    return f"{where} failed: {detail or type(exc).__name__}"


Backend = SearXNG | OllamaWeb
