"""Messages more than one part of the screen sends or receives."""

from __future__ import annotations

from dataclasses import dataclass

from diana.core.approvals.policy import Rule
from diana.core.events import Event
from textual.message import Message


@dataclass
class DecisionRequested(Message):
    """The person decided a proposal: approve, reject or always (with a rule), from the
    Approvals pane, an inline prompt in the chat, or a /approve or /reject command."""

    proposal: str
    verb: str  # "approve" | "reject" | "always"
    rule: Rule | None = None
    reason: str | None = None  # a /reject reason, given inline: no need to ask for one
    from_chat: bool = False  # echo the outcome in the chat as well
    # The digest of the proposal as it was shown (core/approvals/store.py): an approval is
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
