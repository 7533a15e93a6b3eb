"""A running app in a process of its own (tests/fixtures/live_app.py) that a test can pause and
resume, and the structured log it writes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .database import query
from .waits import until

ROOT = Path(__file__).parent.parent


LIVE_APP = str(Path(__file__).parent / "fixtures" / "live_app.py")


NOW = "2026-11-27T09:00:00+00:00"


@dataclass
class App:
    process: subprocess.Popen[str]  # as started: it passes its signals on to the app
    app_id: str
    pid: int  # the app's own, as it wrote it in its row (forked, not the started process's)

    def describe(self) -> str:
        return f"diana-tui (pid {self.pid})"

    def pause(self, data_dir: Path) -> None:
        """Stop the app where it is, never inside a write of its own (this holds the lock
        while it stops it): what is written meanwhile waits for it, not on it."""
        db = sqlite3.connect(data_dir / "diana.db", timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            os.kill(self.pid, signal.SIGSTOP)  # no process passes a SIGSTOP on
            db.execute("COMMIT")
        finally:
            db.close()

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@contextmanager
def app_running(config_dir: Path, data_dir: Path) -> Iterator[App]:
    process = subprocess.Popen(
        [sys.executable, LIVE_APP, str(config_dir), str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    app: App | None = None
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n", process.communicate(timeout=30)
        configured = json.loads((config_dir / "mcp-servers.json").read_text())["mcpServers"]
        try:  # nothing left to write
            until(lambda: published(data_dir) == ["ready"] * len(configured))
        except AssertionError:
            seen = published(data_dir)
            process.terminate()
            _out, err = process.communicate(timeout=30)
            raise AssertionError(
                f"the app never published every server ready: {seen}; "
                f"its stderr ends: {err[-3000:]}"
            ) from None
        ((app_id, pid),) = query(data_dir, "SELECT app_id, pid FROM live_apps")
        app = App(process, app_id, pid)
        yield app
    finally:
        if app is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(app.pid, signal.SIGCONT)
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.communicate(timeout=30)


def published(data_dir: Path) -> list[str]:
    """The servers' states as the app last wrote them."""
    rows = query(data_dir, "SELECT diagnostics FROM live_servers ORDER BY position")
    return [json.loads(text)["status"] for (text,) in rows]


def read_log(data_dir: Path) -> list[dict[str, object]]:
    lines = [
        line
        for path in (data_dir / "logs").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    return [json.loads(line) for line in lines]
