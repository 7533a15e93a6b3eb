from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from diana.core.api import Core
from diana.core.api.shown import units_text
from diana.core.api.types import OPEN, Proposal, Rule
from diana.core.events import CallStarted, ProposalsChanged
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.reactive import var
from textual.widgets import DataTable, Static

from ..fitted import Cell, FitColumn, FittedTable, cell
from ..messages import CoreEvent, DecisionRequested
from ..theme import Ink, ThemeAware, tone
from .base import EmptyState, Pane

RISK_STYLE = {
    "irreversible": tone("bad", bold=True),
    "reversible_with_delay": tone("caution"),
    "reversible": tone("good"),
}
STATUS_STYLE = {
    "pending": "bold",
    "succeeded": tone("good"),
    "failed": tone("bad"),
    "rejected": tone("caution"),
    "interrupted": tone("bad", bold=True),  # never re-run on its own: look at it
    "approved": tone("busy"),
    "executing": tone("busy"),
    "withdrawn": tone("caution"),
}

# Arguments last, and cut at the pane's edge (Enter shows them whole); they get the rest of
# the row, and the risk and then the tool's name give way for them on a narrow terminal.
FIT_COLUMNS = (
    FitColumn("id", "ID"),
    FitColumn("risk", "Risk", least=13),  # "reversible w…" still tells it from "reversible"
    FitColumn("tool", "Tool", least=16, most=32),
    # Who asked: the chat's model, a command, or a host through `diana serve` (host:NAME).
    FitColumn("from", "From", least=5, most=24, droppable=True),
    FitColumn("at", "At"),
    FitColumn("cost", "Cost"),  # estimated, from the tool's past calls
    FitColumn("arguments", "Arguments", least=8),
)
COLUMNS = tuple(column.key for column in FIT_COLUMNS)
# More rows added or removed than this at once: the table is filled again, not edited (each
# removal renumbers every row after it).
REBUILD_AFTER = 50


def risk_text(risk: str, ink: Ink) -> Text:
    return Text(risk.replace("_", " "), style=ink(RISK_STYLE.get(risk, "")))


def estimate_text(units: float | None) -> str:
    """A proposal's estimated cost in a list: about so many units, or — when its tool has
    never run."""
    return "—" if units is None else f"≈{units_text(units)}"


def cost_text(proposal: Proposal) -> str:
    """A proposal's cost in a list: what its call cost once it ran (0.0 for a built-in
    that costs nothing), else about what it is likely to cost."""
    if proposal.cost_units is not None:
        return units_text(proposal.cost_units)
    return estimate_text(proposal.estimated_cost)


def local_time(moment: datetime | None) -> str:
    """The local time of day; nothing for a time a damaged row has lost."""
    return "" if moment is None else moment.astimezone().strftime("%H:%M:%S")


class ProposalTable(FittedTable):
    """The proposals listed, a row each, the columns fitted to the pane's width."""

    COLUMNS = FIT_COLUMNS
    GIVES_WAY = ("from", "risk", "tool")


class ApprovalsPane(ThemeAware, Pane):
    """Calls waiting for a person: newest first, coloured by risk. `h` shows decided ones;
    `p` the policy's rules (what A and R wrote), to see and take out."""

    PANE_TITLE = "Approvals"
    FOCUS_KEY = "F3"
    BINDINGS = [
        Binding("a", "approve", "Approve", id="approvals.approve"),
        Binding("r", "reject", "Reject", id="approvals.reject"),
        Binding("A", "always('allow')", "Always allow", id="approvals.always_allow"),
        Binding("R", "always('deny')", "Always deny", id="approvals.always_deny"),
        Binding("enter", "details", "Details", id="approvals.details", show=False),
        Binding("h", "toggle_history", "History", id="approvals.history"),
        Binding("p", "policy", "Policy", id="approvals.policy"),
        Binding("c", "clients", "Clients", id="approvals.clients", show=False),
    ]

    @dataclass
    class DetailsRequested(Message):
        """The person asked for one proposal in full."""

        proposal: str

    @dataclass
    class Arrived(Message):
        """Proposals that began waiting since the pane last looked (made here or by any
        process on this data dir), oldest first."""

        proposals: list[Proposal]

    @dataclass
    class FirstRead(Message):
        """The proposals pending when the app started are read and listed."""

    # CallStarted: an approved call has started, so its proposal leaves the list now.
    EVENTS = (ProposalsChanged, CallStarted)
    HISTORY_ROWS = 200  # decided proposals shown by `h`, newest first
    # Pending proposals listed, newest first: a table of thousands costs every change to it
    # (a decision, a key) time in proportion; the title says how many wait in all.
    PENDING_ROWS = 500
    # A decision made here is drawn once its call has started (or it is written, or failed),
    # at the latest this long after the key: drawing the list takes the event loop for
    # milliseconds, and the decision's database steps and the call want it first.
    DRAW_DECISION_WITHIN = 0.02

    # The footer follows both: a, r, A and R are offered only on a list with one pending.
    history: var[bool] = var(False, bindings=True)  # decided history rather than pending
    pending: var[int] = var(0, bindings=True)  # how many wait, whatever is shown
    _shown: dict[str, Proposal] = {}  # what show() listed last, in its order
    _shown_history = False  # whether that was the history
    _waiting: set[str] | None = None  # the pending ids last read (None: not read yet)
    _deciding: frozenset[str] = frozenset()  # decided here, not yet written: not listed
    _undrawn: frozenset[str] = frozenset()  # of those, the ones the list still shows
    _reselect: str | None = None  # the selected one being decided: selected again if it is back
    _pending: list[Proposal] = []  # every pending proposal last read, newest first

    def compose(self) -> ComposeResult:
        yield EmptyState(
            "Nothing to approve.\n[dim]Calls that need a person's decision wait here, "
            "and in [b]diana proposals[/b].[/]",
            id="approvals-empty",
            classes="empty",
        )
        yield ProposalTable(id="approvals-table", classes="pane-body")
        yield Static(id="approvals-last", classes="approvals-last")

    @property
    def table(self) -> ProposalTable:
        return self.query_one("#approvals-table", ProposalTable)

    def watch_pending(self, pending: int) -> None:
        self.set_class(pending > 0, "has-pending")
        self.badge = str(pending) if pending else ""

    def watch_core(self, core: Core | None) -> None:
        if core is not None:
            self.reload()

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, CallStarted):  # only a decision made here waits for one
            if event.proposal in self._undrawn:
                self._draw_decisions()
            return
        if not isinstance(event, ProposalsChanged):
            return
        if event.proposal in self._undrawn:
            if event.status == "approved":
                return  # its call starts next: the list follows that (``decided`` reads it)
            self._draw_decisions()
        if isinstance(event.written, Proposal) and self._waiting is not None:
            self.apply(event.written)  # as written here: nothing to read again
        else:
            self.reload()  # changed in another process (or before the first read)

    def apply(self, proposal: Proposal) -> None:
        """One proposal as this process just wrote it: the lists follow it without reading
        the database (a new one is the newest; a decided one leaves the pending list and
        changes in place in the history)."""
        pending = [p for p in self._pending if p.id != proposal.id]
        if proposal.status in OPEN:
            pending.insert(0, proposal)
        history = None
        if self.history and self._shown_history:
            history = list(self._shown.values())
            at = next((i for i, p in enumerate(history) if p.id == proposal.id), None)
            if at is None:
                history.insert(0, proposal)
            else:
                history[at] = proposal
            history = history[: self.HISTORY_ROWS]
        self.listed(pending, history)

    @work(exclusive=True, group="proposals", exit_on_error=False)
    async def reload(self) -> None:
        """Read the proposals again (a burst of changes is read once, after the last)."""
        if self.core is None:
            return
        core = self.core
        waiting = await core.proposals(OPEN)
        history = await core.proposals(None, limit=self.HISTORY_ROWS) if self.history else None
        self.listed(waiting, history)

    def listed(self, waiting: list[Proposal], history: list[Proposal] | None) -> None:
        """The pending proposals (newest first) and, when it is shown, the history."""
        self._pending = waiting
        pending = self._undecided()
        if history is not None:
            self.show(history, len(pending))
        else:
            self.show(pending[: self.PENDING_ROWS], len(pending))
        known, self._waiting = self._waiting, {proposal.id for proposal in waiting}
        if known is None:  # those waiting when the app started are no news
            self.post_message(self.FirstRead())
        else:
            arrived = [proposal for proposal in reversed(waiting) if proposal.id not in known]
            if arrived:
                self.post_message(self.Arrived(arrived))

    def show(self, proposals: list[Proposal], pending: int) -> None:
        """List ``proposals`` (pending ones, or history); ``pending`` is always the count.
        Rows are changed in place by id: thousands listed, a decision costs one row."""
        self._show(proposals, pending, refill=False)

    def deciding(self, proposal_id: str) -> None:
        """A decision made here is being carried out: the proposal leaves the pending list
        as its call starts (or its decision is written), before the database has it if that
        is slow (``decided`` reads the list again, whatever came of it: a decision that did
        not happen brings its proposal back)."""
        proposal_id = proposal_id.strip().lower()
        self._deciding |= {proposal_id}
        if proposal_id == self.selected_proposal():  # selected again if it comes back
            self._reselect = proposal_id
        if proposal_id in self._shown and not self.history:
            if not self._undrawn:
                self.set_timer(self.DRAW_DECISION_WITHIN, self._draw_decisions)
            self._undrawn |= {proposal_id}

    def _draw_decisions(self) -> None:
        """The decisions made here so far leave the list shown (once: later calls do nothing)."""
        if self._undrawn:
            self._undrawn = frozenset()
            if not self.history:
                pending = self._undecided()
                self.show(pending[: self.PENDING_ROWS], len(pending))

    def _undecided(self) -> list[Proposal]:
        """The pending proposals last read, less those being decided here."""
        deciding = self._deciding
        return [p for p in self._pending if p.id not in deciding] if deciding else self._pending

    def decided(self, proposal_id: str) -> None:
        """The decision is written (or failed): the list as the database has it."""
        proposal_id = proposal_id.strip().lower()
        if proposal_id in self._undrawn:
            self._draw_decisions()
        self._deciding -= {proposal_id}
        self.reload()

    def restyle(self) -> None:
        self._show(list(self._shown.values()), self.pending, refill=True)

    def _show(self, proposals: list[Proposal], pending: int, refill: bool) -> None:
        table = self.table
        selected = self.selected_proposal()
        listed = {proposal.id: proposal for proposal in proposals}
        back = self._reselect
        if back is not None and back not in self._deciding:  # its decision is over
            self._reselect = None
            if back in listed:  # it did not happen: the proposal is selected as it was
                selected = back
        shown, history = self._shown, self.history
        with self.app.batch_update():
            if not self._change_rows(proposals, listed, refill):
                kept = [proposal_id for proposal_id in shown if proposal_id in listed]
                added = [proposal_id for proposal_id in listed if proposal_id not in shown]
                if kept + added != list(listed):  # new rows go in at the end: put them right
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
        if not self.history and pending > len(proposals):
            mode = f" · newest {len(proposals)} listed"
        self.border_title = (
            f"Approvals · {pending} pending{mode}" if pending else f"Approvals{mode}"
        )
        self.pending = pending

    def _change_rows(
        self, proposals: list[Proposal], listed: dict[str, Proposal], refill: bool
    ) -> bool:
        """Rows in line with ``listed``: changed in place by id (True: filled again in its
        order), the columns fitted to what is listed now (not the widest ever shown)."""
        table, shown = self.table, self._shown
        gone = [proposal_id for proposal_id in shown if proposal_id not in listed]
        new = len(listed) - (len(shown) - len(gone))
        if refill or self.history != self._shown_history or len(gone) + new > REBUILD_AFTER:
            table.clear()
            table.untrack_all()
            for proposal in proposals:
                cells = self._cells(proposal)
                table.add_row(*cells, key=proposal.id)
                table.track(proposal.id, [c.plain for c in cells], fit=False)
            table.fit_tracked()
            return True
        for proposal_id in gone:
            table.remove_row(proposal_id)
            table.untrack(proposal_id, fit=False)
        for proposal_id, proposal in listed.items():
            was = shown.get(proposal_id)
            if was is None:
                cells = self._cells(proposal)
                table.add_row(*cells, key=proposal_id)
                table.track(proposal_id, [c.plain for c in cells], fit=False)
            elif was is not proposal:  # read again: only the cells that differ change
                cells = self._cells(proposal)
                before = table.get_row(proposal_id)
                for column, cell, old in zip(COLUMNS, cells, before, strict=True):
                    if cell != old:
                        table.update_cell(proposal_id, column, cell)
                table.track(proposal_id, [c.plain for c in cells], fit=False)
        table.fit_tracked()
        return False

    def _cells(self, proposal: Proposal) -> tuple[Cell, Cell, Cell, Cell, Cell, Cell, Cell]:
        """A proposal's row, in COLUMNS' order."""
        ink = self.ink
        label = Text(proposal.id, style="bold")
        if self.history:
            status = proposal.status.value
            label.append(f" {status}", style=ink(STATUS_STYLE.get(status, "")))
        arguments = (
            Text(f"damaged: {proposal.damaged}", style=ink(tone("bad", bold=True)))
            if proposal.damaged
            else Text(proposal.summary)
        )
        return (
            cell(label),
            cell(risk_text(proposal.risk, ink)),
            cell(proposal.tool),
            cell(proposal.origin or "—"),
            cell(local_time(proposal.created_at)),
            cell(cost_text(proposal)),
            cell(arguments),
        )

    def show_outcome(self, text: Content) -> None:
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("approve", "reject", "always"):
            return bool(self.pending) and not self.history
        return True

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
        self.reload()

    def action_policy(self) -> None:
        from ..modals.policy import PolicyScreen

        if self.core is not None:
            self.app.push_screen(PolicyScreen(self.core))

    def action_clients(self) -> None:
        """The other agents calling through `diana serve`, and the switch that pauses them."""
        from ..modals.clients import ClientsScreen

        if self.core is not None:
            self.app.push_screen(ClientsScreen(self.core))
