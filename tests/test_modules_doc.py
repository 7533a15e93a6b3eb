"""docs/modules.md is generated from the modules' docstrings and matches the tree: a module
added, removed or given another docstring without regenerating it fails here, naming the
command that brings it up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_modules", ROOT / "docs" / "generate_modules.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_list_matches_the_tree() -> None:
    generate = generator()
    written = (ROOT / "docs" / "modules.md").read_text(encoding="utf-8")
    assert written == generate.render(), f"docs/modules.md is out of date: run {generate.COMMAND}"


def test_every_module_of_core_and_tui_is_listed_with_its_summary() -> None:
    rendered = generator().render()
    for folder in ("core", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            if "_shipped" not in path.parts:
                assert f"`{path.relative_to(ROOT)}` — " in rendered, path
    assert "- `core/runtime.py` — The Runtime: " in rendered


def test_a_new_module_changes_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generate = generator()
    (tmp_path / "core" / "fresh").mkdir(parents=True)
    (tmp_path / "core" / "fresh" / "thing.py").write_text('"""A thing. More about it."""\n')
    (tmp_path / "tui").mkdir()
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    assert "## `diana.core.fresh`\n\n- `core/fresh/thing.py` — A thing.\n" in generate.render()
