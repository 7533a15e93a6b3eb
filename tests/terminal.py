"""A command on a real terminal (a pty), as a person at it would see it and type into it."""

from __future__ import annotations

import os
import pty
import subprocess
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent


class Terminal:
    """A command on a pty: what it shows (read by a thread as it comes, with the terminal's
    CR LF as LF), keys typed into it, and its settings as the pty holds them."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._master, side = pty.openpty()
        self._side_name = os.ttyname(side)
        self.process = subprocess.Popen(
            argv, stdin=side, stdout=subprocess.PIPE, stderr=side, env=env, cwd=ROOT, text=True
        )
        os.close(side)
        self._data = b""
        self._seen_to = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 4096)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    @property
    def shown(self) -> str:
        with self._lock:
            return self._data.decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, text: str, within: float = 30.0) -> None:
        """Until ``text`` is shown after what was waited for before."""
        deadline = time.monotonic() + within
        while (found := self.shown.find(text, self._seen_to)) < 0:
            assert time.monotonic() < deadline, f"never saw {text!r} in {self.shown!r}"
            time.sleep(0.02)
        self._seen_to = found + len(text)

    def type(self, line: str) -> None:
        os.write(self._master, (line + "\n").encode())

    def end_input(self) -> None:
        os.write(self._master, b"\x04")  # Ctrl-D: the end of the terminal's input

    def echoes(self) -> bool:
        """Whether the terminal shows what is typed (its ECHO flag)."""
        fd = os.open(self._side_name, os.O_RDWR | os.O_NOCTTY)
        try:
            return bool(termios.tcgetattr(fd)[3] & termios.ECHO)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        os.close(self._master)
