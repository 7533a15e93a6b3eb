"""Chat streaming: a 2,000-token answer at 500 tokens/s, rendered in the app, and a keypress
handled while it streams.

Run from the repository root:  .venv/bin/python bench/bench_chat.py
Every figure is measured in this run, against the project's fake Ollama (real HTTP, the real
`ollama` client) in its own process, as Ollama would be: the stream's own duration is timed
with the bare client, then the same stream is sent through the app until the last token is on
screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import ollama

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.tui.app import make_app  # noqa: E402
from diana.tui.panes.chat import ChatPane  # noqa: E402
from diana.tui.panes.transcript import AnswerView  # noqa: E402
from terminal import app_dirs, echo_through_driver  # noqa: E402
from textual.widgets import Input  # noqa: E402

from tests.waits import started  # noqa: E402

TOKENS = 2000
RATE = 500  # tokens per second
RUNS = 3
KEYPRESSES = 20


def answer_reply(rate: float = RATE) -> dict[str, object]:
    """Markdown with paragraphs, lists and code fences, cut into 2,000 tokens."""
    words: list[str] = []
    for i in range(TOKENS):
        if i % 200 == 0:
            words.append("\n\n```python\n" if i % 400 == 0 else "\n```\n\n")
        elif i % 50 == 0:
            words.append("\n- ")
        words.append(f"word{i} ")
    tokens = words[:TOKENS]
    return {"content": tokens, "delay": 1 / rate}


@contextlib.asynccontextmanager
async def fake_ollama(
    tmp: Path, replies: list[dict[str, object]], gap_replies: list[dict[str, object]] | None = None
) -> AsyncIterator[str]:
    """The project's fake Ollama in a process of its own, as Ollama would be; its URL."""
    script = tmp / "script.json"
    script.write_text(json.dumps({"replies": replies, "gap_replies": gap_replies or []}))
    server = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            str(ROOT / "tests/fixtures/fake_ollama.py"),
            "--port",
            "0",
            "--script",
            str(script),
        ],
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        yield (await server.stdout.readline()).decode().split()[-1]
    finally:
        server.terminate()
        await server.wait()


async def bare_stream(url: str) -> float:
    """The stream's own duration: the bare client reading every token."""
    client = ollama.AsyncClient(host=url, timeout=httpx.Timeout(30.0))
    start = time.perf_counter()
    stream = await client.chat("qwen3:30b-a3b", [{"role": "user", "content": "go"}], stream=True)
    async for _part in stream:
        pass
    elapsed = time.perf_counter() - start
    await client._client.aclose()
    return elapsed


async def in_the_app(tmp: Path, url: str, runs: int) -> tuple[list[float], list[float]]:
    """Enter to the last token on screen; and keypress-to-handled latencies during streams."""
    app = make_app(*app_dirs(tmp, {"host": url, "gap_check": False}))
    rendered: list[float] = []
    keys: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app)
        chat = app.query_one(ChatPane)
        box = app.query_one("#chat-input", Input)
        for _ in range(runs):
            box.focus()
            box.value = "write a long answer"
            start = time.perf_counter()
            await pilot.press("enter")
            turn = chat.turn
            assert turn is not None
            # While it streams, type into the input as a person would, through the driver.
            await asyncio.sleep(0.2)
            for n in range(KEYPRESSES // runs + 1):
                keys.append(await echo_through_driver(app, box))
                await asyncio.sleep(0.1 + n * 0.01)
            await turn.wait()
            answers = list(chat.query(AnswerView))
            assert answers and answers[-1].source == answers[-1].text
            assert len(answers[-1].text.split()) >= TOKENS * 0.9
            rendered.append(time.perf_counter() - start)
            box.value = ""
    return rendered, keys


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        async with fake_ollama(tmp, [answer_reply() for _ in range(2 * RUNS)]) as url:
            bare = [await bare_stream(url) for _ in range(RUNS)]
            rendered, keys = await in_the_app(tmp, url, RUNS)
    stream = statistics.median(bare)
    shown = statistics.median(rendered)
    print(
        f"{TOKENS:,}-token answer at {RATE} tokens/s: the stream itself {stream:.2f} s, "
        f"fully rendered in the app {shown:.2f} s: {shown / stream:.3f}x  (goal <= 1.10x)"
    )
    print(
        f"keypress during the stream, handled in median {statistics.median(keys) * 1000:.1f} ms, "
        f"max {max(keys) * 1000:.1f} ms over {len(keys)} presses  (goal <= 100 ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
