"""How each tool is used, from the execution log."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from diana.core.api import agent_id_for
from diana.core.api.shown import usage_cells
from diana.core.api.types import DROPPED_FIRST, USAGE_COLUMNS
from diana.core.events import CallFinished
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import Static

from ..fitted import FitColumn, FittedTable, cell
from ..messages import CoreEvent
from ..theme import ThemeAware, tone
from .dialogs import Dialog

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import UsageReport


class UsageTable(FittedTable):
    """Each tool's figures; on a narrow terminal the least needed columns are left out (the
    view says which) rather than cut off at the edge."""

    COLUMNS = (
        FitColumn("tool", "Tool", least=12, most=32),
        FitColumn("agent", "Agent", least=5, droppable=True),
        *(
            FitColumn(
                heading.lower().replace(" ", "_"),
                heading.capitalize(),
                least=0 if heading in DROPPED_FIRST else None,
                droppable=heading in DROPPED_FIRST,
            )
            for heading in USAGE_COLUMNS[:-1]
        ),
        FitColumn("last_used", "Last used", least=17),
    )
    GIVES_WAY = ("agent", *(h.lower().replace(" ", "_") for h in DROPPED_FIRST), "tool")
    LAST_WANTS = 17  # a date and time, and the blank a cell keeps


USAGE_SORTS = (
    ("calls", lambda u: (-u.calls, u.name)),
    ("failures", lambda u: (-(u.failed + u.timed_out), -u.calls, u.name)),
    ("p95 latency", lambda u: (-(u.p95_ms or 0.0), u.name)),
    ("cost", lambda u: (-u.cost, u.name)),
    ("last used", lambda u: (u.last_used or "", u.name)),
    ("name", lambda u: (u.name, u.agent or "")),
)
USAGE_WINDOWS = (("all time", None), ("the last 24 h", 1), ("the last 7 days", 7))


class UsageScreen(ThemeAware, Dialog[None]):
    """How each tool is used, from the execution log (every process's calls): calls, how
    they ended, p50/p95 latency, cost, last use. s sorts by the next column, w changes the
    time window; it follows calls as they finish (at most once a second)."""

    BINDINGS = [
        Binding("s", "sort", "Sort", id="usage.sort"),
        Binding("w", "window", "Time window", id="usage.window"),
    ]
    EVENTS = (CallFinished,)

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.sort = 0
        self.window = 0
        self.report: UsageReport | None = None
        self._again = False

    def dialog_title(self) -> str:
        return "Tool usage"

    def compose_body(self) -> ComposeResult:
        yield Static(id="usage-summary")
        yield UsageTable(id="usage-table")

    def on_mount(self) -> None:
        super().on_mount()
        self.load()

    def on_core_event(self, _message: CoreEvent) -> None:
        if not self._again:  # calls finishing in a burst: one reading, a second later
            self._again = True
            self.set_timer(1.0, self.load)

    @work(exclusive=True, group="usage", exit_on_error=False)
    async def load(self) -> None:
        self._again = False
        core = self.core
        days = USAGE_WINDOWS[self.window][1]
        since = None if days is None else core.now() - timedelta(days=days)
        servers = {name: agent_id_for(name) for name in core.server_configs}
        self.report = await core.usage(servers, since=since)
        self.restyle()

    def restyle(self) -> None:
        report = self.report
        if report is None:
            return
        label, key = USAGE_SORTS[self.sort]
        table = self.query_one("#usage-table", UsageTable)
        table.clear()
        table.untrack_all()
        failing = {USAGE_COLUMNS.index("FAILED"), USAGE_COLUMNS.index("TIMED OUT")}
        for tool in sorted(report.tools, key=key):
            cells = usage_cells(tool)
            style = self.ink(tone("bad")) if tool.failed + tool.timed_out else ""
            row = (
                cell(tool.name, "bold"),
                cell(tool.agent or "—"),
                *(
                    cell(c, style if i in failing else "", right=True)
                    for i, c in enumerate(cells[:-1])
                ),
                cell(cells[-1]),
            )
            row_key = f"{tool.name}\0{tool.agent}"
            table.add_row(*row, key=row_key)
            table.track(row_key, [c.plain for c in row], fit=False)
        table.fit_tracked()
        self.show_summary(label)

    def show_summary(self, sorted_by: str) -> None:
        report, table = self.report, self.query_one("#usage-table", UsageTable)
        assert report is not None
        calls = sum(t.calls for t in report.tools)
        window = USAGE_WINDOWS[self.window][0]
        # A narrow terminal leaves columns out: say which, so none is missed unawares.
        hidden = (
            f" · not shown here: {', '.join(table.left_out).lower()} (diana stats has all)"
            if table.left_out
            else ""
        )
        self.query_one("#usage-summary", Static).update(
            Content.assemble(
                (f"{calls:,} calls of {len(report.tools)} tools", "bold"),
                f" in {window} · sorted by {sorted_by} · ",
                ("s", "bold"),
                " sorts · ",
                ("w", "bold"),
                " changes the window",
                hidden,
            )
        )

    def on_resize(self) -> None:
        if self.report is not None:
            self.call_after_refresh(self.show_summary, USAGE_SORTS[self.sort][0])

    def action_sort(self) -> None:
        self.sort = (self.sort + 1) % len(USAGE_SORTS)
        self.restyle()

    def action_window(self) -> None:
        self.window = (self.window + 1) % len(USAGE_WINDOWS)
        self.load()
