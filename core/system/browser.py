"""Opening a web page or a file in the person's browser: the one place diana does it.

A URL that comes from outside (a server asking a person to open a page, a sign-in page) is
opened only if it is an http or https URL with a host and nothing in it a browser or a shell
could read otherwise (spaces, control characters). It is handed over as rebuilt from its
parts, so it always starts with its scheme: never as something the browser could take for one
of its options (``--gpu-launcher=…``), whatever ``$BROWSER`` names. A file diana keeps is opened
by its absolute ``file://`` URI. The browser is the one ``$BROWSER`` names, else the system's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..content.text import size_text, utf8_size

WEB_SCHEMES = ("http", "https")
URL_LIMIT = 8 * 1024  # bytes: longer is no page a person is asked to open
_NOT_IN_A_URL = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")


class UnsafeURL(ValueError):
    """A URL diana will not open; the message says why, naming the scheme."""


def web_url(url: str) -> str:
    """``url`` as it may be opened: an http or https URL with a host, rebuilt from its parts
    (the scheme in lower case). UnsafeURL says what is wrong with any other."""
    if utf8_size(url) > URL_LIMIT:
        raise UnsafeURL(
            f"the URL is {size_text(utf8_size(url))}; diana opens at most {size_text(URL_LIMIT)}"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeURL(f"{url!r} cannot be read as a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in WEB_SCHEMES:
        said = f"a {scheme}: URL" if scheme else f"{url[:80]!r}, which has no scheme,"
        raise UnsafeURL(f"{said} is not opened: diana opens only http and https URLs")
    if _NOT_IN_A_URL.search(url):
        raise UnsafeURL(f"{url[:80]!r} holds a space or a control character, so it is not opened")
    if not parts.hostname:
        raise UnsafeURL(f"{url[:80]!r} names no host, so it is not opened")
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


async def open_url(url: str) -> bool:
    """Open a web page in the browser; UnsafeURL (nothing opened) unless ``web_url`` takes
    it. False if no browser opened it."""
    checked = web_url(url)
    return await _launch(lambda: checked)


async def open_file(path: Path) -> bool:
    """Open a file diana keeps in the browser (or the viewer ``$BROWSER`` names). False if
    it is not a regular file or nothing opened it."""
    return await _launch(lambda: path.resolve().as_uri() if path.is_file() else None)


async def _launch(target: Callable[[], str | None]) -> bool:
    """Hand what ``target`` gives to the browser, in a thread of its own: a browser named
    by $BROWSER is waited for until it exits, and a daemon thread never holds up diana's
    exit. Only an http, https or file URL is handed over: never an option."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[bool] = loop.create_future()

    def settle(result: bool | BaseException) -> None:
        if opened.done():
            return
        if isinstance(result, BaseException):
            opened.set_exception(result)
        else:
            opened.set_result(result)

    def run() -> None:
        result: bool | BaseException
        try:
            url = target()
            if url is None:
                result = False
            elif not url.startswith(("http://", "https://", "file:///")):
                result = UnsafeURL(f"{url[:80]!r} is not opened: it is no http, https or file URL")
            else:
                result = webbrowser.open(url)
        except Exception as exc:  # webbrowser.Error (no runnable browser), an unreadable file
            result = exc if isinstance(exc, UnsafeURL) else False
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=run, name="browser", daemon=True).start()
    return await opened
