"""The browser $BROWSER names in the tests: a headless one that follows an authorization URL, or a
script that writes down what it was asked to open."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .configs import FIXTURES

BROWSER = f"{sys.executable} {FIXTURES / 'headless_browser.py'} %s"


@contextmanager
def browser_recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """$BROWSER is a script that writes down each argument it is given, one a line."""
    record = tmp_path / "browser-argv.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nfor arg in "$@"; do printf "%s\\n" "$arg" >> {record}; done\n')
    script.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(script))  # no %s: the URL goes after the command
    yield record
