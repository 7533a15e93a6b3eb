"""Chat memory: the app's memory after one 2,000-token answer and after twenty.

Run from the repository root:  .venv/bin/python bench/bench_chat_memory.py
Every figure is measured in this run, against the project's fake Ollama (real HTTP, the real
`ollama` client) in its own process. Memory is the app process's resident set (VmRSS) after a
full garbage collection, read once the answer is on screen and the transcript has settled.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_chat import TOKENS, answer_reply, fake_ollama  # noqa: E402
from diana.tui.app import make_app  # noqa: E402
from diana.tui.panes.chat import ChatPane  # noqa: E402
from terminal import app_dirs  # noqa: E402
from textual.widget import Widget  # noqa: E402
from textual.widgets import Input  # noqa: E402
from textual.widgets._markdown import MarkdownBlock  # noqa: E402

from tests.waits import started  # noqa: E402

ANSWERS = 20
RATE = 4000  # tokens per second: memory does not depend on the pace, the run time does
LAST_WORD = str(answer_reply()["content"][-1]).strip()  # type: ignore[index]


def live_blocks() -> int:
    """Memory blocks Python's allocator holds for live objects (not what it keeps free)."""
    gc.collect()
    return sys.getallocatedblocks()


def rss_mib() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


Row = tuple[int, float, int, int, int]


async def answers_in_the_app(tmp: Path, url: str) -> list[Row]:
    """(answers so far, RSS in MiB, live allocator blocks, widgets in the app, Markdown
    blocks) after each answer."""
    app = make_app(*app_dirs(tmp, {"host": url}))
    rows: list[Row] = []
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app)
        chat = app.query_one(ChatPane)
        box = app.query_one("#chat-input", Input)
        rows.append((0, rss_mib(), live_blocks(), len(app.query(Widget)), 0))
        for n in range(1, ANSWERS + 1):
            box.focus()
            box.value = f"write long answer {n}"
            await pilot.press("enter")
            turn = chat.turn
            assert turn is not None
            await turn.wait()
            for _ in range(3):
                await pilot.pause()
            assert LAST_WORD in chat.plain_text()
            widgets, blocks = len(app.query(Widget)), len(app.query(MarkdownBlock))
            rows.append((n, rss_mib(), live_blocks(), widgets, blocks))
    return rows


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        replies = [answer_reply(RATE) for _ in range(ANSWERS)]
        async with fake_ollama(tmp, replies) as url:
            rows = await answers_in_the_app(tmp, url)
    for n, rss, allocated, widgets, blocks in rows:
        if n in (0, 1, 2, 5, 10, 15, ANSWERS):
            print(
                f"after {n:2} answers: {rss:7.1f} MiB resident, {allocated:9,} live allocator "
                f"blocks, {widgets:5} widgets, {blocks:4} Markdown blocks"
            )
    first, last = rows[1][1], rows[-1][1]
    print(
        f"memory after {ANSWERS} answers of {TOKENS:,} tokens / after 1: "
        f"{last:.1f} / {first:.1f} MiB = {last / first:.2f}x  (goal <= 1.30x); "
        f"{(last - first) / (ANSWERS - 1):.2f} MiB per further answer"
    )


if __name__ == "__main__":
    asyncio.run(main())
