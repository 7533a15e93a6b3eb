"""The other agents on the machine that call through `diana serve`: each client's calls, the
proposals of its waiting for a person now, its last call, whether it has a token for --http;
and the kill switch (p pauses every host, or lets them through again)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diana.core.api.shown import shown_minute
from diana.core.events import CallFinished, ProposalsChanged
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
    from diana.core.api.types import ClientSummary


class ClientsTable(FittedTable):
    COLUMNS = (
        FitColumn("client", "Client", least=10, most=40),
        FitColumn("calls", "Calls", least=5),
        FitColumn("waiting", "Waiting", least=7),
        FitColumn("last_call", "Last call", least=16),
        FitColumn("token", "Token", least=5, droppable=True),
    )
    GIVES_WAY = ("token", "client")
    LAST_WANTS = 5


class ClientsScreen(ThemeAware, Dialog[None]):
    """Every host seen calling through `diana serve` (from the log of every process), the
    latest caller first; it follows calls and proposals as they change (at most once a
    second). p pauses every host (their calls wait for a person, whatever the policy allows)
    or resumes them."""

    BINDINGS = [Binding("p", "pause", "Pause/resume hosts", id="clients.pause")]
    EVENTS = (CallFinished, ProposalsChanged)

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.listed: list[ClientSummary] | None = None
        self._again = False

    def dialog_title(self) -> str:
        return "Clients of diana serve"

    def compose_body(self) -> ComposeResult:
        yield Static(id="clients-summary")
        yield ClientsTable(id="clients-table")

    def on_mount(self) -> None:
        super().on_mount()
        self.load()

    def on_core_event(self, _message: CoreEvent) -> None:
        if not self._again:  # a burst of calls: one reading, a second later
            self._again = True
            self.set_timer(1.0, self.load)

    @work(exclusive=True, group="clients", exit_on_error=False)
    async def load(self) -> None:
        self._again = False
        self.listed = await self.core.clients()
        self.restyle()

    def restyle(self) -> None:
        listed = self.listed
        if listed is None:
            return
        table = self.query_one("#clients-table", ClientsTable)
        table.clear()
        table.untrack_all()
        for client in listed:
            waiting = self.ink(tone("caution")) if client.waiting else ""
            row = (
                cell(client.name, "bold"),
                cell(f"{client.calls:,}", right=True),
                cell(f"{client.waiting:,}", waiting, right=True),
                cell(shown_minute(client.last_call)),
                cell("yes" if client.token else "—"),
            )
            table.add_row(*row, key=client.name)
            table.track(client.name, [c.plain for c in row], fit=False)
        table.fit_tracked()
        self.show_summary()

    def show_summary(self) -> None:
        listed = self.listed or []
        paused = self.core.hosts_paused()
        state: tuple[str, str] = (
            ("Hosts are paused: every call of theirs waits for a person", "bold")
            if paused is not None
            else ("Hosts' calls pass the policy", "")
        )
        waiting = sum(client.waiting for client in listed)
        self.query_one("#clients-summary", Static).update(
            Content.assemble(
                state,
                f" · {len(listed)} client{'' if len(listed) == 1 else 's'}, {waiting} waiting · ",
                ("p", "bold"),
                " resumes them" if paused is not None else " pauses them",
                "" if listed else " · no host has called through `diana serve` yet",
            )
        )

    def action_pause(self) -> None:
        if self.core.hosts_paused() is None:
            self.core.pause_hosts("diana-tui's Clients view")
            self.notify("Hosts paused: every call of theirs waits for a person", timeout=5)
        else:
            self.core.resume_hosts()
            self.notify("Hosts resumed: their calls pass the policy again", timeout=5)
        self.show_summary()
