"""A server flooding diana-tui with requests of its own (tests/fixtures/flood_server.py, a
real SDK server on a 2025-11-25 connection), measured from outside the app on a
pseudo-terminal:

- Ctrl+Q with 60 questions at once from the server (one dialog shown, 7 waiting behind it,
  52 declined): seconds from the key to the process having exited.
- Ctrl+Q with 60 requests to the local model at once (8 proposals waiting, 52 refused).
- Ten requests to the local model of 10 MiB each (refused: past the 8 MiB limit), then four
  of 2 MiB (kept cut at 256 KiB): the database's size on disk and the app's peak memory.

Run from the repository root:  .venv/bin/python bench/bench_floods.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from terminal import ROOT, Terminal, app_dirs, diana_command

RUNS = 3
FLOOD = {"command": sys.executable, "args": [str(ROOT / "tests" / "fixtures" / "flood_server.py")]}


def flood_app(tmp: Path) -> tuple[Terminal, Path]:
    """The app with the flood server, its tools allowed; once its chat takes keys."""
    config, data = app_dirs(tmp, {"host": "http://127.0.0.1:9"})
    (config / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"fl": FLOOD}}))
    (config / "policy.json").write_text(json.dumps({"servers": {"fl": "allow"}}))
    app = Terminal(diana_command(config, data))
    app.input_ready()
    app.write("\x7f" * 20)  # the keys typed to find the input ready
    app.settle()
    return app, data


def call(app: Terminal, command: str, shown: str, within: float = 60.0) -> None:
    at, _sent = app.write(command + "\r")
    app.wait_for(shown, at, within)
    app.settle()


def quit_time(app: Terminal) -> float:
    """Seconds from Ctrl+Q to the process having exited."""
    _at, sent = app.write("\x11")
    app.process.wait(timeout=60)
    return time.perf_counter() - sent


def peak_memory_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    questions, requests = [], []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            app, _data = flood_app(Path(tmp))
            call(app, '/call fl_ask_many {"count": 60}', "7 more waiting")
            questions.append(quit_time(app))
        with tempfile.TemporaryDirectory() as tmp:
            app, _data = flood_app(Path(tmp))
            call(app, '/call fl_sample_many {"count": 60, "kib": 16}', "waits in Approvals")
            requests.append(quit_time(app))
    print(
        f"Ctrl+Q with 60 questions waiting: median {statistics.median(questions):.2f} s, "
        f"longest {max(questions):.2f} s ({RUNS} runs)"
    )
    print(
        f"Ctrl+Q with 60 requests to the model waiting: median "
        f"{statistics.median(requests):.2f} s, longest {max(requests):.2f} s ({RUNS} runs)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        app, data = flood_app(Path(tmp))
        call(app, '/call fl_sample_many {"count": 10, "kib": 10240}', "error -32603", 120)
        call(app, '/call fl_sample_many {"count": 4, "kib": 2048}', "waits in Approvals", 120)
        memory = peak_memory_mib(app.process.pid)
        quit_time(app)  # the four taken back, the database closed
        stored = sum(path.stat().st_size for path in data.glob("diana.db*")) / 2**20
    print(
        f"ten 10 MiB requests and four of 2 MiB: database {stored:.1f} MiB on disk, "
        f"the app's peak memory {memory:.0f} MiB"
    )


if __name__ == "__main__":
    main()
