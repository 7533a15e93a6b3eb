from __future__ import annotations

from textual.app import ComposeResult

from .base import EmptyState, Pane


class ApprovalsPane(Pane):
    PANE_TITLE = "Approvals"
    FOCUS_KEY = "F3"

    def compose(self) -> ComposeResult:
        yield EmptyState(
            "Nothing to approve.\n[dim]This version has no approval queue: "
            "a tool runs when you call it.[/]",
            classes="pane-body empty",
        )
