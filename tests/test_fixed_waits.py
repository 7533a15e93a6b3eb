"""No test waits a fixed time for something not to happen: it waits for the event that
proves it could no longer happen, or for a later one that proves the order. A sleep outside
a polling loop is allowed only where the time itself is what is tested, argued at the line
with a ``# fixed wait:`` comment (on it or in the comment right above)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARK = "# fixed wait:"


def fixed_waits(source: str) -> list[int]:
    """Lines of sleep calls that are not inside a loop (a loop polls for a condition) and
    not a bare yield (``sleep(0)``)."""
    found: list[int] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            loop = in_loop or isinstance(child, ast.While | ast.For | ast.AsyncFor)
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                loop = False  # a function defined in a loop is not run by it
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "sleep"
                and not in_loop
                and not (
                    child.args
                    and isinstance(child.args[0], ast.Constant)
                    and child.args[0].value == 0
                )
            ):
                found.append(child.lineno)
            visit(child, loop)

    visit(ast.parse(source), False)
    return found


def unargued(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    return [
        f"{path.relative_to(TESTS.parent)}:{n}: {lines[n - 1].strip()}"
        for n in fixed_waits(source)
        if not any(MARK in line for line in [lines[n - 1], *comments_above(lines, n)])
    ]


def comments_above(lines: list[str], n: int) -> list[str]:
    """The comment lines right above line ``n`` (1-based)."""
    above: list[str] = []
    for line in reversed(lines[: n - 1]):
        if not line.strip().startswith("#"):
            break
        above.append(line)
    return above


def test_no_test_sleeps_a_fixed_time_without_saying_why() -> None:
    # The fixture servers' sleeps are behaviour they act out (a slow start, a hang).
    modules = [p for p in TESTS.rglob("*.py") if "fixtures" not in p.parts]
    found = [line for path in sorted(modules) for line in unargued(path)]
    assert found == []


def test_the_scan_finds_a_fixed_wait_and_passes_a_poll_and_an_argued_one() -> None:
    source = (
        "import asyncio, time\n"
        "async def t(x):\n"
        "    await asyncio.sleep(0.5)\n"
        "    while not x():\n"
        "        time.sleep(0.05)\n"
        "    await asyncio.sleep(0)\n"
        "    # fixed wait: the lock is held this long\n"
        "    await asyncio.sleep(0.5)\n"
    )
    assert fixed_waits(source) == [3, 8]
    path = TESTS / "fixtures" / "_scan_probe.txt"
    try:
        path.write_text(source)
        assert [line.split(":")[1] for line in unargued(path)] == ["3"]
    finally:
        path.unlink()
