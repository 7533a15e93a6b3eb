"""What every pane shares: a titled, bordered container with one widget that takes focus."""

from __future__ import annotations

from textual.containers import Vertical
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Static


class Pane(Vertical):
    """A titled pane; ``focus_target`` is the widget its F-key focuses. ``badge`` is what the
    pane bar shows beside its name when one pane fills the screen (a count, a ratio)."""

    PANE_TITLE = ""
    SHORT_TITLE = ""  # in the pane bar, if shorter than the title
    FOCUS_KEY = ""
    ALLOW_MAXIMIZE = True  # a small terminal shows one pane at a time

    badge: var[str] = var("")

    def on_mount(self) -> None:
        self.border_title = self.PANE_TITLE
        if self.FOCUS_KEY:
            self.border_subtitle = self.FOCUS_KEY

    @property
    def focus_target(self) -> Widget:
        return self.query_one(".pane-body")


class EmptyState(Static, can_focus=True):
    """An honest message where a pane has nothing to show yet."""
