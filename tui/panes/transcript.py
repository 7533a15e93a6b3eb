"""The pieces a chat transcript is made of: what the person typed, the model's streamed answer
and thinking, each tool call as one expandable line, inline approval prompts, gap reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Markdown, Static

from core.approvals.store import Proposal
from core.llm.gaps import ToolGapReport
from core.llm.session import ToolCallRecord
from core.orchestrator import one_line

PROMPT = "\u276f "  # heavy right-pointing angle: marks what the person typed
STATUS_MARK = {
    "succeeded": ("✓", "green"),
    "pending_approval": ("⏸", "yellow"),
    "rejected": ("✗", "yellow"),
    "denied": ("✗", "yellow"),
    "cancelled": ("■", "yellow"),
}


def pretty(value: Any) -> RenderableType:
    if isinstance(value, str):
        return Text(value)
    return JSON(json.dumps(value, default=str, ensure_ascii=False))


class UserLine(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text.assemble((PROMPT, "bold cyan"), (text, "bold")), classes="user")


class Note(Static):
    """A line from DIANA itself: a problem (error), a hint (warning) or information."""

    def __init__(self, text: str | Text, level: str = "info") -> None:
        super().__init__(text if isinstance(text, Text) else Text(text), classes=f"note {level}")


class Expandable(Vertical, can_focus=True):
    """A one-line header that Enter (or a click) opens to show the details beneath it."""

    BINDINGS = [Binding("enter,space", "expand", "Expand", id="transcript.toggle")]

    def __init__(self, *, classes: str = "") -> None:
        super().__init__(classes=f"expandable {classes}".strip())
        self.expanded = False

    def compose(self) -> ComposeResult:
        yield Static(self.header(), classes="header")
        yield Static(self.details(), classes="details")

    def header(self) -> Text:
        raise NotImplementedError

    def details(self) -> RenderableType:
        raise NotImplementedError

    def refresh_parts(self) -> None:
        if self.is_mounted:
            self.query_one(".header", Static).update(self.header())
            self.query_one(".details", Static).update(self.details())

    def action_expand(self) -> None:
        self.expanded = not self.expanded
        self.set_class(self.expanded, "expanded")
        self.refresh_parts()

    def on_click(self) -> None:
        self.action_expand()

    @property
    def marker(self) -> str:
        return "▾" if self.expanded else "▸"


class ToolCallLine(Expandable):
    """⚙ name {arguments} → result, latency; Enter shows arguments and the whole result."""

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        super().__init__(classes="tool-call")
        self.name_ = name
        self.arguments = arguments
        self.record: ToolCallRecord | None = None
        self.waiting = False  # for a person's decision

    def wait_for_decision(self) -> None:
        self.waiting = True
        self.refresh_parts()

    def finish(self, record: ToolCallRecord) -> None:
        self.record = record
        self.refresh_parts()

    def header(self) -> Text:
        line = Text.assemble((f"{self.marker} ⚙ ", "dim"), (self.name_, "bold"), " ")
        line.append(one_line(self.arguments)[:60], style="dim")
        record = self.record
        if record is None:
            if self.waiting:
                line.append("  ⏸ waiting for approval", style="yellow")
            else:
                line.append("  running…", style="cyan")
            return line
        mark, style = STATUS_MARK.get(record.status, ("✗", "red"))
        line.append(f"  {mark} ", style=style)
        line.append(f"{record.latency_ms:.0f} ms  ", style="dim")
        if record.succeeded:
            line.append(one_line(record.result))
        else:
            line.append(record.status.replace("_", " "), style=style)
        return line

    def details(self) -> RenderableType:
        parts: list[RenderableType] = [Text("arguments", style="bold"), pretty(self.arguments)]
        record = self.record
        if record is not None:
            if record.proposal_id:
                parts.append(Text(f"proposal {record.proposal_id}", style="dim"))
            if record.succeeded:
                parts += [Text("result", style="bold"), pretty(record.result)]
            else:
                parts += [Text("error", style="bold red"), Text(record.error or record.status)]
        return Group(*parts)


class ThinkingView(Expandable):
    """The model's thinking, folded to one line until opened."""

    def __init__(self, text: str = "") -> None:
        super().__init__(classes="thinking")
        self.text = text

    def add(self, fragment: str) -> None:
        self.text += fragment
        if self.expanded or len(self.text) == len(fragment):
            self.refresh_parts()
        else:
            self.query_one(".header", Static).update(self.header())

    def header(self) -> Text:
        words = len(self.text.split())
        return Text(f"{self.marker} thinking ({words} word{'s' if words != 1 else ''})", "dim")

    def details(self) -> RenderableType:
        return Text(self.text, style="dim italic")


class AnswerView(Markdown):
    """The model's answer. While it streams, what arrived is drawn a dozen times a second:
    redrawing for every token would fall behind a fast model."""

    FRAME = 0.1  # seconds between redraws while streaming

    def __init__(self, text: str = "") -> None:
        super().__init__(text, classes="answer")
        self.text = text  # everything received, drawn or not
        self._pending: list[str] = []
        self._drawer: asyncio.Task[None] | None = None
        self._hurry = asyncio.Event()

    async def add(self, fragment: str) -> None:
        self.text += fragment
        self._pending.append(fragment)
        if self._drawer is None:
            self._drawer = asyncio.create_task(self._draw())

    async def _draw(self) -> None:
        while self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), self.FRAME)
            fragment = "".join(self._pending)
            self._pending.clear()
            await self.append(fragment)  # one at a time: appends must not overlap
        self._drawer = None

    async def finish(self) -> None:
        """Draw whatever is still waiting, now."""
        self._hurry.set()
        if self._drawer is not None:
            await self._drawer


class ApprovalPrompt(Static, can_focus=True):
    """A call in this turn waits for the person: a approve, r reject, s send on without
    deciding. The Approvals pane decides the same proposal; whichever is first counts."""

    BINDINGS = [
        Binding("a", "decide('approve')", "Approve", id="prompt.approve"),
        Binding("r", "decide('reject')", "Reject", id="prompt.reject"),
        Binding("s", "send_on", "Send on undecided", id="prompt.send_on"),
    ]

    @dataclass
    class Decide(Message):
        proposal: str
        verb: str
        seen: str | None  # the digest of the proposal this prompt shows

    class SendOn(Message):
        """Let the turn go on; the proposal stays in the queue."""

    def __init__(self, proposal: Proposal) -> None:
        super().__init__(classes="approval-prompt")
        self.proposal = proposal
        self.outcome: Text | None = None

    def on_mount(self) -> None:
        self.update(self.body())

    def body(self) -> Text:
        p = self.proposal
        text = Text.assemble(
            ("⏸ ", "bold yellow"),
            (p.tool, "bold"),
            " needs your approval — proposal ",
            (p.id, "bold"),
            f" ({p.risk.replace('_', ' ')})\n",
            (p.reason, "dim"),
            "\n",
            ("arguments ", "dim"),
            one_line(p.shown_arguments),
        )
        if self.outcome is not None:
            text.append("\n")
            text.append_text(self.outcome)
        else:
            text.append("\n")
            text.append_text(
                Text.assemble(
                    ("a", "bold"),
                    " approve   ",
                    ("r", "bold"),
                    " reject   ",
                    ("s", "bold"),
                    " send on without deciding   (or F3: Approvals)",
                    style="yellow",
                )
            )
        return text

    def settle(self, outcome: Text) -> None:
        self.outcome = outcome
        self.can_focus = False
        self.add_class("settled")
        self.update(self.body())

    def action_decide(self, verb: str) -> None:
        if self.outcome is None:
            self.post_message(self.Decide(self.proposal.id, verb, self.proposal.digest))

    def action_send_on(self) -> None:
        if self.outcome is None:
            self.post_message(self.SendOn())


class GapReportView(Static):
    """A request no tool can carry out, said plainly instead of a made-up answer."""

    def __init__(self, report: ToolGapReport) -> None:
        super().__init__(classes="gap-report")
        self.border_title = "Tool gap"
        self.report = report

    def on_mount(self) -> None:
        r = self.report
        self.update(
            Text.assemble(
                ("Not done: ", "bold yellow"),
                "no available tool provides ",
                (", ".join(r.missing_tools), "bold"),
                ".\n",
                ("task  ", "dim"),
                r.attempted_task,
                "\n",
                ("checked  ", "dim"),
                ", ".join(r.existing_tools_checked) or "no tools",
                "\n",
                ("Add an MCP server or tool that provides it, then ask again.", "dim"),
            )
        )
