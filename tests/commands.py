"""Running `diana` as a person would: a separate process over the test's directories."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from diana.core.system.telemetry import SECRET_VALUES

# `python -m diana.tui.cli`, forked from the suite's fork server (tests/fixtures/forking.py)
COMMAND = str(Path(__file__).parent / "fixtures" / "diana_command.py")


def diana_args(config_dir: Path, data_dir: Path, *args: str) -> list[str]:
    """What follows `diana` on its command line: the test's directories, then ``args``."""
    return ["--config-dir", str(config_dir), "--data-dir", str(data_dir), *args]


def diana_argv(config_dir: Path, data_dir: Path, *args: str, forked: bool = True) -> list[str]:
    """``forked=False``: `python -m diana.tui.cli` itself, for a test of the process's own
    start (its imports, a signal while they run)."""
    command = [COMMAND] if forked else ["-m", "diana.tui.cli"]
    return [sys.executable, *command, *diana_args(config_dir, data_dir, *args)]


def diana(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        diana_argv(config_dir, data_dir, *args), capture_output=True, text=True, timeout=60
    )


def diana_here(
    config_dir: Path,
    data_dir: Path,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`diana ARGS` through its ``main(argv)`` in this process, answered as ``diana()``
    answers (exit code, stdout, stderr; piped, not a terminal): for a test of what a command
    does and says. A test of the process itself (its start, a signal, what it leaves
    running, a second process beside the app on one database) runs ``diana()``.
    ``env``: variables set for the command alone."""
    from diana.tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved, streams = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
    # The secret values this process was told are one set for it: the command starts
    # knowing none, as its own process would, and what it learns is forgotten after it.
    secrets = SECRET_VALUES._values, SECRET_VALUES._pattern  # type: ignore[attr-defined]
    SECRET_VALUES._values, SECRET_VALUES._pattern = set(), None  # type: ignore[attr-defined]
    os.environ.update(env or {})
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = main(diana_args(config_dir, data_dir, *args))
    except SystemExit as stop:  # argparse's own errors, as the process would end
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        if isinstance(stop.code, str):
            print(stop.code, file=err)
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        SECRET_VALUES._values, SECRET_VALUES._pattern = secrets  # type: ignore[attr-defined]
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(["diana", *args], code, out.getvalue(), err.getvalue())


def propose_save_fact(config_dir: Path, data_dir: Path) -> str:
    """A pending proposal to save a fact, made by `diana call` (the policy asks first): its id."""
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"save_fact": "ask"}}))
    made = diana_here(
        config_dir, data_dir, "call", "save_fact", "--args", '{"content": "x"}', "--json"
    )
    assert made.returncode == 3, made.stderr
    return str(json.loads(made.stdout)["data"]["proposal_id"])


def diana_aside(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`diana ARGS` in this process (``diana_here``), in a thread of its own so that a test
    may ask from its event loop too (the command runs a loop of its own): for a look or a
    step beside what is tested, where the `diana` process itself is not what is proven."""
    with ThreadPoolExecutor(1) as aside:
        return aside.submit(diana_here, config_dir, data_dir, *args).result()


async def diana_here_async(
    config_dir: Path,
    data_dir: Path,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``diana_here`` from a test's event loop: in a thread (the command runs its own loop),
    so the loop and an app on it go on meanwhile."""
    return await asyncio.to_thread(diana_here, config_dir, data_dir, *args, stdin=stdin, env=env)


async def run_diana(
    config_dir: Path, data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`diana` run from a test's event loop: in a thread, so the loop (and a runtime or app
    on it, perhaps in the middle of a write the command would wait for) goes on meanwhile."""
    return await asyncio.to_thread(diana, config_dir, data_dir, *args)


def start_diana(
    config_dir: Path, data_dir: Path, *args: str, forked: bool = True
) -> subprocess.Popen[str]:
    """`diana` started in the background, for races and kills."""
    return subprocess.Popen(
        diana_argv(config_dir, data_dir, *args, forked=forked),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(config_dir: Path, data_dir: Path, *args: str, columns: int | None) -> str:
    """A command's stdout, piped; ``columns``: with COLUMNS set to it."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run(
        diana_argv(config_dir, data_dir, *args),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode in (0, 3), done.stderr
    return done.stdout


def on_a_terminal(
    config_dir: Path, data_dir: Path, *args: str, width: int, columns: int | None = None
) -> str:
    """A command's stdout on a pty ``width`` columns wide; ``columns``: with COLUMNS set."""
    master, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, width, 0, 0))
    attributes = termios.tcgetattr(side)
    attributes[1] &= ~termios.ONLCR  # lines end as written
    termios.tcsetattr(side, termios.TCSANOW, attributes)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    process = subprocess.Popen(
        diana_argv(config_dir, data_dir, *args),
        stdin=subprocess.DEVNULL,
        stdout=side,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=120) in (0, 3)
    return b"".join(chunks).decode()


def ask_command(config_dir: Path, data_dir: Path, *args: str) -> list[str]:
    return diana_argv(config_dir, data_dir, "ask", *args)


def ask_environment(host: str) -> dict[str, str]:
    return dict(os.environ, OLLAMA_HOST=host)


def ask(
    config_dir: Path, data_dir: Path, host: str, *args: str, stdin: int = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    """`diana ask` against the Ollama at ``host``; by default with no terminal on stdin, so
    nobody can be asked a question."""
    return subprocess.run(
        ask_command(config_dir, data_dir, *args),
        capture_output=True,
        text=True,
        env=ask_environment(host),
        stdin=stdin,
        cwd=Path(__file__).parent.parent,
        timeout=60,
    )
