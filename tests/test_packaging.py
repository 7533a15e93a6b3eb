"""A normal (non-editable) install carries the styles and shipped config."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.processes
def test_wheel_contains_styles_config_and_entry_points(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    wheel = next(tmp_path.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "diana/core/_shipped/config/settings.json" in names
    assert "diana/tui/_shipped/styles/app.tcss" in names
    assert "diana/core/calls/orchestrator.py" in names and "diana/tui/app.py" in names
    # nothing with a generic name at the top of site-packages: only the namespace and metadata
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"diana"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "diana = diana.tui.cli:main" in text and "diana-tui = diana.tui.app:main" in text
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
