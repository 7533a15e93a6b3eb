from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from core.approvals.policy import Rule
from core.approvals.store import Proposal
from core.orchestrator import one_line

from ..messages import DecisionRequested
from .base import EmptyState, Pane

RISK_STYLE = {
    "irreversible": "bold red",
    "reversible_with_delay": "yellow",
    "reversible": "green",
}
STATUS_STYLE = {
    "pending": "bold",
    "succeeded": "green",
    "failed": "red",
    "rejected": "yellow",
    "interrupted": "magenta",
    "approved": "cyan",
    "executing": "cyan",
}

COLUMNS = ("id", "risk", "tool", "at", "arguments")
# More rows added or removed than this at once: the table is filled again, not edited (each
# removal renumbers every row after it).
REBUILD_AFTER = 50


def risk_text(risk: str) -> Text:
    return Text(risk.replace("_", " "), style=RISK_STYLE.get(risk, ""))


def local_time(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%H:%M:%S")
    except (TypeError, ValueError):  # a damaged row: what it says, not a failure
        return str(iso)[:8]


class ApprovalsPane(Pane):
    """Calls waiting for a person: newest first, coloured by risk. `h` shows decided ones."""

    PANE_TITLE = "Approvals"
    FOCUS_KEY = "F3"
    BINDINGS = [
        Binding("a", "approve", "Approve", id="approvals.approve"),
        Binding("r", "reject", "Reject", id="approvals.reject"),
        Binding("A", "always('allow')", "Always allow", id="approvals.always_allow"),
        Binding("R", "always('deny')", "Always deny", id="approvals.always_deny"),
        Binding("enter", "details", "Details", id="approvals.details", show=False),
        Binding("h", "toggle_history", "History", id="approvals.history"),
    ]

    @dataclass
    class DetailsRequested(Message):
        """The person asked for one proposal in full."""

        proposal: str

    @dataclass
    class HistoryToggled(Message):
        """Switch between pending proposals and decided history."""

        history: bool

    history = False
    _shown: dict[str, Proposal] = {}  # what show() listed last, in its order
    _shown_history = False  # whether that was the history

    def compose(self) -> ComposeResult:
        yield EmptyState(
            "Nothing to approve.\n[dim]Calls that need a person's decision wait here, "
            "and in `diana proposals`.[/]",
            id="approvals-empty",
            classes="empty",
        )
        table: DataTable[str | Text] = DataTable(
            id="approvals-table", classes="pane-body", cursor_type="row"
        )
        # Arguments last, and cut at the pane's edge: Enter shows them whole.
        for title, key in zip(("ID", "Risk", "Tool", "At", "Arguments"), COLUMNS, strict=True):
            table.add_column(title, key=key)
        yield table
        yield Static(id="approvals-last", classes="approvals-last")

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#approvals-table", DataTable)

    def show(self, proposals: list[Proposal], pending: int) -> None:
        """List ``proposals`` (pending ones, or history); ``pending`` is always the count.
        Rows are changed in place by id: thousands listed, a decision costs one row."""
        table = self.table
        selected = self.selected_proposal()
        listed = {proposal.id: proposal for proposal in proposals}
        shown, history = self._shown, self.history
        gone = [proposal_id for proposal_id in shown if proposal_id not in listed]
        new = len(listed) - (len(shown) - len(gone))
        if history != self._shown_history or len(gone) + new > REBUILD_AFTER:
            table.clear()
            for proposal in proposals:
                table.add_row(*self._cells(proposal), key=proposal.id)
        else:
            for proposal_id in gone:
                table.remove_row(proposal_id)
            for proposal_id, proposal in listed.items():
                was = shown.get(proposal_id)
                if was is None:
                    table.add_row(*self._cells(proposal), key=proposal_id)
                elif was is not proposal:
                    for column, cell in zip(COLUMNS, self._cells(proposal), strict=True):
                        # Only a wider cell widens its column (a narrower one would have the
                        # whole column measured again).
                        wider = cell.cell_len > table.columns[ColumnKey(column)].content_width
                        table.update_cell(proposal_id, column, cell, update_width=wider)
            kept = [proposal_id for proposal_id in shown if proposal_id in listed]
            added = [proposal_id for proposal_id in listed if proposal_id not in shown]
            if kept + added != list(listed):  # new rows go in at the end: put them in place
                place = {proposal_id: n for n, proposal_id in enumerate(listed)}
                table.sort("id", key=lambda label: place[label.plain.split(" ", 1)[0]])
        self._shown, self._shown_history = listed, history
        # The selected proposal stays selected; if it is gone, the newest is.
        order = list(listed)
        table.move_cursor(row=order.index(selected) if selected in listed else 0)
        empty = not proposals and not self.history
        self.query_one("#approvals-empty").display = empty
        table.display = not empty
        mode = " · history" if self.history else ""
        self.border_title = (
            f"Approvals · {pending} pending{mode}" if pending else f"Approvals{mode}"
        )
        self.set_class(pending > 0, "has-pending")
        self.badge = str(pending) if pending else ""

    def _cells(self, proposal: Proposal) -> tuple[Text, Text, Text, Text, Text]:
        """A proposal's row, in COLUMNS' order."""
        label = Text(proposal.id, style="bold")
        if self.history:
            label.append(
                f" {proposal.status.value}", style=STATUS_STYLE.get(proposal.status.value, "")
            )
        arguments = (
            Text(f"damaged: {proposal.damaged}", style="bold red")
            if proposal.damaged
            else Text(one_line(proposal.shown_arguments))
        )
        return (
            label,
            risk_text(proposal.risk),
            Text(proposal.tool),
            Text(local_time(proposal.created_at)),
            arguments,
        )

    def show_outcome(self, text: Text) -> None:
        self.query_one("#approvals-last", Static).update(text)

    def selected_proposal(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return None if row_key.value is None else str(row_key.value)

    def select_newest(self) -> None:
        if self.table.row_count:
            self.table.move_cursor(row=0)

    @property
    def focus_target(self) -> DataTable[str | Text] | Static:
        return self.table if self.table.display else self.query_one("#approvals-empty", Static)

    def _decide(self, verb: str, rule: Rule | None = None) -> None:
        proposal = self.selected_proposal()
        if proposal is not None and not self.history:
            seen = self._shown[proposal].digest if proposal in self._shown else None
            self.post_message(DecisionRequested(proposal, verb, rule, seen=seen))

    def action_approve(self) -> None:
        self._decide("approve")

    def action_reject(self) -> None:
        self._decide("reject")

    def action_always(self, rule: str) -> None:
        self._decide("always", Rule(rule))

    @on(DataTable.RowSelected, "#approvals-table")
    def row_chosen(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_details()

    def action_details(self) -> None:
        proposal = self.selected_proposal()
        if proposal is not None:
            self.post_message(self.DetailsRequested(proposal))

    def action_toggle_history(self) -> None:
        self.history = not self.history
        self.post_message(self.HistoryToggled(self.history))
