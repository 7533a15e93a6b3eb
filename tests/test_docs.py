"""The README is the newcomer's page (at most 400 lines) and links every page of docs/; every
relative link in them leads to a file that exists; the test command it gives is the one CI
runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_at_most_400_lines() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 400


def test_the_readme_links_every_page_of_docs() -> None:
    linked = set(LINK.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    unlinked = [
        p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in linked
    ]
    assert unlinked == []


def test_every_relative_link_leads_to_a_file() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages()
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == []


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "sh .ci/dev test          # run the whole test suite" in readme
    assert "\nsh .ci/dev test ||" in (ROOT / ".ci" / "run").read_text()
