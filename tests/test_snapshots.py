"""Whole-app snapshots, from the same scenarios as screenshots/generate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .scenarios import SCENARIOS, scenario_app

pytestmark = pytest.mark.processes  # every test here starts a process


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_screen(snap_compare: Any, tmp_path: Path, name: str) -> None:
    with scenario_app(name, tmp_path) as app:
        scenario = SCENARIOS[name]
        same = snap_compare(app, terminal_size=scenario.size, run_before=scenario.run)
        assert same, getattr(app, "layout_notes", "")
