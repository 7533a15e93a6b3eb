"""The web tools: what diana adds to a search, and what reading a large page costs.

Run from the repository root:  .venv/bin/python bench/bench_web.py
Every figure is measured in this run; nothing is asserted.

(a) A search's round trip through the orchestrator (argument checks, the approval gate,
the web agent, httpx to SearXNG, the result shaped and logged) against the backend's own
latency: the same request to the same fake SearXNG (tests/fixtures/fake_web.py, answering
after DELAY_MS) made with httpx alone. Medians of ROUNDS sequential searches; the goal is a
ratio of at most 1.1.

(b) web_fetch of a 1 MB HTML article served on loopback: the whole call, and the making of
its readable text (trafilatura) alone, with the page in memory. Medians of FETCHES.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.runtime import Profile, Runtime  # noqa: E402
from diana.core.web.fetch import html_text  # noqa: E402

from tests.fixtures.fake_web import FakeWeb  # noqa: E402

DELAY_MS = 50.0
ROUNDS = 30
FETCHES = 5
GOAL = 1.1
WORDS = (
    "paris city france river seine museum louvre tower eiffel art history people million "
    "capital region bridge street market garden palace cathedral metro quarter"
).split()


def article(megabytes: float) -> bytes:
    """An HTML article of about ``megabytes``: navigation, a long body, a footer."""
    rng = random.Random(7)
    paragraphs: list[str] = []
    size = 0
    while size < megabytes * 1024 * 1024:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120)))
        paragraph = f"<h2>Part {len(paragraphs)}</h2><p>{text}.</p>\n"
        paragraphs.append(paragraph)
        size += len(paragraph)
    return (
        "<!doctype html><html><head><title>Paris</title></head><body>"
        "<nav><a href='/'>Home</a> <a href='/about'>About</a></nav><main><article>"
        + "".join(paragraphs)
        + "</article></main><footer>Licence and privacy</footer></body></html>"
    ).encode()


async def run() -> None:
    page = article(1.0)
    with FakeWeb(pages={"big": ("text/html; charset=utf-8", page)}) as web:
        web.searxng, web.delay = "slow", DELAY_MS / 1000
        with tempfile.TemporaryDirectory() as tmp:
            config_dir, data_dir = Path(tmp) / "config", Path(tmp) / "data"
            config_dir.mkdir()
            settings = {
                "web": {
                    "backend": "searxng",
                    "url": web.url,
                    "allow_hosts": [f"127.0.0.1:{web.port}"],
                }
            }
            (config_dir / "settings.json").write_text(json.dumps(settings))
            async with await Runtime.open(
                Profile.APP.but(servers="none", chat=False, share=False, watch=False),
                config_dir,
                data_dir,
            ) as rt:
                own: list[float] = []
                ours: list[float] = []
                async with httpx.AsyncClient() as client:
                    for n in range(ROUNDS + 2):  # the first two warm up both
                        query = f"capital of France {n}"
                        started = time.perf_counter()
                        reply = await client.get(
                            f"{web.url}/search", params={"q": query, "format": "json"}
                        )
                        reply.raise_for_status()
                        direct = time.perf_counter() - started
                        started = time.perf_counter()
                        result = await rt.orchestrator.execute("web_search", {"query": query})
                        through = time.perf_counter() - started
                        assert result.success, result.error
                        if n >= 2:
                            own.append(direct)
                            ours.append(through)
                fetches: list[float] = []
                chars = 0
                for _ in range(FETCHES + 1):
                    started = time.perf_counter()
                    result = await rt.orchestrator.execute(
                        "web_fetch", {"url": f"{web.url}/pages/big", "max_chars": 200000}
                    )
                    fetches.append(time.perf_counter() - started)
                    assert result.success, result.error
                    chars = result.data["chars"]
    extracts = []
    for _ in range(FETCHES):
        started = time.perf_counter()
        html_text(page)
        extracts.append(time.perf_counter() - started)

    own_ms, ours_ms = statistics.median(own) * 1000, statistics.median(ours) * 1000
    ratio = ours_ms / own_ms
    print(f"(a) search round trip, median of {ROUNDS} (backend answers after {DELAY_MS:.0f} ms)")
    print(f"    the backend alone (httpx)     {own_ms:7.1f} ms")
    print(f"    web_search via orchestrator   {ours_ms:7.1f} ms")
    print(
        f"    ratio                         {ratio:7.3f}  (goal <= {GOAL}: "
        f"{'met' if ratio <= GOAL else 'NOT met'})"
    )
    print(f"(b) web_fetch of a {len(page) / 1024 / 1024:.2f} MB article, median of {FETCHES}")
    print(f"    whole call (first, with trafilatura's import: {fetches[0] * 1000:.0f} ms)")
    print(f"    whole call                    {statistics.median(fetches[1:]) * 1000:7.1f} ms")
    print(f"    readable text alone           {statistics.median(extracts) * 1000:7.1f} ms")
    print(f"    text made                     {chars:,} characters")


if __name__ == "__main__":
    asyncio.run(run())
