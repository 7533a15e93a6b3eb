"""What every pane shares: a titled, bordered container with one widget that takes focus."""

from __future__ import annotations

from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static


class Pane(Vertical):
    """A titled pane; ``focus_target`` is the widget its F-key focuses."""

    PANE_TITLE = ""
    FOCUS_KEY = ""

    def on_mount(self) -> None:
        self.border_title = self.PANE_TITLE
        if self.FOCUS_KEY:
            self.border_subtitle = self.FOCUS_KEY

    @property
    def focus_target(self) -> Widget:
        return self.query_one(".pane-body")


class EmptyState(Static, can_focus=True):
    """An honest message where a pane has nothing to show yet."""
