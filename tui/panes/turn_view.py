"""One chat turn drawn as it streams: the answer token by token, thinking folded, each tool
call on its line with its progress and inline approval prompt, and what the answer rests on;
a stored conversation drawn again as it was."""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any, Protocol

from diana.core.api import split_attachments, stored_images
from diana.core.api.types import (
    ApprovalPending,
    Attached,
    Delta,
    FactUsed,
    GapFound,
    Progress,
    Proposal,
    Source,
    ToolCallFinished,
    ToolCallRecord,
    ToolCallStarted,
    ToolGapReport,
    TurnCancelled,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from diana.core.api.types import Message as StoredMessage
from diana.core.api.types import MessageKind as Kind
from diana.core.events import CallProgress
from diana.core.models import ToolResult
from pydantic import ValidationError
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widget import AwaitMount, Widget

from ..theme import tone
from .transcript import (
    AnswerView,
    ApprovalPrompt,
    GapReportView,
    Note,
    PendingNote,
    SettledAnswer,
    SourceList,
    ThinkingView,
    ToolCallLine,
    UserLine,
    prose,
)

if TYPE_CHECKING:
    from diana.core.api import Core


class TurnHost(Protocol):
    """What a turn is drawn into: the chat pane's transcript, status line and prompts."""

    core: Core | None

    @property
    def transcript(self) -> VerticalScroll: ...

    def note(self, text: str | Content, level: str = "info") -> None: ...

    def show_status(self, text: str) -> None: ...

    def update_title(self) -> None: ...

    async def add(self, widget: Widget, before: Widget | None = None) -> None: ...

    async def ask_decision(
        self,
        proposal: Proposal,
        later: str = "send on without deciding",
        line: ToolCallLine | None = None,
    ) -> ApprovalPrompt: ...

    def settle_prompt(self, prompt: ApprovalPrompt, outcome: Content, *, final: bool) -> None: ...

    def call_left_waiting(self, record: ToolCallRecord) -> None: ...

    def call_decided(self, proposal: str, record: ToolCallRecord) -> None: ...

    def still_waiting(self, proposals: list[str]) -> list[str]: ...

    def fit_transcript(self) -> None: ...


def rested_on(data: Any) -> list[Widget]:
    """What an answer rests on, under it: the facts from memory it cites, one line each, and
    the web pages, as a list to open them from (``data``: the response, or what its stored
    message kept)."""
    if not isinstance(data, dict):
        return []
    widgets: list[Widget] = []
    for fact in data.get("facts_used") or []:
        with contextlib.suppress(ValidationError):
            used = FactUsed.model_validate(fact)
            widgets.append(Note(f"from memory: [fact {used.id}] {used.content}", "info"))
    with contextlib.suppress(ValidationError):
        sources = [Source.model_validate(s) for s in data.get("sources") or []]
        if sources:
            widgets.append(SourceList(sources))
    return widgets


class TurnView:
    """Draws one turn's events into the transcript as they arrive."""

    def __init__(self, pane: TurnHost) -> None:
        self.pane = pane
        self.answer: AnswerView | None = None
        # Mounted empty (no height) when the turn starts, so that the first token only has
        # to be drawn: mounting costs a layout, which the wait for the model hides (the turn
        # does not wait for it: the model is asked meanwhile).
        self.next_answer: AnswerView | None = None
        self.next_answer_mounted: AwaitMount | None = None
        self.thinking: ThinkingView | None = None
        self.calls: dict[int, ToolCallLine] = {}
        self.prompts: dict[int, ApprovalPrompt] = {}
        self.correlation_id: str | None = None  # the turn's, as its tool calls carry it

    def progress(self, event: CallProgress) -> None:
        """A tool call of this turn reports how far it has got: on its line, while it runs."""
        if event.correlation_id != self.correlation_id:
            return
        for line in self.calls.values():
            if line.name_ == event.tool and line.record is None and not line.waiting:
                line.show_progress(event.describe())
                return

    async def show(self, event: TurnEvent) -> None:
        pane = self.pane
        if isinstance(event, Delta):
            await self.delta(event)
            return
        # A request to the model has ended (its calls start, it waits, it is answered):
        # the header's context fill is that request's, not the last turn's.
        pane.update_title()
        if isinstance(event, TurnStarted):
            self.correlation_id = event.correlation_id
            self.next_answer = AnswerView()
            self.next_answer_mounted = pane.transcript.mount(self.next_answer)
        elif isinstance(event, Progress):
            if event.retry or event.notice:
                pane.note(event.text, "warning")
            pane.show_status(event.text + "…")
        elif isinstance(event, ToolCallStarted):
            await self.end_block()
            line = ToolCallLine(event.name, event.arguments)
            self.calls[event.index] = line
            await pane.add(line)
            pane.show_status(f"running {event.name}…")
        elif isinstance(event, ApprovalPending):
            held = self.calls.get(event.index)
            if held is not None:
                held.wait_for_decision()
            self.prompts[event.index] = await pane.ask_decision(event.proposal, line=held)
            pane.show_status(f"waiting for your decision on {event.proposal.id}")
        elif isinstance(event, ToolCallFinished):
            self.finish_call(event.index, event.record)
        elif isinstance(event, GapFound):
            await self.withdraw()
            await pane.add(GapReportView(event.report))
        elif isinstance(event, TurnFailed):
            await self.end_block()
            await pane.add(Note(event.problem.message, "error"))
            if pane.core is not None:
                await pane.core.chat.status()
        elif isinstance(event, TurnCancelled):
            await self.end_block()
            await pane.add(Note("Stopped.", "warning"))
        elif isinstance(event, TurnFinished):
            await self.end_block()
            for widget in rested_on(event.response.model_dump(mode="json")):
                await pane.add(widget)
            if event.notice:
                await pane.add(Note(event.notice.capitalize() + ".", "warning"))
            pending = pane.still_waiting(
                [
                    r.proposal_id
                    for r in event.response.tool_calls
                    if r.proposal_id and r.status == PENDING
                ]
            )
            if pending:
                await pane.add(PendingNote(pending))

    async def delta(self, event: Delta) -> None:
        pane = self.pane
        if event.kind == "thinking":
            if self.thinking is None:
                self.thinking = ThinkingView()
                await self.mounted()
                await pane.add(self.thinking, before=self.next_answer)
                pane.show_status("thinking…")
            self.thinking.add(event.text)
            return
        if self.answer is None:
            if self.next_answer is not None:
                await self.mounted()
            self.answer, self.next_answer = self.next_answer or AnswerView(), None
            if not self.answer.is_mounted:
                await pane.add(self.answer)
            await self.answer.add(event.text)
            # After the first token: a frame asked for while it is appended would be skipped.
            pane.show_status("writing…")
            return
        await self.answer.add(event.text)

    def finish_call(self, index: int, record: ToolCallRecord) -> None:
        """A call ended, or was left waiting. One that waited for a decision is drawn by the
        pane, which follows its proposal wherever it is decided (see ChatPane.call_decided)."""
        prompt = self.prompts.pop(index, None)
        if record.proposal_id and prompt is not None:
            if record.status == PENDING:
                self.pane.call_left_waiting(record)
            else:
                self.pane.call_decided(record.proposal_id, record)
            return
        line = self.calls.get(index)
        if line is not None:
            line.finish(record)

    async def end_block(self) -> None:
        """The answer so far is complete: the next text starts a new block below."""
        await self.drop_next_answer()
        if self.answer is not None:
            await self.answer.finish()
            self.pane.fit_transcript()
        self.answer = None
        self.thinking = None

    async def mounted(self) -> None:
        """Return once the answer mounted when the turn started is (awaiting a mount done
        long ago would still cost a layout)."""
        mounting, self.next_answer_mounted = self.next_answer_mounted, None
        if mounting is not None and not (self.next_answer and self.next_answer.is_mounted):
            await mounting

    async def drop_next_answer(self) -> None:
        if self.next_answer is not None:
            await self.mounted()
            await self.next_answer.remove()
            self.next_answer = None

    async def withdraw(self) -> None:
        """What the model wrote beside the gap check is not an answer: take it away."""
        await self.drop_next_answer()
        if self.answer is not None:
            await self.answer.finish()
            await self.answer.remove()
        if self.thinking is not None:
            await self.thinking.remove()
        self.answer = None
        self.thinking = None

    async def close(self) -> None:
        await self.end_block()
        for prompt in self.prompts.values():  # the turn ended (stopped) while it waited
            self.pane.settle_prompt(
                prompt,
                Content.styled("the turn ended; the proposal stays in Approvals", tone("muted")),
                final=False,
            )


def attached_line(item: Attached) -> str:
    """A resource that went with a message, as the chat shows it."""
    return f"📎 {item.server}:{item.uri} ({item.shown})"


def failure_line(tool: str, result: ToolResult) -> Content:
    """A call that failed, as one sentence: the tool (unless the message names it), what went
    wrong, and the error code last, for looking up."""
    code = result.error_code.value if result.error_code else "failed"
    message = result.error or code.replace("_", " ")
    named = () if tool in message else ((tool, "bold"), ": ")
    return Content.assemble("✗ ", *named, message, (f"  ({code})", tone("muted")))


PENDING = "pending_approval"  # a call's status while its proposal waits
APPROVED_RUNNING = Content.styled("✓ approved — running…", tone("busy"))


def settled_text(status: str, error: str | None = None) -> Content:
    """How an inline prompt ends, whatever decided it."""
    if status == PENDING:
        return Content.styled("left undecided — the proposal stays in Approvals", tone("caution"))
    if status == "succeeded":
        return Content.styled("✓ approved and run", tone("good"))
    if status == "rejected":  # with the person's reason, if they gave one
        reason = (error or "").partition("): ")[2]
        return Content.styled(f"✗ rejected: {reason}" if reason else "✗ rejected", tone("caution"))
    return Content.styled(f"✗ {status.replace('_', ' ')}: {error or ''}", tone("bad"))


def history_widgets(messages: list[StoredMessage]) -> list[Widget]:
    """A stored conversation's widgets, drawn as it was when it was left."""
    return [widget for message in messages for widget in message_widgets(message)]


def message_widgets(message: StoredMessage) -> list[Widget]:
    """One stored message's widgets (none for an answer that said nothing)."""
    widgets: list[Widget] = []
    if message.role == "user":  # what was typed; what went with it, one line each
        typed, attached = split_attachments(message.content)
        widgets.append(UserLine(typed))
        widgets += [Note(attached_line(item), "info") for item in attached]
        widgets += [Note(image.shown, "info") for image in stored_images(message.data)]
    elif message.kind is Kind.GAP:
        widgets.append(GapReportView(ToolGapReport.model_validate(message.data)))
    elif message.kind is Kind.ERROR:
        widgets.append(Note(message.content, "error"))
    elif message.role == "tool" and isinstance(message.data, dict):
        record = ToolCallRecord.model_validate(message.data)
        line = ToolCallLine(record.name, record.arguments)
        line.record = record
        widgets.append(line)
    elif message.role == "assistant":
        if message.thinking:
            widgets.append(ThinkingView(message.thinking))
        if message.content:
            drawn = prose(message.content)  # prose: one widget, not one per paragraph
            if drawn is None:
                widgets.append(AnswerView(message.content))
            else:
                widgets.append(SettledAnswer(message.content, drawn))
        widgets += rested_on(message.data)
    return widgets


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_MARKUP = re.compile(r"[*_`#>|~\\\[\]]")


def least_rows(widgets: list[Widget], width: int) -> int:
    """The fewest rows a stored message's widgets can take ``width`` columns wide (they
    may take more): a line of text or an answer of prose as its words wrap, with the blank
    row under it; an answer in Markdown blocks as if its words wrapped with no column left
    over, a line of code one row, a table none; anything else one row. Messages counted
    from the end up to the transcript's height surely fill it."""
    rows = 0
    for widget in widgets:
        if isinstance(widget, SettledAnswer | UserLine | Note) and isinstance(
            widget.content, Content
        ):
            rows += widget.content.get_height({}, width) + 1
        elif isinstance(widget, AnswerView):
            rows += _markdown_rows(widget.text, width)
        else:
            rows += 1
    return rows


def _markdown_rows(text: str, width: int) -> int:
    rows, prose, fenced = 0, [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced:
            rows += 1  # code is not wrapped
        elif not line.lstrip().startswith("|"):
            prose.append(line)
    words = " ".join(_MARKUP.sub("", _LINK_TARGET.sub("", " ".join(prose))).split())
    # n rows hold at most n * width characters, and a space is lost at each wrap.
    return rows + -(-len(words) // (max(width, 1) + 1))
