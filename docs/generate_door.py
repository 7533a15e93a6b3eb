"""Writes docs/door.md: the door into the core, as the code has it. Every public method of
``Core`` (core/api/__init__.py) under its section, with its docstring's first sentence; the
names of the value types, errors and text helpers the front ends may use; the modules the
import contract lets them import; and the profiles a front end opens the core with.

    python docs/generate_door.py          write docs/door.md
    python docs/generate_door.py --check  exit 1 if docs/door.md is not what it would write
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "door.md"
API = ROOT / "core" / "api"
COMMAND = "python docs/generate_door.py"
SECTION = re.compile(r"^\s*# -- (.+?) -+\s*$")


def first_sentence(node: ast.AST) -> str:
    docstring = ast.get_docstring(node)  # type: ignore[arg-type]
    if not docstring:
        return ""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The parameters after ``self``, as written (annotations left out for reading)."""
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args][1:]
    shown = names[:]
    if args.vararg:
        shown.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        shown.append("*")
    shown += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        shown.append(f"**{args.kwarg.arg}")
    return ", ".join(shown)


def core_methods() -> list[tuple[str, list[str]]]:
    """Core's public methods and properties by section, in the file's order."""
    source = (API / "__init__.py").read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    core = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Core")
    sections: list[tuple[str, list[str]]] = [("opening and closing", [])]
    marks = {i + 1: m.group(1) for i, line in enumerate(lines) if (m := SECTION.match(line))}
    last = core.lineno
    for node in core.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for line in sorted(marks):
            if last < line < node.lineno:
                sections.append((marks[line], []))
        last = node.lineno
        if node.name.startswith("_") and node.name not in ("__aenter__",):
            continue
        if node.name == "__aenter__":
            sections[0][1].append("- `async with Core.open(...) as core:` — closed at the end.")
            continue
        prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
        is_property = any(
            isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
        )
        called = f"core.{node.name}" if is_property else f"{prefix}core.{node.name}("
        called += "" if is_property else f"{signature(node)})"
        if node.name == "open":
            called = f"await Core.open({signature(node)})"
        text = first_sentence(node)
        sections[-1][1].append(f"- `{called}`" + (f" — {text}" if text else ""))
    return [(name, items) for name, items in sections if items]


def exported(module: str) -> list[str]:
    """The ``__all__`` of one of the door's modules, read from its source."""
    path = API / ("__init__.py" if module == "api" else f"{module}.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return sorted(ast.literal_eval(node.value))
    return []


def door_modules() -> list[str]:
    """The core modules the front ends may import, as the import contract lists them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    door = next(c for c in contracts if c.get("id") == "door")
    return [rule.split("->")[1].strip() for rule in door["ignore_imports"]][1:]


def profiles() -> list[str]:
    from diana.core.profiles import Profile

    named = [Profile.APP, Profile.READ, Profile.DECIDE, Profile.CALL, Profile.GATEWAY]
    parts = [f.name for f in dataclasses.fields(Profile) if f.name != "name"]
    rows = ["| profile | " + " | ".join(parts) + " |", "|---" * (len(parts) + 1) + "|"]
    for profile in named:
        cells = []
        for part in parts:
            value = getattr(profile, part)
            if part == "servers" and not profile.agents:
                value = False  # servers are connected by agents: without them, none
            cells.append("yes" if value is True else "" if value is False else str(value))
        rows.append(f"| `{profile.name}` | " + " | ".join(cells) + " |")
    return rows


def render() -> str:
    lines = [
        "# The door into the core",
        "",
        f"Generated from core/api/ and core/profiles.py by `{COMMAND}`; do not edit by hand.",
        "Why there is one door, and the layers behind it: [architecture.md](architecture.md).",
        "",
        "A front end (the app `tui/app.py`, the command line `tui/cli/`) opens a `Core` with a",
        "profile and the ports it lends, and asks it for everything. It may import only these",
        "core modules (pyproject.toml's `door` contract; `tests/test_layering.py`):",
        "",
        *[f"- `{module}`" for module in door_modules()],
        "",
        "## `Core` (`diana.core.api`)",
    ]
    for name, items in core_methods():
        lines += ["", f"### {name[0].upper()}{name[1:]}", "", *items]
    helpers = [n for n in exported("api") if n not in ("Core", "PolicyRules")]
    lines += [
        "",
        "## What a front end reads with (`diana.core.api`)",
        "",
        "The pure helpers for what a person typed or a file holds, each where the core keeps",
        "it: " + ", ".join(f"`{n}`" for n in helpers) + ".",
    ]
    for module, title in (
        ("types", "The value types and constants (`diana.core.api.types`)"),
        ("errors", "The errors (`diana.core.api.errors`)"),
        ("shown", "Values as text (`diana.core.api.shown`)"),
    ):
        lines += ["", f"## {title}", "", ", ".join(f"`{n}`" for n in exported(module)) + "."]
    lines += [
        "",
        "## Profiles (`diana.core.profiles`)",
        "",
        "What a core opened with each profile opens (core/profiles.py); a command opens the",
        "smallest that does its work.",
        "",
        *profiles(),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"docs/door.md is not the door as the code has it: run `{COMMAND}`")
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
