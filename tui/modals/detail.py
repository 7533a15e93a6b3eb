"""What every detail view shares: a box that scrolls what it shows, its headings, a
stored time shown as local time."""

from __future__ import annotations

from datetime import datetime
from typing import Generic, TypeVar

from textual.content import Content
from textual.widgets import Static

from ..theme import ThemeAware
from .dialogs import Dialog


def local_time(moment: datetime | str | None) -> str:
    if not moment:
        return "—"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


Shown = TypeVar("Shown")  # what a detail view shows


class DetailView(ThemeAware, Dialog[None], Generic[Shown]):
    """A view of one thing in full, scrolled inside its box; Esc closes it."""

    SCROLLS = True

    def __init__(self, info: Shown) -> None:
        super().__init__()
        self.info = info


def heading(text: str) -> Static:
    return Static(Content.styled(text, "bold underline"), classes="detail-heading")
