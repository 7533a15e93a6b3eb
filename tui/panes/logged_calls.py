"""A tool call as the Execution Log shows it: its row's columns and colours, and the filter
typed over the rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from diana.core.api.types import CallRecord
from rich.style import Style
from rich.text import Text

from ..fitted import Cell, FitColumn, cell
from ..theme import tone

STATUS_STYLE = {
    "running": tone("busy"),
    "succeeded": tone("good"),
    "failed": tone("bad", bold=True),
    "timed_out": tone("bad", bold=True),
    "denied": tone("bad"),
    "refused": tone("caution"),
    "cancelled": tone("caution"),
    "pending_approval": tone("caution"),
    "approved": tone("good"),
    "rejected": tone("caution"),
    "withdrawn": tone("muted"),
}
Palette = Mapping[str, Style]


COLUMNS = (
    FitColumn("time", "Time"),
    FitColumn("cid", "Correlation", least=6, droppable=True),
    FitColumn("tool", "Tool", most=24),
    FitColumn("agent", "Agent", least=5, droppable=True),
    # Who asked: the chat's model, a command, or a host through `diana serve` (host:NAME).
    FitColumn("from", "From", least=5, most=20, droppable=True),
    FitColumn("status", "Status"),
    FitColumn("latency", "Latency"),
    FitColumn("result", "Result", least=6),  # the last column: it takes what is left
)


COLUMN_INDEX = {column.key: index for index, column in enumerate(COLUMNS)}


def _cell(text: str, style: Style | str = "") -> Cell:
    return cell(text, style)


def _clock(at: datetime) -> str:
    return at.astimezone().strftime("%H:%M:%S")


@dataclass
class LoggedCall:
    """One call the pane knows of, shown or not: a filter can bring it back."""

    key: str
    started_at: datetime
    correlation_id: str
    tool: str
    agent: str | None
    status: str
    latency_ms: float | None
    summary: str
    origin: str
    finished_at: datetime | None = None
    proposal: str | None = None  # the proposal id, when the call names it

    def texts(self) -> tuple[str, ...]:
        """What each column shows, in column order."""
        return (
            _clock(self.started_at),
            self.correlation_id,
            self.tool,
            self.agent or "—",
            self.origin or "—",
            self.status.replace("_", " "),
            # held for a person: it has not run (the time to reach the gate says nothing)
            "—" if self.status == "pending_approval" else _latency(self.latency_ms),
            self.summary,
        )

    def cells(self, palette: Palette | None = None) -> tuple[Text, ...]:
        # Text cells: a plain str would be read as markup, and "[/]" in a result would crash.
        texts = self.texts()
        status = (palette or {}).get(self.status, "")
        return tuple(
            _cell(text, status if i == COLUMN_INDEX["status"] else "")
            for i, text in enumerate(texts)
        )

    def searchable(self) -> str:
        """Every column as one lower-case text, for the filter's words."""
        return f"{' '.join(self.texts())} {self.status}".lower()

    @property
    def has_proposal(self) -> bool:
        return self.status == "pending_approval" or self.proposal is not None

    @classmethod
    def of(cls, record: CallRecord, key: str) -> LoggedCall:
        """A finished call, from its record (an event, or a row read back)."""
        return cls(
            key,
            record.started_at,
            record.correlation_id,
            record.tool,
            record.agent,
            record.status,
            record.latency_ms,
            record.summary,
            record.origin,
            record.finished_at,
            record.proposal,
        )


@dataclass(frozen=True)
class CallFilter:
    """What the filter line asks for: ``tool:NAME status:STATUS words``. Repeated keys are
    alternatives; every word must appear in some column; all case-insensitive."""

    text: str = ""
    tools: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> CallFilter:
        tools, statuses, words = [], [], []
        for token in text.lower().split():
            key, colon, value = token.partition(":")
            if colon and value and key == "tool":
                tools.append(value)
            elif colon and value and key == "status":
                statuses.append(value)
            else:
                words.append(token)
        return cls(" ".join(text.split()), tuple(tools), tuple(statuses), tuple(words))

    def __bool__(self) -> bool:
        return bool(self.tools or self.statuses or self.words)

    def matches(self, call: LoggedCall) -> bool:
        """A tool name contains a tool: value; a status starts with a status: value."""
        if self.tools and not any(t in call.tool.lower() for t in self.tools):
            return False
        if self.statuses and not any(call.status.startswith(s) for s in self.statuses):
            return False
        if self.words:
            text = call.searchable()
            return all(word in text for word in self.words)
        return True


def _latency(latency_ms: float | None) -> str:
    return "…" if latency_ms is None else f"{latency_ms:.1f} ms"
