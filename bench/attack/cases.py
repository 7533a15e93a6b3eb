"""A case of the attack bench and how one command of it runs and is classified."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


FIXTURES = ROOT / "tests" / "fixtures"


GATE = str(FIXTURES / "gate_server.py")


SPAWNING = str(FIXTURES / "spawning_server.py")


ABUSIVE = str(FIXTURES / "abusive_server.py")


ESCAPES = str(FIXTURES / "escape_server.py")


FIXTURE = str(FIXTURES / "mcp_fixture.py")


DEMANDING = str(FIXTURES / "demanding_server.py")


TIMEOUT = 30.0  # a command still running after this is a hang


ORPHAN_GRACE = 1.0  # what is still alive this long after the command exited is an orphan


WORKERS = 2


MEMORY_LIMIT = 4 * 1024**3


ROOT_USER = os.geteuid() == 0


DENY_SAVE_FACT = {"tools": {"save_fact": "deny"}, "servers": {}}


ALLOW_ALL: dict[str, dict[str, str]] = {"tools": {}, "servers": {}}


FACT = json.dumps({"content": "attack fact"})


TITLE, CLEAR = "\x1b]0;pwned\x07", "\x1b[2J\x1b[H"


TRACEBACK = re.compile(
    rb"^(Traceback \(most recent call last\)|Exception ignored|Task exception was never"
    rb" retrieved|[A-Za-z_][\w.]*(Error|Exception)(: |$)|diana: unexpected error)",
    re.M,
)


NOISE = re.compile(rb"Task was destroyed but it is pending|was never awaited|Warning: ")


ARGPARSE_ERROR = re.compile(r"^diana( [\w-]+)?: error: ")


ESCAPE_BYTES = (b"\x1b", "\u009b".encode(), "\u009d".encode())


@dataclass
class Run:
    args: Sequence[str | bytes]
    rc: int | None
    out: bytes
    err: bytes
    seconds: float
    hung: bool
    echo_left_off: bool = False  # on a terminal: it ended with the terminal not echoing


Typist = Callable[[bytes], bytes | None]  # what a terminal shows -> what to type, if anything


When = float | str | Callable[["Ctx"], bool]  # seconds, a command that runs, or a condition


QUIET = 0.3  # a command on a terminal that wrote nothing for this long waits for keys


class SetupFailed(Exception):
    """A step before the attack did not end as it must: the case cannot say anything."""


@dataclass
class Ctx:
    dir: Path
    state: dict[str, Any] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # must appear nowhere
    stored_secrets: list[str] = field(default_factory=list)  # must not be stored, when settled
    token_secrets: list[str] = field(default_factory=list)  # OAuth tokens: kept in oauth/ only
    env: dict[str, str] = field(default_factory=dict)
    umask: int = 0o022
    cleanups: list[Callable[[], object]] = field(default_factory=list)  # run once it ended

    @property
    def config(self) -> Path:
        return self.dir / "config"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def effects(self) -> Path:
        return self.dir / "effects.txt"

    @property
    def mark(self) -> Path:
        return self.dir / "MARK"

    @property
    def marker(self) -> str:
        return f"{self.dir}/"

    def diana(
        self,
        *args: str | bytes,
        want: Sequence[int] | None = None,
        config: str | bytes | None = None,
        data: str | bytes | None = None,
        signals: Sequence[tuple[When, int]] = (),
        timeout: float = TIMEOUT,
        terminal: Typist | None = None,
    ) -> Run:
        """Run `diana ARGS` in this case's dirs. With ``terminal``, stdin and stderr are a
        terminal (stdout stays a pipe), and ``terminal`` is shown what it holds each time the
        command waits, and types what it returns."""
        argv: list[str | bytes] = [
            sys.executable,
            "-m",
            "diana.tui.cli",
            "--config-dir",
            str(self.config) if config is None else config,
            "--data-dir",
            str(self.data) if data is None else data,
            *args,
        ]
        start = time.monotonic()
        side = None
        if terminal is not None:
            master, side = pty.openpty()
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL if side is None else side,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if side is None else side,
            umask=self.umask,
        )
        for at, signum in signals:
            self._wait_for(at, process, start, timeout)
            if process.poll() is None:
                process.send_signal(signum)
        echo_off = False
        if side is None:
            out, err, hung = _communicate(process, timeout - (time.monotonic() - start))
        else:
            assert terminal is not None
            try:
                out, err, hung = _on_terminal(process, master, terminal, start + timeout)
                echo_off = not termios.tcgetattr(side)[3] & termios.ECHO
            finally:
                os.close(side)
                os.close(master)
        run = Run(args, process.returncode, out, err, time.monotonic() - start, hung, echo_off)
        self.runs.append(run)
        if want is not None and (hung or run.rc not in want):
            raise SetupFailed(f"setup `{shown(args)}` exited {run.rc}: {last_line(err)}")
        return run

    def environment(self) -> dict[str, str]:
        """What every process of the case runs with: its TMPDIR and HOME, ATTACK_CASE naming
        it (to find what it leaves running), no Ollama unless the case says where."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DIANA_", "OTEL_"))}
        env.update(
            TMPDIR=str(self.dir / "tmp"),
            HOME=str(self.dir / "home"),
            ATTACK_CASE=self.marker,
            OLLAMA_HOST="http://127.0.0.1:9",
        )
        env.update(self.env)
        return env

    def _wait_for(
        self, at: When, process: subprocess.Popen[bytes], start: float, timeout: float
    ) -> None:
        """Until ``at``: seconds after the start, a process of this case whose command line
        holds the text (then 0.2 s more), or the condition holding."""
        if isinstance(at, int | float):
            time.sleep(max(0.0, at - (time.monotonic() - start)))
            return
        while process.poll() is None and time.monotonic() - start < timeout / 2:
            if isinstance(at, str):
                if live_processes_naming(self.marker, running=at):
                    time.sleep(0.2)
                    return
            elif at(self):
                return
            time.sleep(0.02)


def _communicate(process: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes, bool]:
    """stdout, stderr and whether it hung: no exit within ``timeout`` seconds (it is then
    sent SIGINT, and SIGKILL 5 s later)."""
    try:
        out, err = process.communicate(timeout=max(0.1, timeout))
        return out, err, False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        return out, err, True


def _on_terminal(
    process: subprocess.Popen[bytes], master: int, typist: Typist, deadline: float
) -> tuple[bytes, bytes, bool]:
    """Drive a command whose stdin and stderr are the terminal ``master`` leads to: each time
    it has written something and then nothing for QUIET seconds, ``typist`` is shown the whole
    transcript and what it returns is typed. stdout, the transcript, and whether it hung."""
    stdout: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout.append(process.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    transcript = bytearray()
    last_output = time.monotonic()
    shown_to = 0
    hung = False
    while True:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                data = b""
            transcript += data
            last_output = time.monotonic()
            continue
        if process.poll() is not None:
            break
        now = time.monotonic()
        if now > deadline and not hung:
            hung = True
            process.send_signal(signal.SIGINT)
            deadline = now + 5
        elif now > deadline:
            process.kill()
        elif now - last_output > QUIET and len(transcript) > shown_to:
            shown_to = len(transcript)
            typed = typist(bytes(transcript))
            if typed is not None:
                os.write(master, typed)
    process.wait()
    reader.join(10)
    return (stdout[0] if stdout else b""), bytes(transcript), hung


@dataclass
class Case:
    family: str
    name: str
    args: Sequence[str | bytes] | Callable[[Ctx], Sequence[str | bytes]]
    expect: Sequence[int] = (2,)  # exit codes that make a clear error
    ok: Sequence[int] = ()  # exit codes that mean the input was rightly accepted
    setup: Callable[[Ctx], object] | None = None
    check: Callable[[Ctx, Run], list[str]] | None = None  # bypasses found
    # Promises broken other than by a bypass: a file others can read, a request not bounded,
    # a record that says what did not happen, an edit lost, a terminal left without echo...
    verify: Callable[[Ctx, Run], list[str]] | None = None
    config: Callable[[Ctx], str | bytes] | None = None  # another --config-dir
    data: Callable[[Ctx], str | bytes] | None = None  # another --data-dir
    signals: Sequence[tuple[When, int]] = ()  # (seconds after start, a command or a condition)
    # Runs in a thread while the command does (an editor, a fake app), until the event is set.
    during: Callable[[Ctx, threading.Event], object] | None = None
    terminal: Typist | None = None  # the command runs on a terminal, this typing at it
    umask: int = 0o022
    quiet_ok: bool = False  # a failure reported on stdout (servers, health): no stderr needed
    max_lines: int = 5
    exact_stderr: bytes | None = None
    serial: bool = False
    prefixes: tuple[str, ...] = ("diana:",)  # what a line of a clear error starts with
    short: bool = False  # one of the cases `--short` runs


@dataclass
class Result:
    case: Case
    outcome: str  # clear, ok, hang, traceback, unclear
    detail: str
    orphans: int = 0
    bypasses: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)  # secrets printed or stored
    broken: list[str] = field(default_factory=list)  # what Case.verify found
    escaped: bool = False
    index: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the bench and the processes it waited for, meanwhile


def printable_bytes(data: bytes, limit: int = 160) -> str:
    text = data.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(args: Sequence[str | bytes]) -> str:
    return " ".join(printable_bytes(a if isinstance(a, bytes) else a.encode(), 40) for a in args)


def last_line(err: bytes) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return printable_bytes(lines[-1]) if lines else "(no stderr)"


def clear_stderr(err: bytes, case: Case) -> bool:
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    if case.exact_stderr is not None:
        return err == case.exact_stderr
    if not lines:
        return case.quiet_ok
    if lines[0].startswith("usage:") and ARGPARSE_ERROR.match(lines[-1]):
        return True  # argparse's own refusal: usage, then one error line
    return (
        len(lines) <= case.max_lines
        and any(line.startswith(case.prefixes) for line in lines)
        # "  ..." continues a line; "… " is `ask` saying it tries again
        and all(line.startswith((*case.prefixes, " ", "… ")) for line in lines)
    )


def classify(case: Case, run: Run) -> tuple[str, str]:
    if run.hung:
        after = "killed" if run.rc == -signal.SIGKILL else f"exit {run.rc}"
        return "hang", f"no exit in {TIMEOUT:.0f} s; after SIGINT: {after}, {last_line(run.err)}"
    for stream in (run.err, run.out):
        found = TRACEBACK.search(stream)
        if found:
            line = stream[found.start() :].split(b"\n", 1)[0]
            return "traceback", printable_bytes(line)
    noise = NOISE.search(run.err)
    if noise:
        return "unclear", f"stray stderr: {printable_bytes(run.err[noise.start() :])}"
    if run.rc in case.ok and (not run.err.strip() or clear_stderr(run.err, case)):
        return "ok", ""
    if run.rc in case.expect and clear_stderr(run.err, case):
        return "clear", ""
    expected = sorted({*case.expect, *case.ok})
    return "unclear", f"exit {run.rc} (expected {expected}): {last_line(run.err)}"


def live_processes_naming(marker: str, running: str = "") -> list[int]:
    """The live processes whose command line or environment holds ``marker`` (and whose
    command line holds ``running``). A scan reads one file of most processes: the command
    line, then the environment of those it does not already tell apart, then the state of
    those that match (several of these scans a second while a case waits)."""
    found = []
    needle, wanted = marker.encode(), running.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
            if wanted not in command:
                continue
            named = needle in command
            if not named:
                try:
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        named = needle in f.read()
                except OSError:
                    continue
            if not named:
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X"):
                    continue
        except (OSError, IndexError):
            continue
        found.append(int(entry))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False
