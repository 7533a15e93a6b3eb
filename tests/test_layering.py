"""The core stays headless: importing all of it loads no Textual and no UI module; and its
layers hold: no module imports a higher layer, even inside a function."""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import diana.core
import pytest

PROBE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] == "textual" or m.startswith("diana.tui"))
print(",".join(leaked))
"""


@pytest.mark.processes
def test_core_imports_no_ui_module() -> None:
    root = Path(diana.core.__file__).parent
    modules = ["diana.core"] + [
        m.name for m in pkgutil.walk_packages([str(root)], prefix="diana.core.")
    ]
    expected = {"diana.core.calls.orchestrator", "diana.core.runtime", "diana.core.tools.builtin"}
    assert expected <= set(modules)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


ROOT = Path(__file__).resolve().parent.parent
# lint-imports over the sources under the working directory alone: any other place on the
# path that holds a diana/core (the editable install's links) is taken off it
LINT_IMPORTS = """
import sys
from pathlib import Path
here = Path.cwd().resolve()
sys.path = [
    p for p in sys.path
    if Path(p or ".").resolve() == here or not Path(p, "diana", "core", "__init__.py").is_file()
]
from importlinter.cli import lint_imports_command
sys.argv[0] = "lint-imports"
sys.exit(lint_imports_command())
"""


def core_layers(root: Path) -> subprocess.CompletedProcess[str]:
    """The core's layers contract of pyproject.toml, checked over ``root/diana/core``."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            LINT_IMPORTS,
            "--no-cache",
            "--no-logo",
            "--contract",
            "core-layers",
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_the_sources(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for source in ("core", "tui"):
        shutil.copytree(
            ROOT / source,
            tmp_path / "diana" / source,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return tmp_path


@pytest.mark.processes
def test_the_core_keeps_its_layers(tmp_path: Path) -> None:
    done = core_layers(copy_of_the_sources(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing lower imports upward KEPT" in done.stdout


@pytest.mark.processes
def test_an_upward_import_inside_a_function_breaks_the_layers(tmp_path: Path) -> None:
    root = copy_of_the_sources(tmp_path)
    db = root / "diana" / "core" / "storage" / "db.py"
    db.write_text(
        db.read_text(encoding="utf-8")
        + "\n\ndef _reaches_up() -> None:\n    from ..chat import session  # noqa: F401\n",
        encoding="utf-8",
    )
    done = core_layers(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "diana.core.storage is not allowed to import diana.core.chat" in done.stdout
    assert "diana.core.storage.db -> diana.core.chat.session" in done.stdout


@pytest.mark.processes
def test_a_new_top_level_core_module_must_be_given_a_layer(tmp_path: Path) -> None:
    root = copy_of_the_sources(tmp_path)
    (root / "diana" / "core" / "helpers.py").write_text('"""Unplaced."""\n', encoding="utf-8")
    done = core_layers(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "diana.core.helpers" in done.stdout
