"""The pieces a chat transcript is made of: what the person typed, the model's streamed answer
and thinking, each tool call as one expandable line, inline approval prompts, gap reports."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diana.core.api import kept_files, open_file, open_url
from diana.core.api.errors import UnsafeURL
from diana.core.api.shown import brief_arguments, brief_result, one_line
from diana.core.api.types import (
    MEDIA_DIR,
    NEVER_RAN,
    Proposal,
    Source,
    ToolCallRecord,
    ToolGapReport,
)
from markdown_it import MarkdownIt
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content, Span
from textual.message import Message
from textual.reactive import var
from textual.timer import Timer
from textual.visual import VisualType
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from ..theme import ThemeAware, tone

PROMPT = "\u276f "  # heavy right-pointing angle: marks what the person typed
STATUS_MARK = {
    "succeeded": ("✓", tone("good")),
    "pending_approval": ("⏸", tone("caution")),
    "rejected": ("✗", tone("caution")),
    "denied": ("✗", tone("caution")),
    "cancelled": ("■", tone("caution")),
}
FAILED_MARK = ("✗", tone("bad"))  # any other way a call ends
MUTED = tone("muted")


def pretty(value: Any) -> RenderableType:
    if isinstance(value, str):
        return Text(value)
    return JSON(json.dumps(value, default=str, ensure_ascii=False))


class UserLine(Static):
    def __init__(self, text: str) -> None:
        prompt = Content.assemble((PROMPT, tone("person", bold=True)), (text, "bold"))
        super().__init__(prompt, classes="user")


class Note(Static):
    """A line from DIANA itself: a problem (error), a hint (warning) or information."""

    def __init__(self, text: str | Content, level: str = "info") -> None:
        super().__init__(Content(text) if isinstance(text, str) else text, classes=f"note {level}")


class Expandable(Vertical, can_focus=True):
    """A one-line header that Enter (or a click) opens to show the details beneath it."""

    # One key; the footer says what it does now.
    BINDINGS = [
        Binding("enter,space", "open(True)", "Expand", id="transcript.expand"),
        Binding("enter,space", "open(False)", "Fold", id="transcript.fold"),
    ]

    expanded: var[bool] = var(False, toggle_class="expanded", bindings=True)

    def __init__(self, *, classes: str = "") -> None:
        super().__init__(classes=f"expandable {classes}".strip())

    def compose(self) -> ComposeResult:
        yield Static(self.header(), classes="header")
        yield Static(self.details(), classes="details")

    def header(self) -> Content:
        raise NotImplementedError

    def details(self) -> VisualType:
        raise NotImplementedError

    def refresh_parts(self) -> None:
        if self.is_mounted:
            self.query_one(".header", Static).update(self.header())
            self.query_one(".details", Static).update(self.details())

    def watch_expanded(self) -> None:
        self.refresh_parts()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action != "open" or parameters == (not self.expanded,)

    def action_open(self, opened: bool) -> None:
        self.expanded = opened

    def on_click(self) -> None:
        self.expanded = not self.expanded

    @property
    def marker(self) -> str:
        return "▾" if self.expanded else "▸"


class ToolCallLine(ThemeAware, Expandable):
    """⚙ name {arguments} → result, latency; Enter shows arguments and the whole result; o
    opens an image or file the result holds (kept under the data dir) in the system viewer."""

    BINDINGS = [Binding("o", "open_media", "Open file", id="transcript.open")]

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        super().__init__(classes="tool-call")
        self.name_ = name
        self.arguments = arguments
        self.record: ToolCallRecord | None = None
        self.waiting = False  # for a person's decision
        self.progress = ""  # how far it has got, as its server says, while it runs

    def restyle(self) -> None:
        self.refresh_parts()

    def wait_for_decision(self, waiting: bool = True) -> None:
        """The call waits for a person (or, approved, runs again)."""
        self.waiting = waiting
        self.refresh_parts()

    def show_progress(self, progress: str) -> None:
        self.progress = progress
        self.refresh_parts()

    def running(self) -> None:
        """Approved (anywhere) after it was left waiting: it runs now."""
        self.record = None
        self.waiting = False
        self.refresh_parts()

    def finish(self, record: ToolCallRecord) -> None:
        self.record = record
        self.waiting = False
        self.refresh_parts()
        self.refresh_bindings()  # o, if the result holds a file

    def media(self) -> list[Path]:
        record = self.record
        core = getattr(self.app, "core", None)
        if record is None or not record.succeeded or core is None:
            return []
        text = record.result if isinstance(record.result, str) else ""
        return kept_files(text, core.paths.data_dir / MEDIA_DIR)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "open_media":
            return bool(self.media())
        return super().check_action(action, parameters)

    async def action_open_media(self) -> None:
        for path in self.media():
            opened = await open_file(path)
            if not opened:
                self.notify(f"No viewer opened it: {path}", severity="warning", timeout=10)

    def header(self) -> Content:
        """The name, then where the call is (waiting, running and how far, how it ended),
        then its arguments, then its result: a narrow terminal cuts from the end, so what
        matters most comes first."""
        line = Content.assemble((f"{self.marker} ⚙ ", MUTED), (self.name_, "bold"))
        arguments = brief_arguments(self.arguments)[:60]
        record = self.record
        if record is None:
            if self.waiting:
                line = line.append_text("  ⏸ waiting for approval", tone("caution"))
            else:
                running = f"  running… {self.progress}" if self.progress else "  running…"
                line = line.append_text(running, tone("busy"))
            return line.append_text(f"  {arguments}", MUTED)
        mark, style = STATUS_MARK.get(record.status, FAILED_MARK)
        line = line.append_text(f"  {mark} ", style)
        status = record.status.replace("_", " ")
        if record.status in NEVER_RAN and record.waited_ms is not None:  # decided, not run
            line = line.append_text(status, style).append_text(f" · {record.timing}", MUTED)
        else:
            line = line.append_text(record.timing, MUTED)
            if not record.succeeded:
                line = line.append_text(f" {status}", style)
        line = line.append_text(f"  {arguments}", MUTED)
        if record.succeeded:
            return line.append_text(" → ", MUTED).append(brief_result(record.result))
        return line

    def details(self) -> RenderableType:
        parts: list[RenderableType] = [Text("arguments", style="bold"), pretty(self.arguments)]
        record = self.record
        if record is not None:
            if record.proposal_id:
                parts.append(Text(f"proposal {record.proposal_id}", style=self.ink(MUTED)))
            if record.succeeded:
                parts += [Text("result", style="bold"), pretty(record.result)]
            else:
                heading = Text("error", style=self.ink(tone("bad", bold=True)))
                parts += [heading, Text(record.error or record.status)]
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

    def header(self) -> Content:  # muted, with the details (styles/app.tcss)
        words = len(self.text.split())
        return Content(f"{self.marker} thinking ({words} word{'s' if words != 1 else ''})")

    def details(self) -> Content:
        return Content(self.text)


def forget_removed_widgets() -> None:
    """Let go of what Textual keeps of widgets long removed. Its StylesCache.get_inner_outer
    is an lru_cache on a method, so its keys hold up to 1,024 StylesCache objects, each with
    the lines its widget last drew (tens of MiB once full); a streamed answer makes and
    drops hundreds of widgets. The cache only saves recomputing two styles: clearing it is
    always safe."""
    StylesCache.get_inner_outer.cache_clear()


@functools.cache
def markdown_parser() -> MarkdownIt:
    """One parser for every answer: Markdown makes a new one (about half a millisecond)
    for each fragment appended, otherwise."""
    return MarkdownIt("gfm-like")


class AnswerView(Markdown):
    """The model's answer, streamed through Textual's MarkdownStream, which joins fragments
    that come faster than they can be drawn. It is fed at most ten times a second (the first
    fragment at once): every append lays the screen out again, and at a fast model's pace
    that would leave no time for the keys being typed meanwhile. While the person types, it
    is fed in the pauses between keys (at least once a second): a key then waits for no
    more than its own redraw.

    An answer is the heaviest thing in the transcript (a widget per paragraph, list item and
    code block). Once settled, an answer far from what is shown is folded: it lets go of its
    blocks and keeps only its text and the height it took; scrolled near again, it is drawn
    again from its text. So the transcript's weight stays that of the answers in view."""

    FRAME = 0.1  # seconds between appends while the answer streams
    TYPING = 0.15  # a pause between keys this long lets the answer be drawn
    TYPING_FRAME = 1.0  # and it is drawn at least this often while keys are typed

    def __init__(self, text: str = "") -> None:
        super().__init__(text, classes="answer", parser_factory=markdown_parser)
        self.text = text  # everything received, drawn or not
        self.settled = bool(text)  # a whole answer: nothing more will be added
        self.folded = False
        self._stream: MarkdownStream | None = None
        self._waiting: list[str] = []  # received, not yet handed to the stream
        self._written_at = -self.FRAME
        self._next_write: Timer | None = None
        self._typed_at = -self.TYPING

    def typed(self) -> None:
        """The person typed a key: let the keys be drawn first for a while."""
        self._typed_at = time.monotonic()

    def _due_in(self) -> float:
        """Seconds until the fragments waiting may be handed to the stream: FRAME after
        the last append; while keys are typed, at the next pause between them (or
        TYPING_FRAME after the last append, if the person types on)."""
        now = time.monotonic()
        due = self._written_at + self.FRAME
        if now - self._typed_at < self.TYPING:
            due = max(due, min(self._typed_at + self.TYPING, self._written_at + self.TYPING_FRAME))
        return due - now

    async def add(self, fragment: str) -> None:
        self.text += fragment
        self._waiting.append(fragment)
        if self._next_write is not None:
            return  # it goes with the write already due
        wait = self._due_in()
        if wait <= 0:
            await self._write()
        else:
            self._next_write = self.set_timer(wait, self._write_when_due)

    async def _write_when_due(self) -> None:
        wait = self._due_in()  # keys typed since it was set: later
        if wait > 0:
            self._next_write = self.set_timer(wait, self._write_when_due)
        else:
            await self._write()

    async def _write(self) -> None:
        self._next_write = None
        if not self._waiting:
            return
        fragment = "".join(self._waiting)
        self._waiting.clear()
        self._written_at = time.monotonic()
        if self._stream is None:  # the first fragment: drawn at once, not from a task
            await self.append(fragment)
            self._stream = Markdown.get_stream(self)
            return
        await self._stream.write(fragment)

    def append(self, markdown: str) -> AwaitComplete:
        """Markdown.append, and then a frame: Markdown appends inside a batch update, and
        Textual skips a frame that falls due during a batch (a key's echo, or the append's
        own) until something else asks for one, tens of milliseconds later or more."""
        appended = super().append(markdown)

        async def drawn() -> None:
            await appended
            self.refresh(layout=True)

        return AwaitComplete(drawn())

    async def finish(self) -> None:
        """Nothing more will come: draw whatever still waits, now."""
        if self._next_write is not None:
            self._next_write.stop()
        await self._write()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
            forget_removed_widgets()  # streaming made and dropped many
        self.settled = True

    def fold(self) -> None:
        """Drop the blocks, keeping the answer's place: its height stays as it was drawn."""
        if self.folded or not self.settled or not self.is_mounted:
            return
        self.folded = True
        self.styles.height = self.outer_size.height
        self.run_worker(self._draw(""), group="answer-fold")

    def unfold(self) -> None:
        """Draw the answer again from its text."""
        if not self.folded:
            return
        self.folded = False
        self.run_worker(self._draw(self.text), group="answer-fold")

    async def _draw(self, markdown: str) -> None:
        await self.update(markdown)  # one at a time: update holds the widget's lock
        if self.folded:
            # What Textual caches for a widget is let go of when it is laid out or drawn
            # again, which a folded answer out of view never is: the list of displayed
            # children (refreshed when asked), their arrangement, and the lines drawn for
            # the answer itself (refresh clears them).
            _ = self.displayed_children
            self._clear_arrangement_cache()
            self.refresh()
            forget_removed_widgets()
        else:
            self.styles.height = None  # as tall as its blocks again


class SettledAnswer(Static):
    """A stored answer that is paragraphs of prose, drawn as AnswerView draws it, in one
    widget: a reopened conversation is mostly answers, and a Markdown widget costs one
    widget per paragraph (parsed in a thread first) to draw. Any other Markdown (a list, a
    heading, code, a link...) is an AnswerView."""

    def __init__(self, text: str, drawn: Content) -> None:
        super().__init__(drawn, classes="answer settled")
        self.text = text


INLINE_STYLES = {"em_open": "italic", "strong_open": "bold", "s_open": "strike"}


def prose(markdown: str) -> Content | None:
    """The answer as Textual's Markdown draws it, if it is only paragraphs of text (with
    emphasis, strong or struck words): its paragraphs a blank line apart. None otherwise."""
    paragraphs: list[Content] = []
    for token in markdown_parser().parse(markdown):
        if token.type in ("paragraph_open", "paragraph_close") and token.level == 0:
            continue
        if token.type != "inline" or token.level != 1 or token.children is None:
            return None
        text: list[str] = []
        spans: list[Span] = []
        opened: list[tuple[str, int]] = []
        at = 0
        for child in token.children:  # as Markdown's own blocks turn them into Content
            kind = child.type
            if kind == "text":
                words = re.sub(r"\s+", " ", child.content)
            elif kind in ("softbreak", "hardbreak"):
                words = " " if kind == "softbreak" else "\n"
            elif kind in INLINE_STYLES:
                opened.append((INLINE_STYLES[kind], at))
                continue
            elif kind.endswith("_close") and kind.replace("_close", "_open") in INLINE_STYLES:
                style, start = opened.pop()
                spans.append(Span(start, at, style))
                continue
            else:
                return None
            text.append(words)
            at += len(words)
        paragraphs.append(Content("".join(text), spans=spans))
    return Content("\n\n").join(paragraphs) if paragraphs else None


class PendingNote(Note):
    """ "Still waiting for approval: …" under a turn; it follows the proposals it names, and
    goes once none of them waits."""

    def __init__(self, proposals: list[str]) -> None:
        self.proposals = list(proposals)
        super().__init__(self.said(), "warning")

    def said(self) -> str:
        return f"Still waiting for approval: {', '.join(self.proposals)} (F3: Approvals)."

    def decided(self, proposal: str) -> None:
        if proposal not in self.proposals:
            return
        self.proposals.remove(proposal)
        if self.proposals:
            self.update(self.said())
        else:
            self.remove()


class ApprovalPrompt(Static, can_focus=True):
    """A call waits for the person (a model's call in a turn, or a /call): a approve,
    r reject, s stop waiting (the turn goes on; the proposal stays pending). The Approvals
    pane, /approve and other processes decide the same proposal; whichever is first counts."""

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

    @dataclass
    class SendOn(Message):
        """Stop waiting for this decision; the proposal stays in the queue."""

        proposal: str

    def __init__(self, proposal: Proposal, later: str = "send on without deciding") -> None:
        super().__init__(classes="approval-prompt")
        self.proposal = proposal
        self.later = later  # what s does: a turn goes on, a /call stops waiting
        self.outcome: Content | None = None  # what became of it, once it is not waiting
        self.final = False  # the call's outcome is shown: nothing later replaces it

    def on_mount(self) -> None:
        self.update(self.body())

    def body(self) -> Content:
        p = self.proposal
        text = Content.assemble(
            ("⏸ ", tone("caution", bold=True)),
            (p.tool, "bold"),
            " needs your approval — proposal ",
            (p.id, "bold"),
            f" ({p.risk.replace('_', ' ')})\n",
            (p.reason, MUTED),
            "\n",
            ("arguments ", MUTED),
            one_line(p.shown_arguments),
            "\n",
        )
        if self.outcome is not None:
            return text + self.outcome
        keys = Content.assemble(
            ("a", "bold"),
            " approve   ",
            ("r", "bold"),
            " reject   ",
            ("s", "bold"),
            f" {self.later}   (or F3: Approvals)",
        )
        return text + keys.stylize_before(tone("caution"))

    def settle(self, outcome: Content, *, final: bool = True) -> None:
        """Show what became of the proposal: approved and running, left undecided (not
        final: a decision made later still shows), or how the call ended."""
        if self.final:
            return
        self.outcome = outcome
        self.final = final
        self.can_focus = False
        self.add_class("settled")
        self.update(self.body())

    def action_decide(self, verb: str) -> None:
        if self.outcome is None:
            self.post_message(self.Decide(self.proposal.id, verb, self.proposal.digest))

    def action_send_on(self) -> None:
        if self.outcome is None:
            self.post_message(self.SendOn(self.proposal.id))


class SourceList(Static, can_focus=True):
    """The web pages an answer rests on, numbered as it cites them; ↑/↓ choose one, o (or
    Enter) opens it in the browser."""

    BINDINGS = [
        Binding("o,enter", "open_source", "Open link", id="transcript.open_source"),
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("down", "move(1)", "Next", show=False),
    ]

    chosen: var[int] = var(0)

    def __init__(self, sources: list[Source]) -> None:
        super().__init__(classes="sources")
        self.sources = sources

    def on_mount(self) -> None:
        self.refresh_lines()

    def watch_chosen(self) -> None:
        self.refresh_lines()

    def on_focus(self) -> None:
        self.refresh_lines()

    def on_blur(self) -> None:
        self.refresh_lines()

    def refresh_lines(self) -> None:
        cited = all(source.cited for source in self.sources)
        lines = [Content.styled("Sources" if cited else "Looked up (not cited)", MUTED)]
        for index, source in enumerate(self.sources):
            line = Content.assemble(
                (f"[{source.n}] ", "bold"), source.title, ("  " + source.url, MUTED)
            )
            if self.has_focus and index == self.chosen:
                line = line.stylize("reverse")
            lines.append(line)
        self.update(Content("\n").join(lines))

    def action_move(self, step: int) -> None:
        self.chosen = max(0, min(len(self.sources) - 1, self.chosen + step))

    async def action_open_source(self) -> None:
        source = self.sources[self.chosen]
        try:
            opened = await open_url(source.url)
        except UnsafeURL as exc:
            self.notify(str(exc), severity="warning", timeout=10)
            return
        if not opened:
            self.notify(f"No browser opened {source.url}", severity="warning", timeout=10)


class GapReportView(Static):
    """A request no tool can carry out, said plainly instead of a made-up answer."""

    def __init__(self, report: ToolGapReport) -> None:
        super().__init__(classes="gap-report")
        self.border_title = "Tool gap"
        self.report = report

    def on_mount(self) -> None:
        r = self.report
        self.update(
            Content.assemble(
                ("Not done: ", tone("caution", bold=True)),
                "no available tool provides ",
                (", ".join(r.missing_tools), "bold"),
                ".\n",
                ("task  ", MUTED),
                r.attempted_task,
                "\n",
                ("checked  ", MUTED),
                ", ".join(r.existing_tools_checked) or "no tools",
                "\n",
                *candidate_lines(r),
                *(
                    [("To enable it: ", MUTED), "; ".join(r.hints)]
                    if r.hints
                    else [("Add an MCP server or tool that provides it, then ask again.", MUTED)]
                ),
            )
        )


def candidate_lines(report: ToolGapReport) -> list[str | tuple[str, str]]:
    """The registry's servers for each missing tool, one line each, and how to add one."""
    if not report.candidates:
        return []
    lines: list[str | tuple[str, str]] = [("from the MCP Registry:\n", MUTED)]
    for missing, entries in report.candidates.items():
        for entry in entries:
            title = entry.get("title") or ""
            lines += [
                (f"  {missing}  ", MUTED),
                (str(entry.get("name", "")), "bold"),
                f" {title}" if title else "",
                f" — {entry.get('description', '')}\n",
            ]
    lines.append(("/install NAME adds one (tested first, after your approval). ", MUTED))
    return lines


def transcript_text(widgets: Iterable[Widget]) -> str:
    """The transcript's widgets as text, top to bottom, as /copy copies them: answers as
    written, a folded block by its header (its details too once unfolded)."""
    lines: list[str] = []
    for child in widgets:
        if isinstance(child, AnswerView | SettledAnswer):
            lines.append(child.text)
        elif isinstance(child, Expandable):
            lines.append(child.header().plain)
            if child.expanded:
                lines.append(_plain(child.details()))
        elif isinstance(child, Static):
            lines.append(_plain(child.content))
    return "\n".join(lines)


def _plain(renderable: object) -> str:
    if isinstance(renderable, Text):
        return renderable.plain
    plain = getattr(renderable, "plain", None)
    if isinstance(plain, str):
        return plain
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get().rstrip()
