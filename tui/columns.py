"""The rule that fits a table's columns to a width, shared by the panes' tables
(tui/fitted.py) and the `diana` command's (tui/cli/common.py). No Textual here: the command
line imports it without the app.

Whole columns get what their widest cell needs; the last column takes what is left; while
it has less than it wants, the columns named to give way are cut to their least width, then
left out. A column that does not give way (an id, a name) is never cut."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

GAP = 1  # blank cells after each column shown but the last
ELLIPSIS = "…"


@dataclass(frozen=True)
class FitColumn:
    """A column. ``least`` None: never cut, as wide as its widest cell (up to ``most``, past
    which a cell is cut with an ellipsis); else it gives way, down to ``least`` (and then,
    if ``droppable``, out of the table), when the table is too narrow for every column."""

    key: str
    label: str
    least: int | None = None
    most: int | None = None
    droppable: bool = False


def fit_widths(
    columns: tuple[FitColumn, ...],
    available: int,
    widest: Mapping[str, int],
    gives_way: tuple[str, ...],
    last_wants: int,
    gap: int = GAP,
) -> dict[str, int]:
    """Each column's width (its gap not counted; 0: left out) in ``available`` cells, given
    the width of each column's widest cell: whole columns get what they need; the last takes
    what is left, and while that is short of ``last_wants`` the columns of ``gives_way`` are
    cut, first to last, then (those that may be) left out. If even that does not fit, the
    columns keep their least widths (and the table scrolls)."""
    widths = {}
    for column in columns:
        wanted = max(cell_len(column.label), widest.get(column.key, 0))
        widths[column.key] = wanted if column.most is None else min(wanted, column.most)
    last = columns[-1]
    assert last.least is not None
    others = [c for c in columns if c is not last]

    def left() -> int:
        return available - sum(widths[c.key] + gap for c in others if widths[c.key])

    giving = [next(c for c in columns if c.key == key) for key in gives_way]
    for column in giving:  # cut down (one whose least is 0: left out whole, never cut)
        assert column.least is not None
        short = last_wants - left()
        if short > 0 and column.least == 0:
            widths[column.key] = 0
        elif short > 0:
            widths[column.key] -= max(0, min(short, widths[column.key] - column.least))
    for column in giving:  # then left out
        if left() < last_wants and column.droppable:
            widths[column.key] = 0
    if left() < last.least:  # even so too narrow: keep what can be read, and scroll
        for column in giving:
            assert column.least is not None
            widths[column.key] = min(column.least, widths[column.key] or column.least)
    widths[last.key] = max(last.least, left())
    return widths


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: cut with an ellipsis if it is wider."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1) + ELLIPSIS
