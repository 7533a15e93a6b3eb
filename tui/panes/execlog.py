"""The Execution Log pane: every tool call, this process's and others', live and filterable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from diana.core.api import Core
from diana.core.api.shown import held_outcome, one_line
from diana.core.api.types import CallRecord, CallsFromElsewhere, Proposal
from diana.core.events import CallFinished, CallProgress, CallStarted, ProposalsChanged
from rich.style import Style
from textual import on, work
from textual._two_way_dict import TwoWayDict
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.message import Message
from textual.widgets import DataTable, Input
from textual.widgets.data_table import CellKey, RowKey

from ..entry import Entry
from ..fitted import FittedTable
from ..messages import CoreEvent
from ..theme import ThemeAware
from .base import Pane
from .logged_calls import COLUMN_INDEX, COLUMNS, STATUS_STYLE, CallFilter, LoggedCall

HISTORY_ROWS = 200  # earlier calls shown at start

MAX_ROWS = 500
# How often (seconds) the pane looks for calls other processes logged.
ELSEWHERE_INTERVAL = 0.25
# More changes than this within FLOOD_WINDOW seconds is a flood: the table is then redrawn at
# most every SHOW_INTERVAL seconds. Below it every change is shown at once.
FLOOD_CHANGES = 100
FLOOD_WINDOW = 1.0
SHOW_INTERVAL = 0.1


class LogTable(FittedTable):
    """The log's rows. Home and End go to the first and last call; the columns are fitted
    to the width (``widest`` is set by the pane): the correlation id, who asked, then the
    agent give way to the result; a resize keeps the selected call in view."""

    COLUMNS = COLUMNS
    GIVES_WAY = ("cid", "from", "agent")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First call", show=False, id="log.first"),
        Binding("end", "scroll_bottom", "Last call", show=False, id="log.last"),
    ]

    @property
    def following(self) -> bool:
        """The cursor is on the newest row (or there is none): new rows take it along."""
        return self.cursor_row >= self.row_count - 1

    def on_resize(self, _event: Resize) -> None:  # after FittedTable's, which fits
        self.keep_cursor_in_view()

    def watch_show_horizontal_scrollbar(self, _shown: bool) -> None:
        self.keep_cursor_in_view()  # the scrollbar takes a row of the view

    def remove_rows(self, keys: list[str]) -> None:
        """Remove the rows of ``keys`` in one pass: `remove_row` renumbers every row each
        time, too dear for the oldest rows of a flood. What it does, once (textual is
        pinned, and tests/test_execlog.py checks the table after it)."""
        if len(keys) <= 1:
            for key in keys:
                self.remove_row(key)
            return
        doomed = set(keys)
        kept = [row.key for row in self.ordered_rows if row.key not in doomed]
        self._row_locations = TwoWayDict({key: index for index, key in enumerate(kept)})
        for key in doomed:
            for column_key in self._data.get(RowKey(key), {}):
                self._updated_cells.discard(CellKey(RowKey(key), column_key))
            self.rows.pop(RowKey(key), None)
            self._data.pop(RowKey(key), None)
        self._update_count += 1
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # kept within the rows left
        self.hover_coordinate = self.hover_coordinate
        self.check_idle()
        self.refresh(layout=True)

    def keep_cursor_in_view(self) -> None:
        """Once the new size is laid out, scroll so the cursor's row shows (wherever the
        cursor is by then)."""
        self.call_after_refresh(self._reveal_cursor)

    def _reveal_cursor(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.cursor_row)


class ExecutionLogPane(ThemeAware, Pane):
    """Every call as it happens, made here or by any other process: time, correlation id,
    tool, agent, status, latency, result (while it runs, how far it has got, as its server
    says). `/` filters the rows; Enter on a call that needed approval opens its proposal;
    `x` cancels the selected call while it runs."""

    PANE_TITLE = "Execution Log"
    SHORT_TITLE = "Log"
    FOCUS_KEY = "F6"
    # Calls as they happen; decisions, which the rows of held calls follow.
    EVENTS = (CallStarted, CallProgress, CallFinished, ProposalsChanged)
    BINDINGS = [
        Binding("slash", "filter", "Filter", id="log.filter"),
        Binding("escape", "clear_filter", "Clear filter", id="log.clear_filter"),
        Binding("x", "cancel_call", "Cancel call", id="log.cancel"),
    ]
    # A one-line filter, hidden until `/`: small enough to live with the widget.
    DEFAULT_CSS = """
    ExecutionLogPane > #log-filter {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
    }
    """

    @dataclass
    class CancelRequested(Message):
        """x on a call of this app's that is running: stop it."""

        call_id: int
        tool: str

    @dataclass
    class ProposalRequested(Message):
        """Enter on a call that waited for, or ran from, an approval: show that proposal."""

        correlation_id: str
        tool: str
        proposal: str | None  # the id, when the call names it
        during: tuple[str, str] | None  # else: the call's started and finished times

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: dict[str, LoggedCall] = {}  # oldest first
        self.filter = CallFilter()
        self.newest_stored_id = 0  # the newest execution_log row shown
        # What the table does not show yet (see `show_changes`).
        self._added: dict[str, None] = {}  # keys of new calls, oldest first
        self._changed: set[str] = set()
        self._forgotten: list[str] = []  # keys of calls past MAX_ROWS
        self._show_posted = False
        self._last_shown = 0.0
        self._window_start = 0.0  # changes counted in windows of FLOOD_WINDOW seconds
        self._window_changes = 0
        self.palette: dict[str, Style] = {}

    def compose(self) -> ComposeResult:
        yield Entry(placeholder="tool:NAME status:failed words — Esc clears", id="log-filter")
        yield LogTable(id="log-table", classes="pane-body")

    def on_mount(self) -> None:  # Pane.on_mount runs too: Textual calls each class's handler
        self.palette = self.status_palette()

    @property
    def table(self) -> LogTable:
        return self.query_one("#log-table", LogTable)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#log-filter", Input)

    # -- colours ----------------------------------------------------------------------------

    def status_palette(self) -> dict[str, Style]:
        """Each status's style in the app's current theme."""
        return {status: self.ink(style) for status, style in STATUS_STYLE.items()}

    def restyle(self) -> None:
        palette = self.status_palette()
        if palette != self.palette:
            self.palette = palette
            self._show_matching()

    # -- calls in -------------------------------------------------------------------------

    async def open(self, core: Core) -> None:
        """At start: the latest calls already logged, then every call as it comes (this
        app's own as core events, other processes' from the database)."""
        self.load_history(await core.recent_calls(HISTORY_ROWS))
        self.follow(core.calls_from_elsewhere(self.newest_stored_id))

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, CallStarted):
            self.call_started(event)
        elif isinstance(event, CallProgress):
            self.call_progressed(event)
        elif isinstance(event, CallFinished):
            self.call_finished(event)
        elif isinstance(event, ProposalsChanged):
            if isinstance(event.written, Proposal):  # as written here: nothing to read
                self.follow_decision(event.written)
                self._show_soon()
            else:
                self.follow_decisions()

    @work(exclusive=True, group="log-decisions", exit_on_error=False)
    async def follow_decisions(self) -> None:
        """A held call's row follows its proposal once decided, wherever it was decided:
        approved (it ran as a call of its own), rejected with the reason, or withdrawn."""
        if self.core is None:
            return
        core = self.core
        for call in [c for c in self.calls.values() if c.status == "pending_approval"]:
            if call.proposal is None:
                continue
            try:
                proposal = await core.proposal(call.proposal)
            except Exception:  # gone or damaged: the row says what it said
                continue
            self._row_decided(call, proposal)
        self._show_soon()

    def follow_decision(self, proposal: Proposal) -> None:
        """The rows held for this proposal, once it is decided."""
        for call in self.calls.values():
            if call.status == "pending_approval" and call.proposal == proposal.id:
                self._row_decided(call, proposal)

    def _row_decided(self, call: LoggedCall, proposal: Proposal) -> None:
        decided = held_outcome(proposal.status.value, proposal.reject_reason, proposal.error)
        if decided is not None:
            call.status, call.summary = decided[0], one_line(decided[1])
            self._changed.add(call.key)

    def load_history(self, calls: list[CallRecord]) -> None:
        """Rows already in the execution log (from ``recent_calls``), oldest first."""
        self.add_stored(calls)
        self.show_changes()  # at once: the app is ready with its history on screen

    def add_stored(self, calls: list[CallRecord]) -> None:
        """Rows read from the execution log, oldest first: history, or calls others made."""
        self._append([LoggedCall.of(call, f"db-{call.row_id}") for call in calls])
        for call in calls:
            self.newest_stored_id = max(self.newest_stored_id, call.row_id or 0)

    def follow(self, elsewhere: CallsFromElsewhere) -> None:
        """Show, as they come, the calls other processes log (this app's own calls arrive
        as events: ``call_started``, ``call_finished``)."""
        self.follow_elsewhere(elsewhere)

    @work(exclusive=True, group="log-elsewhere", exit_on_error=False)
    async def follow_elsewhere(self, elsewhere: CallsFromElsewhere) -> None:
        """Look every ELSEWHERE_INTERVAL: a cheap check while nothing changed, one read of
        every new row (a burst in one go) when something did."""
        while not elsewhere.closed:
            await asyncio.sleep(ELSEWHERE_INTERVAL)
            try:
                calls = await elsewhere.poll(limit=MAX_ROWS)
            except Exception:
                if elsewhere.closed:
                    return  # the app is closing
                raise
            if calls:
                self.add_stored(calls)

    def call_started(self, event: CallStarted) -> None:
        self._append(
            [
                LoggedCall(
                    f"call-{event.call_id}",
                    event.started_at,
                    event.correlation_id,
                    event.tool,
                    event.agent,
                    "running",
                    None,
                    "",
                    event.origin,
                    proposal=event.proposal,
                )
            ]
        )

    def call_progressed(self, event: CallProgress) -> None:
        key = f"call-{event.call_id}"
        call = self.calls.get(key)
        if call is None or call.status != "running":
            return
        call.summary = event.describe()
        self._changed.add(key)
        self._show_soon()

    def call_finished(self, event: CallFinished) -> None:
        key = f"call-{event.call_id}"
        call = self.calls.get(key)
        if call is None:
            self._append([LoggedCall.of(event, key)])
            return
        call.status, call.latency_ms, call.summary = event.status, event.latency_ms, event.summary
        call.finished_at = event.finished_at
        self._changed.add(key)
        self.refresh_bindings()
        self._show_soon()

    def _append(self, calls: list[LoggedCall]) -> None:
        """New calls, newest last; the oldest beyond MAX_ROWS are forgotten."""
        for call in [call for call in calls if call.key not in self.calls][-MAX_ROWS:]:
            self.calls[call.key] = call
            self._added[call.key] = None
        while len(self.calls) > MAX_ROWS:
            oldest = next(iter(self.calls))
            del self.calls[oldest]
            if oldest in self._added:
                del self._added[oldest]  # never shown
            else:
                self._forgotten.append(oldest)
        self._show_soon()

    def _show_soon(self) -> None:
        """Have the table show the changes once the messages already queued are handled, so
        a burst is drawn in one batch; in a flood, at most every SHOW_INTERVAL (each redraw
        makes garbage that lives long enough to be collected in full, which pauses the app)."""
        now = time.monotonic()
        if now - self._window_start >= FLOOD_WINDOW:
            self._window_start, self._window_changes = now, 0
        self._window_changes += 1
        if self._show_posted:
            return
        self._show_posted = True
        wait = SHOW_INTERVAL - (now - self._last_shown)
        if self._window_changes > FLOOD_CHANGES and wait > 0:
            self.set_timer(wait, self.show_changes)
        else:
            self.call_later(self.show_changes)

    def show_changes(self) -> None:
        """Bring the table up to date with the calls added, changed and forgotten since."""
        self._show_posted = False
        self._last_shown = time.monotonic()
        added, changed, forgotten = self._added, self._changed, self._forgotten
        self._added, self._changed, self._forgotten = {}, set(), []
        table = self.table
        gone = [key for key in forgotten if key in table.rows]
        updated = []
        for key in changed:
            call = self.calls.get(key)
            if call is None or key in added:
                continue  # forgotten, or drawn below as it is now
            if key in table.rows:
                if self.filter.matches(call):
                    updated.append(call)
                else:
                    gone.append(key)
            elif self.filter.matches(call):
                self._show_matching()  # it now belongs among rows already shown
                return
        following = table.following
        selected = None if following else self._selected_key()
        cursor = table.cursor_row
        above = sum(1 for key in gone if table.get_row_index(key) < cursor)
        table.remove_rows(gone)
        for call in updated:
            cells = call.cells(self.palette)
            for column in ("status", "latency", "result"):
                table.update_cell(call.key, column, cells[COLUMN_INDEX[column]])
            table.widen(call.texts())
        for key in added:
            call = self.calls[key]
            if self.filter.matches(call):
                table.add_row(*call.cells(self.palette), key=key)
                table.widen(call.texts())
        if table.row_count == 0:
            return
        if following:
            table.move_cursor(row=table.row_count - 1)
        elif selected is not None and selected in table.rows:
            # Not yanked: the same call stays selected, and the view stays where it was.
            table.move_cursor(row=table.get_row_index(selected), scroll=False)
            table.scroll_y = max(0, table.scroll_y - above)

    def _selected_key(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return row_key.value

    def _show_matching(self) -> None:
        """Fill the table again with the calls the filter lets through, keeping the cursor
        on the same call when it is still shown, else on the newest."""
        self._added, self._changed, self._forgotten = {}, set(), []  # all drawn here
        table = self.table
        selected = self.selected_call()
        table.clear()
        table.widest.clear()
        for call in self.calls.values():
            if self.filter.matches(call):
                table.add_row(*call.cells(self.palette), key=call.key)
                table.widen(call.texts())
        if selected is not None and selected.key in table.rows:
            table.move_cursor(row=table.get_row_index(selected.key))
        elif table.row_count:
            table.move_cursor(row=table.row_count - 1)

    def selected_call(self) -> LoggedCall | None:
        key = self._selected_key()
        return None if key is None else self.calls.get(key)

    def shown_calls(self) -> Iterator[LoggedCall]:
        """The calls in the table, top to bottom."""
        for row in self.table.ordered_rows:
            if row.key.value is not None and row.key.value in self.calls:
                yield self.calls[row.key.value]

    # -- filter ---------------------------------------------------------------------------

    def apply_filter(self, text: str) -> None:
        """Show only the calls ``text`` (``tool:NAME status:STATUS words``) lets through."""
        wanted = CallFilter.parse(text)
        if wanted == self.filter:
            return
        self.filter = wanted
        self.border_title = (
            f"{self.PANE_TITLE} · filter: {wanted.text}" if wanted else self.PANE_TITLE
        )
        self._show_matching()

    def action_filter(self) -> None:
        self.filter_input.display = True
        self.filter_input.focus()

    def action_clear_filter(self) -> None:
        self.filter_input.value = ""
        self.filter_input.display = False
        self.apply_filter("")
        self.table.focus()

    def action_cancel_call(self) -> None:
        call = self.selected_call()
        if call is None or call.status != "running":
            return
        if not call.key.startswith("call-"):  # read from the database: another process's
            self.notify(f"{call.tool} runs in another process", severity="warning")
            return
        self.post_message(self.CancelRequested(int(call.key.removeprefix("call-")), call.tool))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_call":  # offered only while the selected call runs
            call = self.selected_call() if self.is_mounted else None
            return call is not None and call.status == "running"
        if action == "clear_filter":
            # Esc belongs to others unless there is a filter to clear.
            return bool(self.filter) or self.filter_input.display
        if action == "filter":
            return not self.filter_input.has_focus  # there, `/` is typed
        return True

    @on(Input.Changed, "#log-filter")
    def filter_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.apply_filter(event.value)

    @on(Input.Submitted, "#log-filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.table.focus()

    @on(DataTable.RowHighlighted, "#log-table")
    def row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.refresh_bindings()  # x cancels only a running call

    @on(DataTable.RowSelected, "#log-table")
    def row_chosen(self, event: DataTable.RowSelected) -> None:
        event.stop()
        call = self.calls.get(str(event.row_key.value))
        if call is None or not call.has_proposal:
            return
        during = None
        if call.finished_at is not None:
            during = (call.started_at.isoformat(), call.finished_at.isoformat())
        self.post_message(
            self.ProposalRequested(call.correlation_id, call.tool, call.proposal, during)
        )
