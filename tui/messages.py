"""Messages more than one part of the screen sends or receives, and the rule they serve.

The action rule: a widget never changes the core's state itself: it posts a `...Requested`
message, and the App carries out each action in one handler, through the core's
services; widgets read freely (lists, diagnostics, stored proposals, a search). A widget
that must show what came of its action (a /call's result, a fact forgotten, a rule removed)
posts an `ActionRequested` and awaits its ``outcome``, in the widget's own worker; the App
sets the outcome, or the exception the core raised, once the action is done.

The one exception is the chat's turn: the turn streams into the chat's `TurnView` and is
stopped (Esc) by cancelling the chat's worker, which the cancellation carries into the core;
it is started by the chat pane itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Generic, TypeVar

from diana.core.api.types import Rule
from diana.core.events import Event
from textual.message import Message

Outcome = TypeVar("Outcome")


class ActionRequested(Message, Generic[Outcome]):
    """A change a widget asks of the App and waits on: ``outcome`` is set, by the App, to
    what the action gave (or the exception it raised); cancelled if there is no core."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def answer(self, value: Outcome) -> None:
        if not self.outcome.done():
            self.outcome.set_result(value)

    def fail(self, error: BaseException) -> None:
        if not self.outcome.done():
            self.outcome.set_exception(error)


@dataclass
class DecisionRequested(Message):
    """The person decided a proposal: approve, reject or always (with a rule), from the
    Approvals pane, an inline prompt in the chat, or a /approve or /reject command."""

    proposal: str
    verb: str  # "approve" | "reject" | "always"
    rule: Rule | None = None
    reason: str | None = None  # a /reject reason, given inline: no need to ask for one
    from_chat: bool = False  # echo the outcome in the chat as well
    # The digest of the proposal as it was shown (core/approvals/proposal_store.py): an approval is
    # refused if the stored call changed since. None where nothing was shown (/approve ID).
    seen: str | None = None


@dataclass
class CoreEvent(Message, bubble=False):
    """A core event, delivered by the app to each widget whose ``EVENTS`` names its type:
    the pane that shows that data (the log its calls, Approvals its proposals, ...)."""

    event: Event


@dataclass
class WorkFailed(Message):
    """A pane's background work failed: the app reports it (log and toast), one line."""

    what: str
    error: BaseException
