"""Tables whose columns fit the width they have: nothing scrolls sideways unless even the
least widths do not fit. Whole columns get what their widest cell needs; the last column
takes what is left; while it has less than it wants, the columns named to give way are cut
to their least width, then left out (the rule, tui/columns.py, is the `diana` command's
too). The Execution Log and the Approvals pane use it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.css.styles import RenderStyles
from textual.events import Resize
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from .columns import GAP, FitColumn, fit_widths


class Cell(Text):
    """A table cell that keeps one blank column at its right: cells are cut (with an
    ellipsis) short of the next column, however narrow the columns get."""

    # DataTable measures every new cell, for columns sized to their content; these columns
    # have set widths, and each measure asks the terminal for its size: not measured.
    __rich_measure__ = None  # type: ignore[assignment]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterable[Segment]:
        narrower = options.update_width(max(1, options.max_width - GAP))
        yield from super().__rich_console__(console, narrower)


def cell(text: str | Text, style: Style | str = "", *, right: bool = False) -> Cell:
    """A cell of a fitted table: one line, cut with an ellipsis (a number: to the right)."""
    justify: Literal["left", "right"] = "right" if right else "left"
    if isinstance(text, Text):
        made = Cell(
            text.plain, style=text.style, no_wrap=True, overflow="ellipsis", end="", justify=justify
        )
        made.spans = list(text.spans)
        return made
    return Cell(text, style=style, no_wrap=True, overflow="ellipsis", end="", justify=justify)


class FittedTable(DataTable[Any]):
    """A DataTable whose columns fit its width (``widest`` is set by its owner, or kept up
    to date by ``widen``)."""

    COLUMNS: ClassVar[tuple[FitColumn, ...]] = ()
    GIVES_WAY: ClassVar[tuple[str, ...]] = ()
    LAST_WANTS: ClassVar[int] = 24

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", cell_padding=0, **kwargs)
        self.widest: dict[str, int] = {}
        self.fitted_to: tuple[int, tuple[tuple[str, int], ...]] | None = None
        self.left_out: list[str] = []  # the labels of the columns too narrow to show
        self._drawn_size: Size | None = None  # the size of the last Resize
        # For tables fitted to what they list now (track/untrack): each row's widths, and
        # how many rows have each width, per column.
        self._row_widths: dict[str, tuple[int, ...]] = {}
        self._width_counts: list[Counter[int]] = [Counter() for _ in self.COLUMNS]
        # The parts' styles (cursor, header, ...) the lines drawn so far were drawn with, by
        # the table's pseudo-classes (focus, hover, enabled): see notify_style_update.
        self._drawn_with: dict[object, list[RenderStyles]] = {}

    def on_mount(self) -> None:
        for column in self.COLUMNS:
            self.add_column(cell(column.label), key=column.key, width=cell_len(column.label))
        self.fit_columns()

    def widen(self, texts: Iterable[str]) -> None:
        """Make room for a row showing ``texts`` (one per column)."""
        grew = False
        for column, text in zip(self.COLUMNS, texts, strict=True):
            width = cell_len(text)
            if width > self.widest.get(column.key, 0):
                self.widest[column.key] = width
                grew = True
        if grew:
            self.fit_columns()

    def track(self, key: str, texts: Iterable[str], *, fit: bool = True) -> None:
        """Fit the columns to the rows listed now: ``key``'s row shows ``texts`` (added, or
        changed). Kept as counts of widths, so a thousand rows cost no more than ten."""
        self.untrack(key, fit=False)
        widths = tuple(cell_len(text) for text in texts)
        self._row_widths[key] = widths
        for counts, width in zip(self._width_counts, widths, strict=True):
            counts[width] += 1
        if fit:
            self.fit_tracked()

    def untrack(self, key: str, *, fit: bool = True) -> None:
        """``key``'s row is no longer listed."""
        widths = self._row_widths.pop(key, None)
        if widths is not None:
            for counts, width in zip(self._width_counts, widths, strict=True):
                counts[width] -= 1
                if not counts[width]:
                    del counts[width]
        if fit:
            self.fit_tracked()

    def untrack_all(self) -> None:
        self._row_widths.clear()
        self._width_counts = [Counter() for _ in self.COLUMNS]

    def fit_tracked(self) -> None:
        """Fit the columns to the rows tracked (after a batch of `track(..., fit=False)`)."""
        self.widest = {
            column.key: max(counts, default=0)
            for column, counts in zip(self.COLUMNS, self._width_counts, strict=True)
        }
        self.fit_columns()

    def fit_columns(self) -> None:
        available = self.scrollable_content_region.width
        if available <= 0:
            return  # not laid out yet: fitted on the first resize
        key = (available, tuple(sorted(self.widest.items())))
        if key == self.fitted_to:
            return
        self.fitted_to = key
        widths = fit_widths(self.COLUMNS, available, self.widest, self.GIVES_WAY, self.LAST_WANTS)
        self.left_out = [column.label for column in self.COLUMNS if not widths[column.key]]
        for index, column in enumerate(self.COLUMNS):
            gap = GAP if index < len(self.COLUMNS) - 1 and widths[column.key] else 0
            self.columns[ColumnKey(column.key)].width = widths[column.key] + gap
        # DataTable has no public way to change a column's width: drop what it drew at the
        # old widths and have it measure its size again.
        self._clear_caches()
        self._update_count += 1
        self._require_update_dimensions = True
        self.check_idle()
        self.refresh(layout=True)

    def on_resize(self, event: Resize) -> None:
        # Textual sends a Resize to a widget shown again (a pane back on a small terminal)
        # even at the size it had: DataTable would then drop every row it drew and measure
        # all its rows again (500 listed: F3 waited for it). At the same size, nothing of
        # that has changed.
        if event.size == self._drawn_size:
            event.prevent_default()
        self._drawn_size = event.size
        self.fit_columns()

    def notify_style_update(self) -> None:
        # DataTable forgets every line and cell it drew whenever it is restyled: each time
        # it gains or loses the focus (F3, then F2), so a pane shown again drew every row
        # anew. What it keeps is keyed by its own style and pseudo-classes already; what
        # else a cell's look depends on (the parts' styles) is checked before drawing.
        Widget.notify_style_update(self)
        self._row_renderable_cache.clear()
        self._styles_cache.clear()
        self._get_styles_to_render_cell.cache_clear()
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._forget_lines_of_other_styles()
        return super().render_lines(crop)

    def _forget_lines_of_other_styles(self) -> None:
        """Lines and cells drawn with the parts' styles other than they are now for the
        table's pseudo-classes (a theme, a class) are dropped; those of other pseudo-classes
        (blurred, focused) are kept for when they come back."""
        state = self.get_pseudo_class_state()
        parts = list(self._component_styles.values())
        drawn = self._drawn_with.get(state)
        if drawn is not None and (
            len(drawn) == len(parts) and all(a is b for a, b in zip(drawn, parts, strict=True))
        ):
            return  # not restyled since
        # None: nothing was drawn with these pseudo-classes since the caches were last emptied.
        if drawn is not None and drawn != parts:
            self._row_render_cache.clear()
            self._cell_render_cache.clear()
            self._line_cache.clear()
            self._drawn_with = {}
        self._drawn_with[state] = parts

    def watch_show_vertical_scrollbar(self, _shown: bool) -> None:
        self.call_after_refresh(self.fit_columns)  # unless the gutter is stable, it took room
