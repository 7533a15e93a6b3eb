"""Writes docs/modules.md: every module of core/ and tui/, grouped by package, each with the
summary of its docstring (its first sentence).

    python docs/generate_modules.py          write docs/modules.md
    python docs/generate_modules.py --check  exit 1 if docs/modules.md is not what it would write
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "modules.md"
SOURCES = {"core": "diana.core", "tui": "diana.tui"}
COMMAND = "python docs/generate_modules.py"


def summary(path: Path) -> str:
    """The docstring's first sentence, on one line (its first paragraph when no sentence
    ends there)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not docstring:
        return "(no docstring)"
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def packages() -> dict[str, list[tuple[str, str]]]:
    """Each package's dotted name -> its modules as (file, summary), in name order."""
    found: dict[str, list[tuple[str, str]]] = {}
    for folder, dotted in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder)
            if any(part.startswith((".", "_shipped")) for part in relative.parts):
                continue
            package = ".".join([dotted, *relative.parent.parts])
            found.setdefault(package, []).append((str(path.relative_to(ROOT)), summary(path)))
    return dict(sorted(found.items()))


def render() -> str:
    lines = [
        "# Modules",
        "",
        f"Generated from each module's docstring by `{COMMAND}`; do not edit by hand.",
        "The layers and how the parts fit together: [architecture.md](architecture.md).",
    ]
    for package, modules in packages().items():
        lines += ["", f"## `{package}`", ""]
        lines += [f"- `{file}` — {text}" for file, text in modules]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"docs/modules.md is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
