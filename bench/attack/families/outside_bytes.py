"""The attack bench's family of `outside_bytes_cases()`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..cases import FIXTURES, Case, Ctx, Run, SetupFailed, last_line
from ..configs import base, settings_for, write_json
from .server_requests import names_a_size


def outside_bytes_cases() -> list[Case]:
    """Compression bombs (a few KB that decode to 4 GiB, gzip, deflate, gzip of gzip) from a
    page, SearXNG, Ollama's web API, an MCP Registry and an MCP server's sign-in; a registry
    that redirects to itself; a page whose headers take 6 s (web.timeout is 30 s); site-local
    IPv6; SearXNG results with megabyte fields. The host is tests/fixtures/outside_bytes.py,
    on 127.0.0.1 in this process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("outside_bytes", FIXTURES / "outside_bytes.py")
    assert spec is not None and spec.loader is not None
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    url = fixture.OutsideBytes().start().url  # a daemon thread: it ends with the bench

    def settings(**fields: Any) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx)
            write_json(ctx.config / "settings.json", {**settings_for(ctx), **fields})

        return setup

    def web(**fields: Any) -> Callable[[Ctx], object]:
        return settings(web={"backend": "searxng", "url": url, "allow_private": True, **fields})

    def fetch(target: str) -> list[str]:
        return ["call", "web_fetch", "--args", json.dumps({"url": target})]

    search = ["call", "web_search", "--args", '{"query": "paris", "max_results": 20}']

    def printed(text: bytes) -> Callable[[Ctx, Run], list[str]]:
        def verify(ctx: Ctx, run: Run) -> list[str]:
            return [] if text in run.out else [f"not read as it should be: {last_line(run.err)}"]

        return verify

    def printed_little(ctx: Ctx, run: Run) -> list[str]:
        size = len(run.out) + len(run.err)
        return [f"printed {size:,} bytes of search results"] if size > 64 << 10 else []

    def row_names_a_size(ctx: Ctx, run: Run) -> list[str]:
        if re.search(rb"answered more than \d+ MiB", run.out):
            return []
        return [f"the server's row does not name the limit: {last_line(run.out)}"]

    def site_local(target: str) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            # A diana that would send the request is not run: nothing leaves this machine.
            import ipaddress

            from diana.core.web.addresses import why_not_public

            if why_not_public(ipaddress.ip_address("fec0::1")) is None:
                raise SetupFailed(f"this diana would send a request to {target}: not tried")
            settings(web={"backend": "searxng", "url": url})(ctx)

        return setup

    cut = printed(b"only its start was read")
    cases = [
        Case(
            "outside bytes",
            f"web_fetch a page of {encodings} bomb",
            fetch(f"{url}/bomb/{encodings}/page"),
            expect=(1,),
            ok=(0,),
            setup=web(max_page_mb=1),
            verify=cut,
            short=short,
        )
        for encodings, short in [
            ("gzip,gzip", True),
            ("gzip", False),
            ("deflate", False),
            ("gzip,gzip,gzip", False),
        ]
    ]
    cases += [
        Case(
            "outside bytes",
            f"web_search at a SearXNG answering a {encodings} bomb",
            search,
            expect=(1,),
            setup=web(url=f"{url}/bomb/{encodings}"),
            verify=names_a_size,
            short=short,
        )
        for encodings, short in [("gzip", False), ("gzip,gzip", False), ("deflate", False)]
    ]
    cases += [
        Case(
            "outside bytes",
            "web_search at Ollama's web API answering a gzip,gzip bomb",
            search,
            expect=(1,),
            setup=settings(
                web={"backend": "ollama", "url": f"{url}/bomb/gzip,gzip", "api_key": "ow-k-1"}
            ),
            verify=names_a_size,
        ),
        Case(
            "outside bytes",
            "servers search at a registry answering a gzip,gzip bomb",
            ["servers", "search", "time"],
            expect=(1,),
            setup=settings(registry={"url": f"{url}/bomb/gzip,gzip"}),
            verify=names_a_size,
        ),
        Case(
            "outside bytes",
            "servers search at a registry answering a deflate bomb",
            ["servers", "search", "time"],
            expect=(1,),
            setup=settings(registry={"url": f"{url}/bomb/deflate"}),
            verify=names_a_size,
        ),
        Case(
            "outside bytes",
            "servers search at a registry redirecting to itself",
            ["servers", "search", "time"],
            expect=(1,),
            setup=settings(registry={"url": f"{url}/loop"}),
        ),
        Case(
            "outside bytes",
            "servers: an MCP server whose sign-in metadata is a gzip,gzip bomb",
            ["servers"],
            expect=(1,),
            setup=lambda ctx: base(
                ctx, servers={"far": {"url": f"{url}/signin/mcp", "timeout": 5}}
            ),
            quiet_ok=True,
            verify=row_names_a_size,
        ),
        Case(
            "outside bytes",
            "web_fetch a page whose headers take 6 s (web.timeout 30 s)",
            fetch(f"{url}/slow/page"),
            expect=(1,),
            ok=(0,),
            setup=web(timeout=30),
            verify=printed(b"Slow but here"),
        ),
        Case(
            "outside bytes",
            "web_search at a SearXNG with 1 MiB titles, URLs, snippets and 5,000 results",
            search,
            expect=(1,),
            ok=(0,),
            setup=web(url=f"{url}/fields"),
            verify=printed_little,
        ),
    ]
    cases += [
        Case(
            "outside bytes",
            f"web_fetch {target} (site-local IPv6)",
            fetch(target),
            setup=site_local(target),
        )
        for target in ("http://[fec0::1]/", "http://[feff::10]:8080/x", "http://[fec0::a:1]/")
    ]
    return cases
