"""One-line questions: a reason to reject, the model's question to the person, a resource
template's URI, a path to save to."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import Input, Static

from ..entry import Entry
from .dialogs import Dialog


class PromptDialog(Dialog[str | None]):
    """A question and a line for the answer: Enter answers, Esc leaves it unanswered."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="prompt.cancel")]
    PLACEHOLDER = ""

    def compose_body(self) -> ComposeResult:
        yield Static(self.prompt())
        yield Entry(placeholder=self.PLACEHOLDER)

    def prompt(self) -> Content:
        raise NotImplementedError

    def answer(self, typed: str) -> str | None:
        """What Enter on ``typed`` (stripped) answers; None: not an answer yet."""
        return typed

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        answer = self.answer(event.value.strip())
        if answer is not None:
            self.dismiss(answer)


class RejectReasonScreen(PromptDialog):
    """Ask for an optional reason; Enter rejects (a blank reason is fine), Esc cancels."""

    DIALOG_TITLE = "Reject proposal"
    PLACEHOLDER = "Reason (optional) — Enter rejects, Esc cancels"

    def __init__(self, proposal: str, tool: str) -> None:
        super().__init__()
        self.proposal = proposal
        self.tool = tool

    def prompt(self) -> Content:
        return Content.assemble("Reject ", (self.proposal, "bold"), f" ({self.tool})?")


class HumanInputScreen(PromptDialog):
    """The model asks the person something (request_human_input). Enter answers; a number
    picks one of the offered choices; Esc declines, and the model is told so."""

    BINDINGS = [Binding("escape", "close", "Decline to answer", id="human.decline")]
    DIALOG_TITLE = "DIANA asks"
    PLACEHOLDER = "Your answer — Enter sends, Esc declines"

    def __init__(self, question: str, choices: list[str]) -> None:
        super().__init__()
        self.question = question
        self.choices = choices

    def prompt(self) -> Content:
        choices = [f"\n{n}. {c}" for n, c in enumerate(self.choices, 1)]
        return Content.assemble((self.question, "bold"), *choices)

    def answer(self, typed: str) -> str | None:
        if typed.isdigit() and 1 <= int(typed) <= len(self.choices):
            return self.choices[int(typed) - 1]
        return typed or None


class FilledInDialog(PromptDialog):
    """A line that starts filled in, for the person to change; Enter takes it as it is."""

    def __init__(self, value: str) -> None:
        super().__init__()
        self.value = value

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(Input).value = self.value

    def answer(self, typed: str) -> str | None:
        return typed or None


class TemplateScreen(FilledInDialog):
    """A resource template: the URI to read, the template's {variables} filled in."""

    DIALOG_TITLE = "Read a resource"
    PLACEHOLDER = "the URI — Enter reads it, Esc cancels"

    def prompt(self) -> Content:
        return Content.assemble("Fill in ", (self.value, "bold"), ":")


class SavePathScreen(FilledInDialog):
    DIALOG_TITLE = "Save to a file"
    PLACEHOLDER = "a path — Enter saves, Esc cancels"

    def prompt(self) -> Content:
        return Content("Save the resource as (a file here, or a path; ~ is your home):")
