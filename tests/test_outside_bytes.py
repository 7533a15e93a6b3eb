"""Bytes from outside — a web page, a SearXNG instance, Ollama's web API, an MCP Registry —
are counted once decoded, as they stream, and reading stops at each reader's cap: a few
kilobytes compressed (twice over) to gigabytes leave memory bounded and end in one clear
line. The commands run as a person runs them, under a 1 GiB address-space limit, against a
hostile host on 127.0.0.1 (tests/fixtures/outside_bytes.py)."""

from __future__ import annotations

import gzip
import ipaddress
import json
import resource
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from diana.core.content.http_body import BodyTooLarge, BodyUnreadable, read_body
from diana.core.runtime import Profile, Runtime
from diana.core.web.addresses import HOW_TO_ALLOW, AddressRule, Refused, why_not_public

from .commands import diana_argv
from .conftest import stepping_clock
from .fixtures.outside_bytes import BOMB_SIZE, FIELD_SIZE, OutsideBytes, bomb

MAX_URL = 2048  # the longest result URL kept
MEMORY_CAP = 1 << 30  # what a command may map: a bomb read whole needs gigabytes


@pytest.fixture
def host() -> Iterator[OutsideBytes]:
    with OutsideBytes() as fake:
        yield fake


def settings(config_dir: Path, **fields: Any) -> None:
    (config_dir / "settings.json").write_text(
        json.dumps({"obsidian": {"vault": str(config_dir / "vault")}, **fields})
    )


def capped(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`diana ARGS` under MEMORY_CAP: a reader that holds a bomb fails instead of eating the
    machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, resource.RLIM_INFINITY))

    return subprocess.run(
        diana_argv(config_dir, data_dir, *args),
        capture_output=True,
        text=True,
        timeout=90,
        preexec_fn=cap,
    )


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr[-2000:]
    return lines[0]


# -- the reader ------------------------------------------------------------------------------------


async def test_every_encoding_is_decoded_chunk_by_chunk_and_stops_at_the_cap(
    host: OutsideBytes,
) -> None:
    """Each bomb (4 GiB of spaces once decoded) is read to 1 MiB with a few MiB at most
    ever held; small bodies in every encoding read back whole."""
    async with httpx.AsyncClient() as client:
        for encodings in ("gzip", "gzip,gzip", "deflate", "gzip,deflate,gzip"):
            bomb(BOMB_SIZE, tuple(encodings.split(",")))  # made before: not counted
            tracemalloc.start()
            try:
                async with client.stream("GET", f"{host.url}/bomb/{encodings}/p") as response:
                    body = await read_body(response, 1 << 20, cut=True)
                _now, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert body.cut and body.data == b" " * (1 << 20), encodings
            assert peak < 8 << 20, f"{encodings}: {peak:,} bytes held"
            async with client.stream("GET", f"{host.url}/bomb/{encodings}/p") as response:
                with pytest.raises(BodyTooLarge, match=r"more than 1 MiB"):
                    await read_body(response, 1 << 20)

    text = b"Paris, 2.1 million. " * 500
    for encoding, data in [
        ("gzip", gzip.compress(text)),
        ("deflate", zlib.compress(text)),
        ("deflate", zlib.compress(text)[2:-4]),  # raw deflate, as some servers send it
        ("gzip, deflate", zlib.compress(gzip.compress(text))),
        ("identity", text),
    ]:
        response = httpx.Response(
            200, headers={"content-encoding": encoding}, stream=httpx.ByteStream(data)
        )
        assert (await read_body(response, 1 << 20)).data == text, encoding
    for encoding, said in [("br", "encoded as 'br'"), ("gzip", "gzip data is damaged")]:
        response = httpx.Response(
            200, headers={"content-encoding": encoding}, stream=httpx.ByteStream(b"not gzip")
        )
        with pytest.raises(BodyUnreadable, match=said):
            await read_body(response, 1 << 20)


# -- web_fetch, web_search, the registry, end to end ---------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("encodings", ["gzip,gzip", "deflate"])
def test_a_compressed_page_is_read_to_its_cap_once_decoded(
    config_dir: Path, data_dir: Path, host: OutsideBytes, encodings: str
) -> None:
    web = {"backend": "searxng", "url": host.url, "allow_private": True, "max_page_mb": 1}
    settings(config_dir, web=web)
    url = f"{host.url}/bomb/{encodings}/page"
    run = capped(config_dir, data_dir, "call", "web_fetch", "--args", json.dumps({"url": url}))
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert result["page_cut"] == "the page is larger than 1 MB: only its start was read"


@pytest.mark.processes
def test_a_compressed_searxng_answer_is_refused_at_its_cap(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    url = f"{host.url}/bomb/gzip"
    settings(config_dir, web={"backend": "searxng", "url": url})
    run = capped(config_dir, data_dir, "call", "web_search", "--args", '{"query": "paris"}')
    assert run.returncode == 1
    assert one_line(run) == (
        f"diana: SearXNG at {url} answered more than 8 MiB; nothing of it was used"
    )


@pytest.mark.processes
def test_a_compressed_answer_of_ollamas_web_api_is_refused_at_its_cap(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    url = f"{host.url}/bomb/gzip,gzip"
    settings(config_dir, web={"backend": "ollama", "url": url, "api_key": "ow-key-1234"})
    run = capped(config_dir, data_dir, "call", "web_search", "--args", '{"query": "paris"}')
    assert run.returncode == 1
    assert one_line(run) == (
        f"diana: Ollama's web API at {url} answered more than 8 MiB; nothing of it was used"
    )


@pytest.mark.processes
def test_a_registry_bomb_and_a_registry_redirecting_to_itself_are_one_clear_line(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    bomb = f"{host.url}/bomb/gzip,gzip"
    settings(config_dir, registry={"url": bomb})
    run = capped(config_dir, data_dir, "servers", "search", "time")
    assert run.returncode == 1
    assert one_line(run) == (
        f"diana: the registry {bomb} answered more than 4 MiB; nothing of it was used"
    )
    loop = f"{host.url}/loop"
    settings(config_dir, registry={"url": loop})
    run = capped(config_dir, data_dir, "servers", "search", "time")
    assert run.returncode == 1
    assert one_line(run) == f"diana: the registry {loop} redirected too many times"


# -- the smaller holes ----------------------------------------------------------------------------


async def open_web(config_dir: Path, data_dir: Path, **web: Any) -> Runtime:
    settings(config_dir, web=web)
    return await Runtime.open(
        Profile.APP.but(servers="none", chat=False, share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


async def test_a_page_slower_than_5_s_is_read_within_the_configured_timeout(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    host.slow = 5.5  # past httpx's own default of 5 s, well within web.timeout
    async with await open_web(
        config_dir, data_dir, backend="searxng", url=host.url, allow_private=True, timeout=30
    ) as runtime:
        result = await runtime.orchestrator.execute("web_fetch", {"url": f"{host.url}/slow/p"})
    assert result.success, result.error
    assert result.data["title"] == "Slow but here"


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("fec0::1", "a site-local address"),
        ("feff:ffff::1", "a site-local address"),
        ("3fff::1", "a reserved address"),  # documentation (RFC 9637)
        ("::ffff:10.0.0.1", "a private address"),  # IPv4-mapped
        ("::ffff:0:7f00:1", "a reserved address"),  # IPv4-translated (::ffff:0:0/96)
        ("::127.0.0.1", "a reserved address"),  # IPv4-compatible
        ("2002:7f00:1::1", "a loopback address"),  # 6to4
        ("64:ff9b::a9fe:a9fe", "the cloud metadata address"),  # NAT64
        ("64:ff9b:1::a00:1", "a private address"),  # local-use NAT64
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a private address"),  # Teredo
        ("2001:db8::1", "a private address"),
        ("fc00::1", "a private address"),
        ("fe80::1", "a link-local address"),
        ("100::1", "a private address"),  # discard
        ("5f00::1", "a reserved address"),
        ("100.64.0.1", "a reserved address"),  # shared (CGNAT)
        ("192.0.0.8", "a reserved address"),  # IPv4 dummy address
        ("192.88.99.1", "a reserved address"),  # the old 6to4 relay
        ("100:0:0:1::1", "a reserved address"),  # IPv6 dummy prefix
        ("198.18.0.1", "a private address"),
        ("240.0.0.1", "a private address"),
        ("2606:4700::1111", None),
        ("2002:808:808::1", None),  # 6to4 of a public address
        ("::ffff:8.8.8.8", None),
        ("8.8.8.8", None),
    ],
)
def test_every_address_the_internet_cannot_reach_is_refused(address: str, kind: str | None) -> None:
    assert why_not_public(ipaddress.ip_address(address)) == kind


async def test_web_fetch_refuses_a_site_local_address_written_or_resolved() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["2606:4700::1111", "fec0::5"]  # one public address is not enough

    rule = AddressRule()
    for url, named in [
        ("http://[fec0::1]/", "fec0::1"),
        ("http://intranet.example/", "intranet.example (fec0::5)"),
    ]:
        with pytest.raises(Refused) as refused:
            await rule.target(url, resolve)
        assert str(refused.value) == (
            f"web_fetch does not reach a site-local address: {named}; {HOW_TO_ALLOW}"
        )


async def test_huge_searxng_fields_and_a_flood_of_results_are_bounded(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    url = f"{host.url}/fields"
    async with await open_web(config_dir, data_dir, backend="searxng", url=url) as runtime:
        result = await runtime.orchestrator.execute(
            "web_search", {"query": "paris", "max_results": 20}
        )
    assert result.success, result.error
    hits = result.data["results"]
    assert len(hits) == 20
    assert all(len(h["url"]) <= MAX_URL for h in hits)  # the 1 MiB URL is dropped, not cut
    assert hits[0]["url"] == "https://example.org/big"
    assert len(hits[0]["title"]) == 300 and len(hits[0]["snippet"]) == 600
    assert len(json.dumps(result.data)) < 20_000 < FIELD_SIZE


@pytest.mark.processes
def test_an_mcp_servers_sign_in_metadata_bomb_ends_the_attempt_in_one_clear_line(
    config_dir: Path, data_dir: Path, host: OutsideBytes
) -> None:
    """The MCP connection's HTTP client, which its OAuth sign-in uses too, reads every answer
    but an event stream through the same cap: here the resource metadata a 401 points to."""
    url = f"{host.url}/signin/mcp"
    entry = {"url": url, "timeout": 5}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    run = capped(config_dir, data_dir, "servers")
    assert run.returncode == 1, run.stderr[-2000:]
    [row] = [line for line in run.stdout.splitlines() if line.startswith("far ")]
    assert row.split()[1] == "error"
    assert row.endswith(f"{url} answered more than 64 MiB")
    assert any("/bomb/gzip,gzip/.well-known/" in path for path in host.requests)


PROBE = """
import asyncio, resource, sys
from diana.core.web.search import SearXNG
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))
async def main():
    searxng = SearXNG(sys.argv[1], timeout=10)
    try:
        print(await searxng.probe())
    finally:
        await searxng.close()
asyncio.run(main())
"""


@pytest.mark.processes
def test_a_searxng_health_check_never_reads_a_compressed_body(host: OutsideBytes) -> None:
    """Its status is all a health check looks at (here 200: healthy)."""
    url = f"{host.url}/bomb/gzip,gzip"
    run = subprocess.run(
        [sys.executable, "-c", PROBE, url], capture_output=True, text=True, timeout=60
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, "None\n", "")
    assert host.requests == ["/bomb/gzip,gzip/healthz"]
