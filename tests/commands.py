"""Running `diana` as a person would: a separate process over the test's directories."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def diana_argv(config_dir: Path, data_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "diana.tui.cli",
        "--config-dir",
        str(config_dir),
        "--data-dir",
        str(data_dir),
        *args,
    ]


def diana(config_dir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        diana_argv(config_dir, data_dir, *args), capture_output=True, text=True, timeout=60
    )


def start_diana(config_dir: Path, data_dir: Path, *args: str) -> subprocess.Popen[str]:
    """`diana` started in the background, for races and kills."""
    return subprocess.Popen(
        diana_argv(config_dir, data_dir, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
