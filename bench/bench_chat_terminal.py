"""The chat as a person sees it, measured from outside the app, on a pseudo-terminal:

- first token: from Enter to the answer's first token on the terminal, against the stream's
  own first chunk (the bare `ollama` client reading the same scripted reply, in turns with
  the app). The gap check
  (on, as by default) answers later than the first token, as a model's would.
- keystroke echo: while a 500 tokens/s answer streams, a key written to the terminal until
  the input box showing it comes back.

Run from the repository root:  .venv/bin/python bench/bench_chat_terminal.py
Every figure is measured in this run, against the project's fake Ollama (real HTTP) in its
own process; the app is `python -m diana.tui.app` in its own process, on a 160x48 pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import ollama
from bench_chat import fake_ollama
from terminal import Terminal, app_dirs, diana_command, p90

FIRST_DELAY = 0.10  # seconds a model takes to its first token
GAP_DELAY = 0.50  # seconds it takes to write the gap check's whole JSON answer
RUNS = 10
RATE = 500  # tokens per second while keys are typed
STREAM_TOKENS = 6000  # long enough to outlast the typing
KEYS = 60


def first_token_reply(n: int) -> dict[str, object]:
    return {"content": [f"Firsttoken{n} ", "and ", "the ", "rest."], "first_delay": FIRST_DELAY}


def long_reply() -> dict[str, object]:
    words = [f"word{i} " + ("\n\n" if i % 60 == 59 else "") for i in range(STREAM_TOKENS)]
    return {"content": ["Streaming ", *words], "delay": 1 / RATE}


def gap_reply() -> dict[str, object]:
    return {"content": '{"capabilities": []}', "first_delay": GAP_DELAY}


async def bare_first_chunk(url: str) -> float:
    """The stream's own first chunk: the bare client, request to first part."""
    client = ollama.AsyncClient(host=url, timeout=httpx.Timeout(30.0))
    start = time.perf_counter()
    stream = await client.chat("qwen3:30b-a3b", [{"role": "user", "content": "go"}], stream=True)
    first = 0.0
    async for _part in stream:
        if not first:
            first = time.perf_counter() - start
    await client._client.aclose()
    return first


def in_the_terminal(argv: list[str], url: str) -> tuple[list[float], list[float], list[float]]:
    """The stream's own first chunk and the app's first token on the terminal, in turn; then
    the keystroke echoes while a long answer streams."""
    terminal = Terminal(argv)
    bare: list[float] = []
    firsts: list[float] = []
    try:
        terminal.wait_for("Ollama ready", 0, within=60)
        time.sleep(0.5)  # the first draws done
        for n in range(RUNS):
            bare.append(asyncio.run(bare_first_chunk(url)))
            at, _ = terminal.write(f"question {n}")
            terminal.wait_for(f"question {n}", at)
            at, entered = terminal.write("\r")
            firsts.append(terminal.wait_for(f"Firsttoken{n}", at) - entered)
            terminal.wait_for("rest.", at)
            time.sleep(0.6)  # the turn has ended (the gap check answered)
        at, _ = terminal.write("stream now\r")
        terminal.wait_for("Streaming", at)
        echoes = terminal.echoes(KEYS, lambda: random.uniform(0.05, 0.15))
        still = b"word%d " % (STREAM_TOKENS - 1) not in terminal.output
        assert still, "the answer ended before the typing did: raise STREAM_TOKENS"
    finally:
        terminal.close()
    return bare, firsts, echoes


async def main() -> None:
    random.seed(7)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        # The bare client and the app take turns: reply n twice, then the long answer.
        replies = [first_token_reply(n) for n in range(RUNS) for _ in range(2)]
        gaps = [gap_reply() for _ in range(RUNS + 1)]
        async with fake_ollama(tmp, [*replies, long_reply()], gaps) as url:
            argv = diana_command(*app_dirs(tmp, {"host": url}))
            bare, firsts, echoes = await asyncio.to_thread(in_the_terminal, argv, url)
    stream, shown = statistics.median(bare), statistics.median(firsts)
    print(
        f"first token: the stream's own first chunk after {stream * 1000:.0f} ms, on the "
        f"terminal {shown * 1000:.0f} ms after Enter (median of {RUNS}; gap check answering "
        f"after {GAP_DELAY * 1000:.0f} ms): {shown / stream:.2f}x  (goal <= 1.2x)"
    )
    print(
        f"keystroke echo while a {RATE} tokens/s answer streams: median "
        f"{statistics.median(echoes) * 1000:.1f} ms, p90 {p90(echoes) * 1000:.1f} ms, max "
        f"{max(echoes) * 1000:.1f} ms over {len(echoes)} keys  (goal p90 <= 50 ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
