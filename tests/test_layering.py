"""The core stays headless: importing all of it loads no Textual and no UI module; and its
layers hold: no module imports a higher layer, even inside a function."""

from __future__ import annotations

import ast
import importlib
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


def core_layers(root: Path, contract: str = "core-layers") -> subprocess.CompletedProcess[str]:
    """One contract of pyproject.toml (the core's layers), checked over ``root/diana``."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            LINT_IMPORTS,
            "--no-cache",
            "--no-logo",
            "--contract",
            contract,
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


# -- the door: the front ends reach the core through core/api and a few modules it speaks of

DOOR = {
    "diana.core.api",
    "diana.core.api.types",
    "diana.core.api.errors",
    "diana.core.api.shown",
    "diana.core.events",
    "diana.core.models",
    "diana.core.profiles",
    "diana.core.ports",
}


def front_end_imports() -> dict[str, set[str]]:
    """Every core module the front ends import (at the top or inside a function), with the
    names they take from it."""
    imported: dict[str, set[str]] = {}
    for path in (ROOT / "tui").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.startswith("diana.core"):
                    names = imported.setdefault(node.module, set())
                    names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("diana.core"):
                        imported.setdefault(alias.name, set())
    return imported


def test_the_front_ends_import_at_most_ten_core_modules_all_of_the_door() -> None:
    imported = front_end_imports()
    assert len(imported) <= 10, sorted(imported)
    assert set(imported) <= DOOR, sorted(set(imported) - DOOR)
    assert "diana.core.api" in imported  # the count is of something real


def test_every_name_the_front_ends_take_from_the_door_is_public() -> None:
    """The door's modules look names up lazily (core/api/lazy.py), so a type checker lets
    any name through: each one used must be in its module's ``__all__`` and resolve."""
    for module, names in front_end_imports().items():
        public = importlib.import_module(module)
        exported = set(getattr(public, "__all__", dir(public)))
        assert names <= exported, (module, sorted(names - exported))
        for name in names:
            assert getattr(public, name) is not None


def test_the_door_names_only_what_exists() -> None:
    for module in ("diana.core.api", "diana.core.api.types", "diana.core.api.errors"):
        public = importlib.import_module(module)
        missing = [name for name in public.__all__ if not hasattr(public, name)]
        assert missing == [], (module, missing)


@pytest.mark.processes
def test_a_command_that_reads_does_not_import_the_mcp_sdk_through_the_door() -> None:
    probe = (
        "import sys\n"
        "from diana.core.api import Core, parse_json\n"
        "from diana.core.api.types import Proposal, ServerInfo\n"
        "from diana.core.api.errors import UnknownProposal\n"
        "from diana.core.api.shown import brief_arguments\n"
        "print(','.join(m for m in ('mcp', 'ollama', 'textual') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # ServerInfo's module is plain pydantic; a server's connection would bring the SDK.
    assert done.stdout.strip() == ""


@pytest.mark.processes
@pytest.mark.parametrize(
    "bad",
    [
        "from diana.core.calls.orchestrator import Orchestrator",
        "from diana.core.runtime import Runtime",
        "import diana.core.storage.db",
    ],
)
def test_a_front_end_importing_past_the_door_breaks_the_contract(tmp_path: Path, bad: str) -> None:
    root = copy_of_the_sources(tmp_path)
    (root / "diana" / "tui" / "sneaky.py").write_text(
        f'"""Past the door."""\n\n{bad}  # noqa: F401\n', encoding="utf-8"
    )
    done = core_layers(root, "door")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "diana.tui is not allowed to import" in done.stdout
    assert "diana.tui.sneaky -> diana.core." in done.stdout


@pytest.mark.processes
def test_the_front_ends_keep_to_the_door(tmp_path: Path) -> None:
    done = core_layers(copy_of_the_sources(tmp_path), "door")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "door only KEPT" in done.stdout


def test_the_core_keeps_twelve_modules_at_most_at_its_top_level() -> None:
    root = Path(diana.core.__file__).parent
    top = [p for p in root.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 12, sorted(p.name for p in top)
