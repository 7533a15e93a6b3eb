from __future__ import annotations

from textual.app import ComposeResult

from .base import EmptyState, Pane


class ServersPane(Pane):
    PANE_TITLE = "MCP Servers"
    FOCUS_KEY = "F4"

    def compose(self) -> ComposeResult:
        yield EmptyState(
            "No MCP servers.\n[dim]This version runs the built-in agents only; "
            "MCP servers are not connected.[/]",
            classes="pane-body empty",
        )
