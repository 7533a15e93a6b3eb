"""What every pane shares: a titled, bordered container with one widget that takes focus."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.containers import Vertical
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from ..messages import WorkFailed
from ..restyle import set_class

if TYPE_CHECKING:
    from diana.core.api import Core


FOCUS_WITHIN = "-focus-within"


class Pane(Vertical):
    """A titled pane; ``focus_target`` is the widget its F-key focuses. ``badge`` is what the
    pane bar shows beside its name when one pane fills the screen (a count, a ratio)."""

    PANE_TITLE = ""
    SHORT_TITLE = ""  # in the pane bar, if shorter than the title
    FOCUS_KEY = ""
    ALLOW_MAXIMIZE = True  # a small terminal shows one pane at a time

    # The core events this pane shows; the app delivers each as a CoreEvent message.
    EVENTS: ClassVar[tuple[type, ...]] = ()

    badge: var[str] = var("")
    core: var[Core | None] = var(None)  # set once the core has started

    def on_mount(self) -> None:
        if not self.border_title:  # a pane may have said more already ("starting…")
            self.border_title = self.PANE_TITLE
        if self.FOCUS_KEY:
            self.border_subtitle = self.FOCUS_KEY
        self.watch(self.screen, "focused", self._focus_moved)

    def _focus_moved(self, focused: Widget | None) -> None:
        """The pane is marked while the focus is in it (``-focus-within``), restyling the pane
        alone: Textual's ``:focus-within`` restyles every widget inside the pane each time the
        focus comes or goes, a long chat's every message included."""
        within = focused is not None and (focused is self or self in focused.ancestors)
        set_class(self, within, FOCUS_WITHIN)

    @property
    def focus_target(self) -> Widget:
        return self.query_one(".pane-body")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            self.post_message(WorkFailed(worker.name or "a background job", worker.error))


class EmptyState(Static, can_focus=True):
    """An honest message where a pane has nothing to show yet."""
