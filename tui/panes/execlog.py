from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Input

from core.events import CallFinished, CallStarted
from core.orchestrator import one_line

from .base import Pane

STATUS_STYLE = {
    "running": "cyan",
    "succeeded": "green",
    "failed": "bold red",
    "timed_out": "bold red",
    "refused": "yellow",
    "cancelled": "yellow",
}
MAX_ROWS = 500
# The origin of a call that ran because a person approved it (core/approvals/service.py).
FROM_PROPOSAL = re.compile(r"proposal (\S+)")


def _clock(at: datetime | str) -> str:
    moment = datetime.fromisoformat(at) if isinstance(at, str) else at
    return moment.astimezone().strftime("%H:%M:%S")


def _iso(at: datetime | str) -> str:
    return at if isinstance(at, str) else at.isoformat()


@dataclass
class LoggedCall:
    """One call the pane knows of, shown or not: a filter can bring it back."""

    key: str
    started_at: datetime | str
    correlation_id: str
    tool: str
    agent: str | None
    status: str
    latency_ms: float | None
    summary: str
    origin: str
    finished_at: datetime | str | None = None
    proposal: str | None = None  # the proposal id, when the call names it

    def cells(self) -> tuple[Text, ...]:
        # Text cells: a plain str would be read as markup, and "[/]" in a result would crash.
        return (
            Text(_clock(self.started_at)),
            Text(self.correlation_id),
            Text(self.tool),
            Text(self.agent or "—"),
            _status(self.status),
            Text(_latency(self.latency_ms)),
            Text(self.summary),
        )

    def searchable(self) -> str:
        """Every column as one lower-case text, for the filter's words."""
        shown = " ".join(cell.plain for cell in self.cells())
        return f"{shown} {self.status}".lower()

    @property
    def has_proposal(self) -> bool:
        return self.status == "pending_approval" or self.proposal is not None


@dataclass(frozen=True)
class CallFilter:
    """What the filter line asks for: ``tool:NAME status:STATUS words``. Repeated keys are
    alternatives; every word must appear in some column; all case-insensitive."""

    text: str = ""
    tools: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> CallFilter:
        tools, statuses, words = [], [], []
        for token in text.lower().split():
            key, colon, value = token.partition(":")
            if colon and value and key == "tool":
                tools.append(value)
            elif colon and value and key == "status":
                statuses.append(value)
            else:
                words.append(token)
        return cls(" ".join(text.split()), tuple(tools), tuple(statuses), tuple(words))

    def __bool__(self) -> bool:
        return bool(self.tools or self.statuses or self.words)

    def matches(self, call: LoggedCall) -> bool:
        """A tool name contains a tool: value; a status starts with a status: value."""
        if self.tools and not any(t in call.tool.lower() for t in self.tools):
            return False
        if self.statuses and not any(call.status.startswith(s) for s in self.statuses):
            return False
        if self.words:
            text = call.searchable()
            return all(word in text for word in self.words)
        return True


class ExecutionLogPane(Pane):
    """Every call as it happens: time, correlation id, tool, agent, status, latency, result.
    `/` filters the rows; Enter on a call that needed approval opens its proposal."""

    PANE_TITLE = "Execution Log"
    SHORT_TITLE = "Log"
    FOCUS_KEY = "F6"
    BINDINGS = [
        Binding("slash", "filter", "Filter", id="log.filter"),
        Binding("escape", "clear_filter", "Clear filter", id="log.clear_filter"),
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

    def compose(self) -> ComposeResult:
        yield Input(placeholder="tool:NAME status:failed words — Esc clears", id="log-filter")
        table: DataTable[str | Text] = DataTable(
            id="log-table", classes="pane-body", cursor_type="row"
        )
        # Fixed widths: columns do not jump as calls arrive (the result takes the rest).
        table.add_column("Time", key="time", width=8)
        table.add_column("Correlation", key="cid", width=12)
        table.add_column("Tool", key="tool", width=28)
        table.add_column("Agent", key="agent", width=14)
        table.add_column("Status", key="status", width=16)
        table.add_column("Latency", key="latency", width=10)
        table.add_column("Result", key="result")
        yield table

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#log-table", DataTable)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#log-filter", Input)

    def load_history(self, calls: list[dict[str, Any]]) -> None:
        for call in calls:
            origin = call["origin"]
            result = call["result"]
            named = result.get("proposal_id") if isinstance(result, dict) else None
            self._append(
                LoggedCall(
                    f"db-{call['id']}",
                    call["started_at"],
                    call["correlation_id"],
                    call["tool"],
                    call["agent"],
                    call["status"],
                    call["latency_ms"],
                    one_line(call["error"] or result),
                    origin,
                    call["finished_at"],
                    _proposal_of(origin) or (named if isinstance(named, str) else None),
                )
            )

    def call_started(self, event: CallStarted) -> None:
        self._append(
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
                proposal=_proposal_of(event.origin),
            )
        )

    def call_finished(self, event: CallFinished) -> None:
        key = f"call-{event.call_id}"
        call = self.calls.get(key)
        if call is None:
            self._append(
                LoggedCall(
                    key,
                    event.started_at,
                    event.correlation_id,
                    event.tool,
                    event.agent,
                    event.status,
                    event.latency_ms,
                    event.summary,
                    event.origin,
                    event.finished_at,
                    _proposal_of(event.origin),
                )
            )
            return
        call.status, call.latency_ms, call.summary = event.status, event.latency_ms, event.summary
        call.finished_at = event.finished_at
        table = self.table
        shown, wanted = key in table.rows, self.filter.matches(call)
        if shown and wanted:
            table.update_cell(key, "status", _status(call.status))
            table.update_cell(key, "latency", Text(_latency(call.latency_ms)))
            table.update_cell(key, "result", Text(call.summary), update_width=True)
        elif shown:
            table.remove_row(key)
        elif wanted:
            later = list(self.calls)[list(self.calls).index(key) + 1 :]
            if any(k in table.rows for k in later):
                self._show_matching()  # it belongs above rows already shown
            else:
                self._add_row(call)

    def _append(self, call: LoggedCall) -> None:
        self.calls[call.key] = call
        while len(self.calls) > MAX_ROWS:
            oldest = next(iter(self.calls))
            del self.calls[oldest]
            if oldest in self.table.rows:
                self.table.remove_row(oldest)
        if self.filter.matches(call):
            self._add_row(call)

    def _add_row(self, call: LoggedCall) -> None:
        table = self.table
        follow = table.cursor_row >= table.row_count - 1
        table.add_row(*call.cells(), key=call.key)
        if follow:
            table.move_cursor(row=table.row_count - 1)

    def _show_matching(self) -> None:
        """Fill the table again with the calls the filter lets through, keeping the cursor
        on the same call when it is still shown, else on the newest."""
        table = self.table
        selected = self.selected_call()
        table.clear()
        for call in self.calls.values():
            if self.filter.matches(call):
                table.add_row(*call.cells(), key=call.key)
        if selected is not None and selected.key in table.rows:
            table.move_cursor(row=table.get_row_index(selected.key))
        elif table.row_count:
            table.move_cursor(row=table.row_count - 1)

    def selected_call(self) -> LoggedCall | None:
        table = self.table
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return None if row_key.value is None else self.calls.get(row_key.value)

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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
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

    @on(DataTable.RowSelected, "#log-table")
    def row_chosen(self, event: DataTable.RowSelected) -> None:
        event.stop()
        call = self.calls.get(str(event.row_key.value))
        if call is None or not call.has_proposal:
            return
        during = None
        if call.finished_at is not None:
            during = (_iso(call.started_at), _iso(call.finished_at))
        self.post_message(
            self.ProposalRequested(call.correlation_id, call.tool, call.proposal, during)
        )


def _proposal_of(origin: str) -> str | None:
    match = FROM_PROPOSAL.fullmatch(origin)
    return match.group(1) if match else None


def _status(status: str) -> Text:
    return Text(status.replace("_", " "), style=STATUS_STYLE.get(status, ""))


def _latency(latency_ms: float | None) -> str:
    return "…" if latency_ms is None else f"{latency_ms:.1f} ms"
