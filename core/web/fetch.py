"""web_fetch's own fetching: one page, safely, as readable text.

Only http and https, only addresses the AddressRule allows (checked for the first URL and
again for every redirect, each request sent to the address that was checked), at most
MAX_REDIRECTS redirects, at most ``max_bytes`` read once decoded (the rest is never
downloaded, nor decoded), within one deadline for the whole fetch, and only text-like
content. HTML is made readable text (Markdown: headings, lists, tables, links) by
trafilatura, which keeps a page's main content and drops its navigation, scripts and
boilerplate.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

if TYPE_CHECKING:
    import httpx

from ..content.http_body import BodyUnreadable, read_body
from .addresses import AddressRule, Refused, Resolver, Target, system_resolver

MAX_REDIRECTS = 5
USER_AGENT = "DIANA web_fetch (a local assistant reading one page for its user)"
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-")
HTML_TYPES = ("text/html", "application/xhtml+xml")


class FetchFailed(Exception):
    """A page that could not be fetched; one line saying why."""


@dataclass(frozen=True)
class Page:
    url: str  # the final URL, after redirects
    title: str | None
    text: str  # readable text (Markdown for HTML)
    content_type: str
    bytes_read: int
    cut_at_bytes: int | None  # the page was larger: only this much was read


def text_like(content_type: str) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    return (
        not kind
        or kind.startswith("text/")
        or kind in HTML_TYPES
        or kind.startswith(TEXT_TYPES)
        or kind.endswith(("+json", "+xml"))
    )


class Fetcher:
    def __init__(
        self,
        rule: AddressRule,
        *,
        timeout: float,
        max_bytes: int,
        resolve: Resolver = system_resolver,
    ) -> None:
        self.rule = rule
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._resolve = resolve
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Every request goes to a checked address: proxies from the environment would
        # resolve the name themselves, so they are not used. One client for every fetch.
        import httpx  # loaded at the first fetch: a command that never fetches never pays

        if self._client is None:
            # httpx's own 5 s would cut short a page the settings give longer to answer.
            self._client = httpx.AsyncClient(
                trust_env=False, follow_redirects=False, timeout=self.timeout
            )
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def fetch(self, url: str) -> Page:
        """The page at ``url`` (Refused or FetchFailed, one line each, otherwise). The
        deadline is for fetching; making the text of what was read (at most max_bytes) is
        not cut short."""
        try:
            async with asyncio.timeout(self.timeout):
                final, content_type, encoding, data, cut = await self._download(url)
        except TimeoutError:
            raise FetchFailed(f"{url} did not answer within {self.timeout:g} s") from None
        try:
            title, text = await asyncio.to_thread(readable, data, content_type, encoding)
        except Exception as exc:  # a page no parser makes sense of: said, never a traceback
            raise FetchFailed(
                f"{final}: the page could not be read as text ({type(exc).__name__})"
            ) from None
        if not text.strip():
            text = "[the page has no readable text]"
        return Page(final, title, text, content_type.split(";")[0].strip(), len(data), cut)

    async def _download(self, url: str) -> tuple[str, str, str | None, bytes, int | None]:
        import httpx

        asked = url
        client = self._http()
        for hop in range(MAX_REDIRECTS + 1):
            try:
                target = await self.rule.target(url, self._resolve)
            except Refused as exc:
                raise Refused(f"redirected to {url}: {exc}" if hop else str(exc)) from None
            try:
                async with client.stream(**_request(target)) as response:
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        if not location:
                            raise FetchFailed(f"{url} redirects without saying where")
                        url = urljoin(url, location)
                        continue
                    return (url, *await self._read(target, response))
            except httpx.HTTPError as exc:
                raise FetchFailed(f"cannot fetch {url}: {_reason(exc)}") from None
        raise FetchFailed(f"{asked}: more than {MAX_REDIRECTS} redirects")

    async def _read(
        self, target: Target, response: httpx.Response
    ) -> tuple[str, str | None, bytes, int | None]:
        url = target.url
        if response.status_code >= 400:
            raise FetchFailed(f"{url} answered HTTP {response.status_code}")
        content_type = response.headers.get("content-type", "")
        if not text_like(content_type):
            raise FetchFailed(f"web_fetch reads text pages only; {url} is {content_type}")
        # Compression is not asked for; a server that compresses all the same is read
        # decoded, so the cap holds for what the page really is.
        try:
            body = await read_body(response, self.max_bytes, cut=True)
        except BodyUnreadable as exc:
            raise FetchFailed(f"{url} cannot be read: {exc}") from None
        data = body.data
        cut = self.max_bytes if body.cut else None
        if not content_type and b"\x00" in data[:1024]:
            raise FetchFailed(f"web_fetch reads text pages only; {url} is binary")
        return content_type, response.encoding, data, cut


def _request(target: Target) -> dict[str, Any]:
    return {
        "method": "GET",
        "url": target.pinned_url(),
        "headers": {
            "host": target.host_header,
            "user-agent": USER_AGENT,
            "accept": "text/html,text/plain;q=0.9,*/*;q=0.5",
            "accept-encoding": "identity",
        },
        # The certificate is checked against the name, not the address it was sent to.
        "extensions": {"sni_hostname": target.host} if target.scheme == "https" else {},
    }


def _reason(exc: httpx.HTTPError) -> str:
    import httpx

    text = str(exc).strip()
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect ({text or 'refused'})"
    return text or type(exc).__name__


def readable(data: bytes, content_type: str, encoding: str | None) -> tuple[str | None, str]:
    """The title and readable text of a page's bytes."""
    kind = content_type.split(";")[0].strip().lower()
    looks_html = data.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))
    if kind in HTML_TYPES or (not kind and looks_html):
        return html_text(data)
    return None, data.decode(encoding or "utf-8", errors="replace").strip()


def html_text(data: bytes) -> tuple[str | None, str]:
    import trafilatura  # loaded at the first page: a start-up that fetches nothing never pays

    text = trafilatura.extract(
        data,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_formatting=True,
        favor_recall=True,
        deduplicate=False,
    )
    if not text:  # no main content found (a short or unusual page): all of its text
        text = trafilatura.html2txt(data) or ""
    return page_title(data), _tidy(text)


def page_title(data: bytes) -> str | None:
    """The page's <title>, if it has one."""
    from lxml import etree, html  # trafilatura's own parser

    try:
        found = html.fromstring(data).findtext(".//title")
    except (ValueError, TypeError, etree.LxmlError):
        return None
    title = " ".join((found or "").split())
    return title[:300] or None


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip()


__all__ = ["FetchFailed", "Fetcher", "Page", "Refused", "readable"]
