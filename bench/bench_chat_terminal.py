"""The chat as a person sees it, measured from outside the app, on a pseudo-terminal:

- first token: from Enter to the answer's first token on the terminal, against the stream's
  own first chunk (the bare `ollama` client reading the same scripted reply). The gap check
  (on, as by default) answers later than the first token, as a model's would.
- keystroke echo: while a 500 tokens/s answer streams, a key written to the terminal until
  the input box showing it comes back.

Run from the repository root:  .venv/bin/python bench/bench_chat_terminal.py
Every figure is measured in this run, against the project's fake Ollama (real HTTP) in its
own process; the app is `python -m tui.app` in its own process, on a 160x48 pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

import httpx
import ollama
from bench_chat import fake_ollama

ROOT = Path(__file__).resolve().parent.parent

FIRST_DELAY = 0.10  # seconds a model takes to its first token
GAP_DELAY = 0.50  # seconds it takes to write the gap check's whole JSON answer
RUNS = 5
RATE = 500  # tokens per second while keys are typed
STREAM_TOKENS = 4000  # long enough to outlast the typing
KEYS = 40
KEY = "ж"  # in nothing else the app draws: its echo is the input box redrawn
COLUMNS, ROWS = 160, 48


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


class Terminal:
    """The app on a pseudo-terminal; everything it writes, with when it arrived."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLUMNS), LINES=str(ROWS))
        env.pop("TEXTUAL_DRIVER", None)
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.output = bytearray()
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.output += b"\0EOF"
                    self.changed.notify_all()
                    return
                self.output += data
                self.changed.notify_all()

    def mark(self) -> int:
        with self.changed:
            return len(self.output)

    def write(self, text: str) -> tuple[int, float]:
        """Type: where the output stood, and when the keys went in."""
        at = self.mark()
        os.write(self.master, text.encode())
        return at, time.perf_counter()

    def wait_for(self, text: str, since: int, within: float = 30.0) -> float:
        """When ``text`` first appeared in the output after offset ``since``."""
        wanted = text.encode()
        deadline = time.monotonic() + within
        with self.changed:
            while wanted not in self.output[since:]:
                left = deadline - time.monotonic()
                if left <= 0 or self.output.endswith(b"\0EOF"):
                    tail = bytes(self.output[-400:])
                    raise TimeoutError(f"{text!r} not shown; the terminal's last output: {tail!r}")
                self.changed.wait(left)
            return time.perf_counter()

    def close(self) -> None:
        try:
            os.write(self.master, b"\x11")  # Ctrl+Q
            self.process.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def prepare(tmp: Path, url: str) -> list[str]:
    config, data = tmp / "config", tmp / "data"
    config.mkdir(parents=True)
    (config / "mcp-servers.json").write_text("[]")
    settings = {"obsidian": {"vault": str(tmp / "vault")}, "llm": {"host": url}}
    (config / "settings.json").write_text(json.dumps(settings))
    return [sys.executable, "-m", "tui.app", "--config-dir", str(config), "--data-dir", str(data)]


def in_the_terminal(argv: list[str]) -> tuple[list[float], list[float]]:
    terminal = Terminal(argv)
    firsts: list[float] = []
    echoes: list[float] = []
    try:
        terminal.wait_for("Ollama ready", 0, within=60)
        time.sleep(0.5)  # the first draws done
        for n in range(RUNS):
            at, _ = terminal.write(f"question {n}")
            terminal.wait_for(f"question {n}", at)
            at, entered = terminal.write("\r")
            firsts.append(terminal.wait_for(f"Firsttoken{n}", at) - entered)
            terminal.wait_for("rest.", at)
            time.sleep(0.6)  # the turn has ended (the gap check answered)
        at, _ = terminal.write("stream now\r")
        terminal.wait_for("Streaming", at)
        for typed in range(1, KEYS + 1):
            time.sleep(random.uniform(0.05, 0.15))
            at, sent = terminal.write(KEY)
            echoes.append(terminal.wait_for(KEY * typed, at) - sent)
        still = b"word%d " % (STREAM_TOKENS - 1) not in terminal.output
        assert still, "the answer ended before the typing did: raise STREAM_TOKENS"
    finally:
        terminal.close()
    return firsts, echoes


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


async def main() -> None:
    random.seed(7)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        replies = [first_token_reply(n) for n in range(RUNS)]
        bare_replies = [first_token_reply(n) for n in range(RUNS)]
        gaps = [gap_reply() for _ in range(RUNS + 1)]
        async with fake_ollama(tmp, [*bare_replies, *replies, long_reply()], gaps) as url:
            bare = [await bare_first_chunk(url) for _ in range(RUNS)]
            firsts, echoes = await asyncio.to_thread(in_the_terminal, prepare(tmp, url))
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
