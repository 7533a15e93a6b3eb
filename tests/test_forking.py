"""The suite's fork server (tests/fixtures/forking.py) stands in for starting a fixture server
or `diana` anew only where nothing a test can see changes: the started process is the one its
starter knows (pid, exit code, signals, streams), and nothing outlives it."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .fixtures import forking

pytestmark = pytest.mark.processes  # every test here starts a process

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = """
import os, resource, signal, sys, time
if __name__ == "__main__":
    sys.path.insert(0, {fixtures!r})
    from forking import hand_over
    hand_over()
print("pid", os.getpid(), "forked", os.environ.get("DIANA_FORKED_FIXTURE"), flush=True)
print("args", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("ONLY_HERE"), flush=True)
print("open files", resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
print("umask", oct(os.umask(0)), flush=True)
line = sys.stdin.readline()
if line.startswith("exit"):
    sys.exit(int(line.split()[1]))
if line.startswith("wait"):
    # (os.write: the signal may come while print("waiting") is still returning)
    signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"terminated\\n"), sys.exit(9)))
    print("waiting", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(SCRIPT.format(fixtures=str(FIXTURES)))
    return path


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (77, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def started(script: Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), "one", "two"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(os.environ, ONLY_HERE="yes"),
        preexec_fn=limited,
        umask=0o027,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_forked_script_is_the_process_its_starter_started(script: Path, tmp_path: Path) -> None:
    forking.wait_ready()
    process = started(script, tmp_path)
    out, err = process.communicate("exit 7\n", timeout=60)
    assert process.returncode == 7, err
    assert out.splitlines() == [
        f"pid {process.pid} forked 1",  # forked, and it answers its starter's pid
        f"args ['one', 'two'] cwd {tmp_path} env yes",
        "open files 77",  # and the limits it was started with
        "umask 0o27",  # and its umask
    ]


def test_a_signal_to_the_started_process_reaches_the_script(script: Path, tmp_path: Path) -> None:
    process = started(script, tmp_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("wait\n")
    process.stdin.flush()
    while (line := process.stdout.readline()) and line.strip() != "waiting":
        pass
    assert line, "the script ended before it waited"
    process.terminate()
    code = process.wait(timeout=60)
    out, err = process.stdout.read(), process.stderr.read() if process.stderr else ""
    assert (code, out) == (9, "terminated\n"), err


def test_the_script_dies_with_its_started_process(script: Path, tmp_path: Path) -> None:
    """SIGKILL to the process its starter knows: the script forked for it is gone too (its
    stdout ends), as a process killed outright would be."""
    process = started(script, tmp_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("wait\n")
    process.stdin.flush()
    while (line := process.stdout.readline()) and line.strip() != "waiting":
        pass
    assert line, "the script ended before it waited"
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    # The forked script held the other end of stdout: it ends only when the script is gone.
    assert process.stdout.read() == ""
    assert time.monotonic() < deadline


def test_without_the_fork_server_the_script_runs_where_it_was_started(
    script: Path, tmp_path: Path, unforked: None
) -> None:
    process = started(script, tmp_path)
    out, _err = process.communicate("exit 0\n", timeout=60)
    assert out.splitlines()[0] == f"pid {process.pid} forked None"
