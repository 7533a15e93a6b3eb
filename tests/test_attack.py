"""The real `diana` against hostile input (bench/bench_attack.py --short): a few cases of
every kind of bad input, and one at least for each promise about what a hostile server, file
or record cannot do. None may end in a bypass, a traceback, a hang, a process left running,
a secret printed or stored, a broken promise or an escape sequence reaching the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent


# The short set in three shares, which the suite's workers run side by side.
@pytest.mark.parametrize("part", ["1/3", "2/3", "3/3"])
def test_hostile_input_never_bypasses_leaks_hangs_or_breaks_a_promise(part: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIANA_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_attack.py"), "--short", f"--part={part}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
