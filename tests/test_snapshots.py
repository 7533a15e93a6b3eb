"""Whole-app snapshots, from the same scenarios as screenshots/generate.py."""

from __future__ import annotations

import html
import itertools
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from pytest_textual_snapshot import node_to_report_path

from .scenarios import SCENARIOS, scenario_app

pytestmark = pytest.mark.processes  # every test here starts a process

TEXT = re.compile(r'<text[^>]*?x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', re.S)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_screen(snap_compare: Any, tmp_path: Path, name: str, request: Any) -> None:
    with scenario_app(name, tmp_path) as app:
        scenario = SCENARIOS[name]
        same = snap_compare(app, terminal_size=scenario.size, run_before=scenario.run)
        assert same, "\n".join([getattr(app, "layout_notes", ""), *changed_rows(request.node)])


def changed_rows(node: Any) -> list[str]:
    """The screen's rows that differ from the snapshot's, as text: what a failure on a
    machine whose report cannot be opened says about it."""
    _, expected, actual, *_ = pickle.loads(node_to_report_path(node).read_bytes())
    return [
        f"row {index}\n  expected {old}\n  actual   {new}"
        for index, (old, new) in enumerate(
            itertools.zip_longest(screen_rows(expected), screen_rows(actual), fillvalue="")
        )
        if old != new
    ]


def screen_rows(svg: str) -> list[str]:
    runs: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in TEXT.findall(svg):
        runs.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    return ["".join(text for _, text in sorted(row)) for _, row in sorted(runs.items())]
