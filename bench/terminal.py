"""What the terminal benchmarks share: an app run on a pseudo-terminal and watched from
outside (what it wrote, and when), keys typed into it until they show, the config and data
dirs an app is started with, and a key sent through Textual's driver from inside the app.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App
    from textual.widgets import Input

ROOT = Path(__file__).resolve().parent.parent
COLUMNS, ROWS = 160, 48
KEY = "ж"  # in nothing either app draws: its echo is the input box redrawn
# Escape sequences (CSI, OSC, DCS/APC/PM/SOS strings, two-byte ESC x), as they come.
ESCAPES = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    rb"|\x1b[PX^_][^\x1b]*\x1b\\|\x1b[@-Z\\-_]"
)


def app_dirs(tmp: Path, llm: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """A config dir (no MCP servers, the vault in ``tmp``, ``llm`` settings) and a data dir."""
    config, data = tmp / "config", tmp / "data"
    config.mkdir(parents=True)
    (config / "mcp-servers.json").write_text("[]")
    settings: dict[str, Any] = {"obsidian": {"vault": str(tmp / "vault")}}
    if llm:
        settings["llm"] = llm
    (config / "settings.json").write_text(json.dumps(settings))
    return config, data


def diana_command(config: Path, data: Path) -> list[str]:
    """The app as a person starts it."""
    return [
        sys.executable, "-m", "diana.tui.app", "--config-dir", str(config), "--data-dir", str(data)
    ]  # fmt: skip


class Terminal:
    """A program on a pseudo-terminal; everything it writes, with when it arrived."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        size: tuple[int, int] = (COLUMNS, ROWS),
    ) -> None:
        columns, rows = size
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        # No echo from the terminal itself: what shows a key is the program drawing it.
        tty.setraw(slave)
        # COLUMNS and LINES too: a program reads them before the terminal's own size (Textual
        # does, through shutil.get_terminal_size, at the start and on each SIGWINCH).
        environ = dict(os.environ, TERM="xterm-256color", COLUMNS=str(columns), LINES=str(rows))
        environ.pop("TEXTUAL_DRIVER", None)
        environ.update(env or {})
        self.started = time.perf_counter()
        # As a terminal starts a program: in a session of its own, whose controlling terminal
        # this is (so the program is hung up on when the terminal goes).
        self.process = subprocess.Popen(
            ["setsid", "--ctty", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=environ,
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

    def wait_until(
        self, shown: Callable[[bytes], bool], since: int, within: float, what: str
    ) -> float | None:
        """When ``shown`` first held for the output after offset ``since``; None if it did
        not within ``within`` seconds (TimeoutError, naming ``what``, if the program ended)."""
        deadline = time.monotonic() + within
        with self.changed:
            while not shown(bytes(self.output[since:])):
                if self.output.endswith(b"\0EOF"):
                    tail = bytes(self.output[-400:])
                    raise TimeoutError(f"{what} not shown; the program ended: {tail!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(left)
            return time.perf_counter()

    def wait_for(self, text: str, since: int, within: float = 30.0) -> float:
        """When ``text`` first appeared in the output after offset ``since``."""
        wanted = text.encode()
        when = self.wait_until(lambda out: wanted in out, since, within, repr(text))
        if when is None:
            tail = bytes(self.output[-400:])
            raise TimeoutError(f"{text!r} not shown; the terminal's last output: {tail!r}")
        return when

    def settle(self, quiet: float = 0.3, within: float = 30.0) -> None:
        """Return once the program has written nothing for ``quiet`` seconds."""
        deadline = time.monotonic() + within
        with self.changed:
            while time.monotonic() < deadline:
                seen = len(self.output)
                self.changed.wait(quiet)
                if len(self.output) == seen:
                    return

    def first_paint(self, within: float = 60.0) -> float:
        """Seconds from the start until the first visible character was written."""
        when = self.wait_until(lambda out: bool(visible(out).strip()), 0, within, "a first paint")
        if when is None:
            raise TimeoutError("nothing drawn")
        return when - self.started

    def input_ready(self, every: float = 0.02, within: float = 60.0) -> float:
        """Seconds from the start until a key typed shows: KEY is typed every ``every``
        seconds until it does (keys typed before the input takes them are lost, or queue)."""
        deadline = time.monotonic() + within
        since = self.mark()
        wanted = KEY.encode()
        while time.monotonic() < deadline:
            os.write(self.master, wanted)
            when = self.wait_until(lambda out: wanted in out, since, every, "a typed key")
            if when is not None:
                return when - self.started
        raise TimeoutError(f"a key typed for {within:.0f} s never showed")

    def echoes(self, keys: int, pause: Callable[[], float]) -> list[float]:
        """Type KEY ``keys`` times, ``pause()`` seconds apart; each key's time to show (the
        input box holding one more of it)."""
        echoes = []
        for typed in range(1, keys + 1):
            time.sleep(pause())
            at, sent = self.write(KEY)
            echoes.append(self.wait_for(KEY * typed, at) - sent)
        return echoes

    def close(self, quit_keys: str = "\x11") -> None:
        """Quit with ``quit_keys`` (Ctrl+Q); killed if it has not ended within 15 s."""
        try:
            os.write(self.master, quit_keys.encode())
            self.process.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def visible(output: bytes) -> str:
    """The characters written, without escape sequences or control characters."""
    text = ESCAPES.sub(b"", output).decode(errors="replace")
    return "".join(c for c in text if c.isprintable() or c == " ")


async def echo_through_driver(app: App[Any], box: Input, key: str = "x") -> float:
    """A key sent as the terminal would (through the driver, not the test pilot, whose
    press() also waits for the screen to settle); the seconds until ``box`` holds it."""
    from textual.events import Key

    assert app._driver is not None
    event = Key(key, key)
    event.set_sender(app)
    before = box.value
    pressed = time.perf_counter()
    app._driver.send_message(event)
    while box.value == before:  # noqa: ASYNC110 - polling what the person sees
        await asyncio.sleep(0)
    return time.perf_counter() - pressed


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]
