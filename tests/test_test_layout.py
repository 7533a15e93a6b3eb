"""Test modules share helpers through helper modules (tests/*.py not named test_*, and
tests/fixtures/), never by importing one another; and screenshots/generate.py, a product
artefact, depends on no test module, however indirectly."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def imported(path: Path) -> list[Path]:
    """The files under the repository that ``path`` imports (at the top or in a function)."""
    found: list[Path] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
            else:
                base = ROOT
            stem = base.joinpath(*(node.module or "").split(".")) if node.module else base
            targets = [stem] + [stem / alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [ROOT.joinpath(*alias.name.split(".")) for alias in node.names]
        else:
            continue
        for target in targets:
            for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                if candidate.is_file() and candidate != path:
                    found.append(candidate)
    return found


def is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py"


def test_modules_importing_test_modules() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {target.relative_to(ROOT)}"
        for path in sorted(TESTS.rglob("*.py"))
        for target in imported(path)
        if is_test_module(target)
    ]
    assert found == [], "move the shared helper into a helper module (tests/*.py, not test_*)"


def test_the_screenshot_script_depends_on_no_test_module() -> None:
    seen: set[Path] = set()
    todo = [ROOT / "screenshots" / "generate.py"]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(imported(path))
    assert TESTS / "scenarios.py" in seen  # the scan follows what the script imports
    assert sorted(str(p.relative_to(ROOT)) for p in seen if is_test_module(p)) == []


def test_the_scan_finds_each_way_of_importing_a_test_module() -> None:
    probe = TESTS / "_import_probe.py"
    probe.write_text(
        "from .test_chat import Events\n"
        "from tests.test_mcp import alive\n"
        "from . import test_cli\n"
        "def later():\n"
        "    import tests.test_gate\n"
    )
    try:
        names = sorted(target.name for target in imported(probe) if is_test_module(target))
    finally:
        probe.unlink()
    assert names == ["test_chat.py", "test_cli.py", "test_gate.py", "test_mcp.py"]
