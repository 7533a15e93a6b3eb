"""What every dialog and form shares: a box in the middle of the dimmed workbench, its title on
the border, the keys in the footer, Esc to leave it. Sizes and colours in styles/app.tcss."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Static, TextArea

from ..entry import Entry
from ..footer import KeysFooter

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    """A box over the workbench; Esc closes it with None. Subclasses give ``compose_body``
    and a ``DIALOG_TITLE`` (or ``dialog_title``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", id="dialog.close")]
    DIALOG_TITLE = ""
    SCROLLS = False  # a long view scrolls inside its box
    # A question the core waits on (the model's, a server's) stays until it is answered;
    # every other dialog is a view the person opened and goes when they switch panes.
    held = False

    def compose(self) -> ComposeResult:
        box = VerticalScroll if self.SCROLLS else Vertical
        with box(classes="dialog"):
            yield from self.compose_body()
        yield KeysFooter()

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError

    def dialog_title(self) -> str:
        return self.DIALOG_TITLE

    @property
    def box(self) -> Widget:
        return self.query_one(".dialog")

    def on_mount(self) -> None:
        self.box.border_title = self.dialog_title()

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmDialog(Dialog[bool]):
    """A question with two answers: y does it, n or Esc leaves it undone."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n", "answer(False)", "No", id="confirm.no"),
        Binding("escape", "answer(False)", "No", id="confirm.cancel", show=False),
    ]

    def __init__(self, heading: str, question: Content) -> None:
        super().__init__()
        self.heading = heading
        self.question = question

    def dialog_title(self) -> str:
        return self.heading

    def compose_body(self) -> ComposeResult:
        yield Static(self.question, classes="confirm-question")
        yield Static(
            Content.assemble(("y", "bold"), " yes · ", ("n", "bold"), " no"),
            classes="confirm-keys",
        )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class FormError(ValueError):
    """A field that cannot be read; the message starts with the field's name."""


class FormDialog(Dialog[ResultT]):
    """Labelled fields, a line saying what is wrong, Add and Cancel. Enter in a one-line field,
    Ctrl+S or Add submits; a mistake keeps the form open with everything typed and names the
    field. Every id starts with ``ID_PREFIX``: ``#{ID_PREFIX}-{field}``, ``-error``, ``-add``."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel", id="form.cancel"),
        Binding("ctrl+s", "submit", "Add", id="form.submit"),
    ]
    ID_PREFIX = "form"

    def compose_body(self) -> ComposeResult:
        yield from self.compose_fields()
        yield Static(id=f"{self.ID_PREFIX}-error", classes="form-error")
        with Horizontal(classes="form-row"):
            yield Button("Add", id=f"{self.ID_PREFIX}-add", classes="form-add", variant="primary")
            yield Button("Cancel", id=f"{self.ID_PREFIX}-cancel", classes="form-cancel")

    def compose_fields(self) -> ComposeResult:
        raise NotImplementedError

    def line(self, label: str, field: str, placeholder: str = "") -> ComposeResult:
        """A label and a one-line field under it."""
        yield Label(label)
        yield Entry(id=f"{self.ID_PREFIX}-{field}", placeholder=placeholder)

    def value(self, field: str) -> str:
        """What was typed in ``field`` (a one-line field or a text area), as typed."""
        widget = self.query_one(f"#{self.ID_PREFIX}-{field}")
        if isinstance(widget, TextArea):
            return widget.text
        assert isinstance(widget, Input)
        return widget.value

    def submit(self) -> None:
        """Read the fields and dismiss with what they say; FormError names a wrong field."""
        raise NotImplementedError

    def show_error(self, message: str) -> None:
        self.query_one(".form-error", Static).update(Content(message))

    @on(Input.Submitted)
    def input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    @on(Button.Pressed, ".form-add")
    def action_submit(self) -> None:
        try:
            self.submit()
        except FormError as exc:
            self.show_error(str(exc))

    @on(Button.Pressed, ".form-cancel")
    def cancel_pressed(self) -> None:
        self.action_close()


class Searching(Protocol):
    """A view whose list follows the words typed into its search field."""

    searched: str  # what the list shows matches for; "" for no search

    def load(self, pause: float = 0.0) -> Any: ...


def search_typed(view: Searching, text: str, pause: float) -> None:
    """The list follows what is typed: once typing pauses for ``pause`` seconds, at once when
    the field is cleared, not at all when the words did not change."""
    searched = text.strip()
    if searched != view.searched:
        view.searched = searched
        view.load(pause if searched else 0.0)
