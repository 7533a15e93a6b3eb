"""Whole-app snapshots, from the same scenarios as screenshots/generate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .scenarios import SCENARIOS, TERMINAL_SIZE, build_app


def test_main_screen(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(
        build_app(tmp_path), terminal_size=TERMINAL_SIZE, run_before=SCENARIOS["main"]
    )
