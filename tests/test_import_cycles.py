"""No two modules of the core or the front ends import each other, however indirectly.

Every import counts: at the top of a module, inside a function, or only for the type
checker (``if TYPE_CHECKING:``). A cycle is a strongly connected group of more than one
module; the test names the modules of each.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("core", "tui")  # installed as diana.core and diana.tui


def modules() -> dict[str, Path]:
    """Each module's dotted name, as installed, and its file."""
    found: dict[str, Path] = {}
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(("diana", *parts))] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``name`` imports anywhere in its file (a name imported from a
    package counts as its submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    found = {_nearest(target, known) for target in targets}
    return {module for module in found if module and module != name}


def _nearest(target: str, known: dict[str, Path]) -> str:
    """The module itself, or the closest package of it that is one of ours ('' if none)."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def strong(module: str) -> None:  # a few hundred modules: recursion is deep enough
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                strong(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            strong(module)
    return groups


def test_the_cycle_finder_sees_a_cycle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_has_the_imports_of_functions_and_of_the_type_checker() -> None:
    known = modules()
    runtime = imported("diana.core.runtime", known["diana.core.runtime"], known)
    assert {"diana.core.calls.orchestrator", "diana.core.ports"} <= runtime
    assert "diana.core.chat.session" in runtime  # under TYPE_CHECKING, and in a function
    commands = imported("diana.tui.cli.commands", known["diana.tui.cli.commands"], known)
    assert "diana.core.api" in commands  # Core, inside run_on_runtime only


def test_no_module_imports_itself_through_others() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in found)
