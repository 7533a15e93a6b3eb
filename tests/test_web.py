"""web_search and web_fetch against a fake web on loopback (tests/fixtures/fake_web.py): the
real clients (httpx, the ollama client) talk to it over HTTP, through the orchestrator."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.runtime import Profile, Runtime
from diana.core.storage.execution_log import recent_calls
from diana.core.system.telemetry import SECRET_VALUES
from diana.core.tools.web import NOT_CONFIGURED, QUOTED

from .conftest import stepping_clock
from .fixtures.fake_web import FakeWeb

HOW_TO_ALLOW = 'set "web": {"allow_private": true} or list the host in "web.allow_hosts"'


def write_web(config_dir: Path, **web: Any) -> None:
    settings = {"obsidian": {"vault": str(config_dir / "vault")}, "web": web}
    (config_dir / "settings.json").write_text(json.dumps(settings))


async def opened(config_dir: Path, data_dir: Path, **web: Any) -> Runtime:
    write_web(config_dir, **web)
    return await Runtime.open(
        Profile.APP.but(servers="none", chat=False, share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


@pytest.fixture
def web() -> Any:
    with FakeWeb() as fake:
        yield fake


def searxng(web: FakeWeb, **more: Any) -> dict[str, Any]:
    """SearXNG at the fake; its own pages reachable (they are on loopback)."""
    return {"backend": "searxng", "url": web.url, "allow_hosts": [f"127.0.0.1:{web.port}"], **more}


@pytest.fixture
async def runtime(config_dir: Path, data_dir: Path, web: FakeWeb) -> AsyncIterator[Runtime]:
    async with await opened(config_dir, data_dir, **searxng(web, timeout=2)) as runtime:
        yield runtime


async def test_web_search_asks_searxngs_json_api_and_gives_title_url_snippet_and_date(
    runtime: Runtime, web: FakeWeb
) -> None:
    result = await runtime.orchestrator.execute(
        "web_search", {"query": "  capital of\nFrance ", "max_results": 3}
    )
    assert result.success, result.error
    assert web.searched() == ["capital of France"]
    [(_, path, _, _)] = [r for r in web.requests if r[1].startswith("/search")]
    assert "format=json" in path
    data = result.data
    assert (data["query"], data["backend"], data["note"]) == (
        "capital of France",
        "searxng",
        QUOTED,
    )
    # The javascript: result is dropped; at most max_results are given.
    assert data["results"] == [
        {
            "title": "Paris - Wikipedia",
            "url": "https://en.wikipedia.org/wiki/Paris",
            "snippet": "Paris is the capital and largest city of France.",
            "date": "2026-10-01T00:00:00",
        },
        {
            "title": "France | Britannica",
            "url": "https://www.britannica.com/place/France",
            "snippet": "France, officially French Republic, country of northwestern Europe. "
            "Its capital is Paris.",
        },
        {
            "title": "Paris travel guide",
            "url": "https://www.example.org/paris",
            "snippet": "Things to do in the French capital.",
        },
    ]
    await runtime.execution_log.flush()
    [row] = await recent_calls(runtime.db, limit=1)
    assert (row.tool, row.status) == ("web_search", "succeeded")


async def test_a_title_with_terminal_escapes_is_shown_without_them(
    runtime: Runtime, web: FakeWeb
) -> None:
    web.index["escapes"] = [
        {"title": "Fine\x1b]0;pwned\x07 title\x1b[2J", "url": "https://a.example/", "content": "x"}
    ]
    result = await runtime.orchestrator.execute("web_search", {"query": "escapes"})
    assert result.data["results"][0]["title"] == "Fine]0;pwned title[2J"


async def test_bad_arguments_name_the_field(runtime: Runtime) -> None:
    result = await runtime.orchestrator.execute("web_search", {"query": "x", "max_results": 50})
    assert not result.success and result.error_code == "invalid_arguments"
    assert "max_results" in (result.error or "")


async def test_web_fetch_gives_a_pages_main_text_as_markdown_with_title_and_final_url(
    runtime: Runtime, web: FakeWeb
) -> None:
    page = f"{web.url}/pages/paris"
    result = await runtime.orchestrator.execute(
        "web_fetch", {"url": f"{web.url}/redirect?to=/pages/paris"}
    )
    assert result.success, result.error
    data = result.data
    assert (data["url"], data["title"], data["content_type"]) == (
        page,
        "Paris - Wikipedia",
        "text/html",
    )
    content = data["content"]
    assert content.startswith("# Paris\n\nParis is the capital and largest city of France.")
    assert "## Etymology" in content and "- Area: 105.4 km²" in content
    # Navigation, scripts, styles and the footer are not the page's content.
    for boilerplate in ("Random article", "tracking", "color:red", "Privacy policy"):
        assert boilerplate not in content
    assert data["note"] == QUOTED and data["truncated"] is False


async def test_web_fetch_cuts_at_max_chars_with_a_marker(runtime: Runtime, web: FakeWeb) -> None:
    result = await runtime.orchestrator.execute(
        "web_fetch", {"url": f"{web.url}/pages/paris", "max_chars": 200}
    )
    data = result.data
    assert data["truncated"] is True and data["chars"] > 200
    cut = data["chars"] - 200
    assert data["content"].endswith(
        f"[… cut: {cut} more characters; call web_fetch with a larger max_chars]"
    )


async def test_web_fetch_reads_text_and_refuses_what_is_not_text(
    runtime: Runtime, web: FakeWeb
) -> None:
    text = await runtime.orchestrator.execute("web_fetch", {"url": f"{web.url}/pages/latin1"})
    assert text.data["content"] == "Café à Paris"
    image = await runtime.orchestrator.execute("web_fetch", {"url": f"{web.url}/pages/photo.png"})
    assert image.error == (
        f"web_fetch reads text pages only; {web.url}/pages/photo.png is image/png"
    )


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:{port}/pages/paris", "a loopback address: 127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "the cloud metadata address: 169.254.169.254"),
        ("http://localhost:{port}/pages/paris", "a loopback address: localhost (127.0.0.1)"),
        ("http://10.1.2.3/", "a private address: 10.1.2.3"),
        ("http://[::ffff:192.168.1.1]/", "a private address: ::ffff:192.168.1.1"),
        ("http://[64:ff9b::a9fe:a9fe]/", "the cloud metadata address: 64:ff9b::a9fe:a9fe"),
        ("http://[fe80::1]/", "a link-local address: fe80::1"),
        ("http://0.0.0.0:{port}/", "an unspecified address: 0.0.0.0"),
    ],
)
async def test_web_fetch_refuses_addresses_of_this_machine_and_its_network(
    config_dir: Path, data_dir: Path, web: FakeWeb, url: str, said: str
) -> None:
    async with await opened(config_dir, data_dir, backend="searxng", url=web.url) as runtime:
        result = await runtime.orchestrator.execute("web_fetch", {"url": url.format(port=web.port)})
    assert result.error_code == "invalid_arguments"
    assert result.error is not None and result.error.startswith(f"web_fetch does not reach {said}")
    assert result.error.endswith(HOW_TO_ALLOW)
    assert not [r for r in web.requests if r[1].startswith("/pages")]  # nothing was sent


async def test_a_redirect_to_a_private_address_is_refused_after_the_redirect(
    runtime: Runtime, web: FakeWeb
) -> None:
    # The fake is allowed (as a public site would be); where it redirects is checked again.
    result = await runtime.orchestrator.execute(
        "web_fetch", {"url": f"{web.url}/redirect?to=http://127.0.0.2:{web.port}/pages/paris"}
    )
    assert result.error == (
        f"redirected to http://127.0.0.2:{web.port}/pages/paris: web_fetch does not reach "
        f"a loopback address: 127.0.0.2; {HOW_TO_ALLOW}"
    )
    assert [r[1] for r in web.requests] == [f"/redirect?to=http://127.0.0.2:{web.port}/pages/paris"]


async def test_schemes_credentials_and_redirect_loops_are_refused_in_one_line(
    runtime: Runtime, web: FakeWeb
) -> None:
    said = {}
    for url in (
        "file:///etc/passwd",
        "gopher://example.org/",
        f"http://user:pw@127.0.0.1:{web.port}/pages/paris",
        f"{web.url}/loop/0",
    ):
        said[url] = (await runtime.orchestrator.execute("web_fetch", {"url": url})).error
    assert said == {
        "file:///etc/passwd": "web_fetch reads http:// and https:// pages only, not file: "
        "(file:///etc/passwd)",
        "gopher://example.org/": "web_fetch reads http:// and https:// pages only, not gopher: "
        "(gopher://example.org/)",
        f"http://user:pw@127.0.0.1:{web.port}/pages/paris": "web_fetch does not send "
        "credentials written in a URL",
        f"{web.url}/loop/0": f"{web.url}/loop/0: more than 5 redirects",
    }


async def test_allow_private_lets_web_fetch_reach_this_machine(
    config_dir: Path, data_dir: Path, web: FakeWeb
) -> None:
    async with await opened(
        config_dir, data_dir, backend="searxng", url=web.url, allow_private=True
    ) as runtime:
        result = await runtime.orchestrator.execute(
            "web_fetch", {"url": f"http://localhost:{web.port}/pages/notes.txt"}
        )
    assert result.data["content"] == "Plain notes: Paris, 2.1 million."


async def test_a_huge_page_is_read_up_to_the_cap_and_a_slow_one_times_out(
    config_dir: Path, data_dir: Path, web: FakeWeb
) -> None:
    web.delay = 30
    async with await opened(
        config_dir, data_dir, **searxng(web, timeout=2, max_page_mb=0.5)
    ) as runtime:
        big, slow = await asyncio.gather(
            runtime.orchestrator.execute("web_fetch", {"url": f"{web.url}/big?mb=50"}),
            runtime.orchestrator.execute("web_fetch", {"url": f"{web.url}/slow"}),
        )
    assert big.success, big.error
    assert big.data["page_cut"] == "the page is larger than 0.5 MB: only its start was read"
    assert big.data["title"] == "Big" and "Paris is big." in big.data["content"]
    assert slow.error == f"{web.url}/slow did not answer within 2 s"


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("500", "SearXNG at {url} answered HTTP 500"),
        ("garbage", "SearXNG at {url} did not answer JSON (is the URL SearXNG's?)"),
        (
            "403",
            "SearXNG at {url} refused a JSON search (HTTP 403): add json to search.formats "
            "in its settings.yml",
        ),
        ("slow", "SearXNG at {url} did not answer within 1 s"),
    ],
)
async def test_a_misbehaving_searxng_is_one_clear_line(
    config_dir: Path, data_dir: Path, web: FakeWeb, mode: str, said: str
) -> None:
    web.searxng = mode
    async with await opened(config_dir, data_dir, **searxng(web, timeout=1)) as runtime:
        result = await runtime.orchestrator.execute("web_search", {"query": "paris"})
        [health] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
    assert (result.error_code, result.error) == ("tool_execution_failed", said.format(url=web.url))
    assert health.status == "unhealthy" and health.message == said.format(url=web.url)


async def test_an_unreachable_searxng_is_named_and_the_agent_shows_it(
    config_dir: Path, data_dir: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with await opened(config_dir, data_dir, backend="searxng", url=url) as runtime:
        [health] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
        result = await runtime.orchestrator.execute("web_search", {"query": "paris"})
    assert health.status == "unhealthy"
    assert health.message == f"SearXNG at {url} is not reachable (ConnectError)"
    assert result.error == f"SearXNG at {url} is not reachable (ConnectError) — is it running?"


async def test_a_reachable_searxng_is_healthy_and_named(runtime: Runtime, web: FakeWeb) -> None:
    [health] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
    assert (health.status, health.message) == ("healthy", f"SearXNG at {web.url}")


async def test_ollamas_web_api_searches_and_fetches_with_the_key_kept_secret(
    config_dir: Path, data_dir: Path, web: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIANA_TEST_WEB_KEY", web.api_key)
    async with await opened(
        config_dir, data_dir, backend="ollama", url=web.url, api_key="${DIANA_TEST_WEB_KEY}"
    ) as runtime:
        [before] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
        found = await runtime.orchestrator.execute(
            "web_search", {"query": "capital of France", "max_results": 2}
        )
        page = await runtime.orchestrator.execute(
            "web_fetch", {"url": "https://en.wikipedia.org/wiki/Paris"}
        )
        [after] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
        await runtime.execution_log.flush()
        rows = await recent_calls(runtime.db, limit=5)
    assert found.success, found.error
    assert [r["url"] for r in found.data["results"]] == [
        "https://en.wikipedia.org/wiki/Paris",
        "https://www.britannica.com/place/France",
    ]
    assert found.data["backend"] == "ollama"
    assert page.data["title"] == "Paris - Wikipedia"
    assert page.data["content"].startswith("# Paris")
    posted = [
        (path, json.loads(body)) for method, path, _h, body in web.requests if method == "POST"
    ]
    assert posted == [
        ("/api/web_search", {"query": "capital of France", "max_results": 2}),
        ("/api/web_fetch", {"url": "https://en.wikipedia.org/wiki/Paris"}),
    ]
    assert {h["authorization"] for m, _p, h, _b in web.requests if m == "POST"} == {
        f"Bearer {web.api_key}"
    }
    # Nothing is sent to a hosted service to check its health: known once it was used.
    assert before.status == "unknown" and after.status == "healthy"
    assert SECRET_VALUES.mask(f"key {web.api_key}") == "key ***"
    assert all(web.api_key not in json.dumps(row.__dict__, default=str) for row in rows)


async def test_ollamas_web_api_without_a_key_says_where_to_get_one(
    config_dir: Path, data_dir: Path, web: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    async with await opened(config_dir, data_dir, backend="ollama", url=web.url) as runtime:
        result = await runtime.orchestrator.execute("web_search", {"query": "paris"})
    assert result.error == (
        "Ollama's web search needs an API key: set OLLAMA_API_KEY or web.api_key "
        "(https://ollama.com/settings/keys)"
    )
    assert web.requests == []


async def test_a_wrong_ollama_key_is_named(config_dir: Path, data_dir: Path, web: FakeWeb) -> None:
    async with await opened(
        config_dir, data_dir, backend="ollama", url=web.url, api_key="wrong-key-000"
    ) as runtime:
        result = await runtime.orchestrator.execute("web_search", {"query": "paris"})
    assert result.error == (
        f"Ollama's web API at {web.url} refused the API key (HTTP 401): check OLLAMA_API_KEY "
        "or web.api_key"
    )


async def test_with_no_backend_nothing_leaves_and_the_tools_say_how_to_configure_one(
    config_dir: Path, data_dir: Path
) -> None:
    async with await opened(config_dir, data_dir) as runtime:
        result = await runtime.orchestrator.execute("web_search", {"query": "paris"})
        fetched = await runtime.orchestrator.execute("web_fetch", {"url": "https://example.org"})
        offered = [d.name for d in runtime.orchestrator.model_tools()]
        [health] = [h for h in await runtime.orchestrator.health() if h.agent_id == "web"]
    assert result.error == fetched.error == NOT_CONFIGURED
    assert "web_search" not in offered and "web_fetch" not in offered
    assert "get_current_time" in offered
    assert (health.status, health.message) == ("healthy", "off: no web backend (settings.json web)")


@pytest.mark.parametrize(
    ("web_settings", "said"),
    [
        (
            {"backend": "searxng"},
            'web: backend "searxng" needs "url": the address of the instance, '
            "e.g. http://127.0.0.1:8888",
        ),
        ({"backend": "bing"}, "web.backend: Input should be 'searxng', 'ollama' or 'none'"),
        ({"url": "ftp://x"}, "web.url: 'ftp://x' is not an http:// or https:// address"),
    ],
)
async def test_malformed_web_settings_name_the_file_and_field(
    config_dir: Path, data_dir: Path, web_settings: dict[str, Any], said: str
) -> None:
    from diana.core.config.settings import ConfigError

    write_web(config_dir, **web_settings)
    with pytest.raises(ConfigError) as raised:
        await Runtime.open(
            Profile.APP.but(servers="none", chat=False, share=False, watch=False),
            config_dir,
            data_dir,
        )
    assert str(raised.value) == f"{config_dir / 'settings.json'}: {said}"


async def test_a_page_with_no_readable_text_says_so(runtime: Runtime, web: FakeWeb) -> None:
    web.pages["blank"] = ("text/html", b"<html><body><script>var x = 1;</script></body></html>")
    result = await runtime.orchestrator.execute("web_fetch", {"url": f"{web.url}/pages/blank"})
    assert result.success and result.data["content"] == "[the page has no readable text]"
