"""The chat: a conversation with the local model, streamed, and direct commands that work with
or without one. Every tool call, the model's or a /call, goes through the core's orchestrator."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from diana.core.api import Core, dropped_path, read_image
from diana.core.api.errors import BadImage
from diana.core.api.shown import decided_record, printable
from diana.core.api.types import (
    IMAGES_PER_MESSAGE,
    SETTLED,
    ChatSettings,
    Image,
    OllamaStatus,
    Proposal,
    ProposalStatus,
    ToolCallRecord,
)
from diana.core.api.types import Message as StoredMessage
from diana.core.events import CallProgress, ProposalsChanged
from diana.core.models import ErrorCode, ToolResult
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.reactive import var
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input, Static
from textual.worker import Worker

from ..completion import ChatSuggester
from ..entry import Entry
from ..messages import ActionRequested, CoreEvent, DecisionRequested

if TYPE_CHECKING:
    pass
from ..theme import tone
from .base import Pane
from .chat_commands import (
    ADDITION_TOOL,
    CHAT_COMMANDS,
    COMMANDS,
    COMMANDS_BY_NAME,
    PROMPT_COMMAND,
    CommandError,
    ParsedCall,
    help_table,
    parse_call,
    shown_command,
)
from .chat_servers import prompt_message, server_prompts, server_resources
from .ollama_status import chat_title, context_text, installed_models, startup_warning
from .transcript import (
    AnswerView,
    ApprovalPrompt,
    Note,
    PendingNote,
    ToolCallLine,
    UserLine,
    pretty,
    transcript_text,
)
from .turn_view import (
    APPROVED_RUNNING,
    PENDING,
    TurnView,
    attached_line,
    failure_line,
    history_widgets,
    least_rows,
    message_widgets,
    settled_text,
)

T = TypeVar("T")


@dataclass
class HeldCall:
    """A call the chat shows waiting for a decision: its inline prompt (none in a reopened
    conversation), the model's call's line (none for a /call), and its record while it was
    left waiting."""

    tool: str
    prompt: ApprovalPrompt | None
    line: ToolCallLine | None
    waiting: ToolCallRecord | None = None

    def record(self) -> ToolCallRecord:
        """The call as it was when it began to wait: what its decided record starts from."""
        if self.waiting is not None:
            return self.waiting
        if self.line is not None:
            return ToolCallRecord(
                name=self.line.name_, arguments=self.line.arguments, status=PENDING
            )
        arguments = {} if self.prompt is None else self.prompt.proposal.shown_arguments
        return ToolCallRecord(name=self.tool, arguments=arguments, status=PENDING)


STOP_KEY_DELAY = 0.3  # seconds into a turn before the footer shows Esc
REQUESTS_FIRST = 0.01  # seconds the screen waits after Enter, while the model is asked


class ChatPane(Pane):
    """The conversation and the input."""

    PANE_TITLE = "Chat"
    FOCUS_KEY = "F2"
    BINDINGS = [
        Binding("escape", "stop", "Stop reply", id="chat.stop"),
        # Not in the footer, which is full at 80 columns: /help and the palette name it.
        Binding("ctrl+l", "app.open_models", "Models", id="chat.models", show=False),
        Binding("ctrl+o", "app.open_chats", "Conversations", id="chat.chats"),
    ]
    # How far the turn's tool calls have got; what became of the proposals shown inline.
    EVENTS = (CallProgress, ProposalsChanged)
    turn: Worker[None] | None = None
    turn_view: TurnView | None = None  # what draws the turn running, or the last one
    start_failed: var[bool] = var(False)  # the core could not open: nothing to ask

    @dataclass
    class CallRequested(ActionRequested[ToolResult]):
        """A /call (or /install): the tool called through the orchestrator, as the chat's."""

        tool: str
        arguments: dict[str, object]

    class ClearRequested(ActionRequested[None]):
        """/clear: the next message starts a new conversation (the old one stays stored)."""

    class SendOnRequested(Message):
        """The turn waiting on a decision goes on without it; the proposal stays."""

    @dataclass
    class ModelRequested(ActionRequested[None]):
        """/model NAME: the chat uses this model from the next message."""

        model: str

    @dataclass
    class SettingRequested(ActionRequested[ChatSettings]):
        """/system or /set: the conversation's own system prompt ("system"), or one of its
        Ollama options ("option" NAME, None: back to the default)."""

        kind: str
        name: str
        value: str | None

    @dataclass
    class ThinkRequested(ActionRequested[None]):
        """/think on|off: whether a thinking model is asked to think."""

        think: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A /call waiting for a decision, by proposal: set when the person leaves it pending.
        self.held_calls: dict[str, asyncio.Event] = {}
        # Every call the chat shows waiting for a decision, by proposal, until it is drawn
        # decided (model's calls and /calls alike, left pending or not).
        self.held: dict[str, HeldCall] = {}
        self._fit_asked = False
        self.images: list[Image] = []  # pictures that go with the next message
        self.border_title = "Chat — starting…"  # until the core is open, or failed to

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="chat-transcript")
        yield Static(id="chat-status")
        yield Entry(
            id="chat-input",
            classes="pane-body",
            placeholder="Ask DIANA, or type a command — /help lists them",
            suggester=ChatSuggester(
                COMMANDS,
                self.server_names,
                lambda: server_resources(self.core),
                lambda: server_prompts(self.core),
            ),
        )

    def server_names(self) -> list[str]:
        return [] if self.core is None else list(self.core.server_configs)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#chat-input", Entry).take_paste = self.pasted
        transcript = self.query_one("#chat-transcript", VerticalScroll)
        transcript.anchor()
        self.watch(transcript, "scroll_y", self.fit_transcript, init=False)
        self.say(
            Text.assemble(
                ("DIANA", "bold"),
                " — ask anything; tool calls that could do harm wait for your approval. "
                "Commands work without a model: ",
                ("/help", "bold"),
                ".",
            )
        )

    # -- what the pane shows -------------------------------------------------------------

    @property
    def transcript(self) -> VerticalScroll:
        return self.query_one("#chat-transcript", VerticalScroll)

    def say(self, renderable: RenderableType, classes: str = "") -> None:
        self.transcript.mount(Static(renderable, classes=classes or "output"))

    def note(self, text: str | Content, level: str = "info") -> None:
        self.transcript.mount(Note(text, level))

    async def add(self, widget: Widget, before: Widget | None = None) -> None:
        await self.transcript.mount(widget, before=before)

    def on_resize(self) -> None:
        self.fit_transcript()

    def fit_transcript(self) -> None:
        """Keep drawn only the settled answers within a screen of what is shown; the
        others fold (see AnswerView). Asked on every scroll; done once the screen has been
        laid out (positions are then current), once for a burst of asks."""
        if not self._fit_asked:
            self._fit_asked = True
            self.call_after_refresh(self._fit_now)

    def _fit_now(self) -> None:
        self._fit_asked = False
        transcript = self.transcript
        height = transcript.size.height
        top, bottom = transcript.scroll_y - height, transcript.scroll_y + 2 * height
        for answer in transcript.query_children(AnswerView):
            region = answer.virtual_region
            if region.height and (region.bottom < top or region.y > bottom):
                answer.fold()
            else:
                answer.unfold()

    # -- the inline approval prompt: one home for a model's call and a /call ---------------

    async def ask_decision(
        self,
        proposal: Proposal,
        later: str = "send on without deciding",
        line: ToolCallLine | None = None,
    ) -> ApprovalPrompt:
        """Show a call that waits for the person, with its a/r/s prompt, and hand the prompt
        the keys. Whatever decides it (these keys, the Approvals pane, /approve, another
        process) reaches the waiting side through the approvals service, and the chat
        through ``follow_prompts``. ``line``: the model's call's line (none for a /call)."""
        prompt = ApprovalPrompt(proposal, later)
        await self.add(prompt)
        self.held[proposal.id] = HeldCall(proposal.tool, prompt, line)
        prompt.focus(scroll_visible=False)  # a scroll here would let go of the end
        return prompt

    def settle_prompt(self, prompt: ApprovalPrompt, outcome: Content, *, final: bool) -> None:
        """The decision is in (or no longer awaited): say so, and give typing back."""
        had_focus = prompt.has_focus
        prompt.settle(outcome, final=final)
        if had_focus:
            self.query_one("#chat-input").focus()
        self.refresh_bindings()

    def end_prompt(self, prompt: ApprovalPrompt, status: str, error: str | None = None) -> None:
        """The call the prompt held ended as ``status`` (or was left pending)."""
        self.settle_prompt(prompt, settled_text(status, error), final=status != PENDING)

    # -- calls that wait for a decision: one state, drawn once, wherever it is decided -----

    def call_left_waiting(self, record: ToolCallRecord) -> None:
        """The model's call was left waiting (s): its line says so; a decision made later,
        anywhere, still comes to it (``follow_prompts``)."""
        held = self.held.get(record.proposal_id or "")
        if held is None:
            return
        held.waiting = record
        if held.line is not None:
            held.line.finish(record)
        if held.prompt is not None:
            self.end_prompt(held.prompt, PENDING)

    def call_decided(self, proposal: str, record: ToolCallRecord) -> None:
        """A call the chat shows waiting was decided (here, in Approvals, by `diana approve`)
        and has ended: its prompt, its line (or a /call's output, under its prompt) and the
        note of what still waits all say how, once."""
        held = self.held.pop(proposal, None)
        if held is None:
            return
        waiting = self.held_calls.get(proposal)
        if waiting is not None:  # a /call's wait ends: it is decided
            waiting.set()
        if held.prompt is not None:
            self.end_prompt(held.prompt, record.status, record.error)
        if held.line is not None:
            held.line.finish(record)
        elif record.succeeded:
            self.show_result(held.tool, ToolResult.ok(record.result), record, after=held.prompt)
        for note in self.transcript.query(PendingNote):
            note.decided(proposal)
        if self.turn is None or not self.turn.is_running:
            self.show_status("")

    def still_waiting(self, proposals: list[str]) -> list[str]:
        """Of these proposals, those the chat still shows waiting."""
        return [p for p in proposals if p in self.held]

    @work(exclusive=True, group="prompt-follow", exit_on_error=False)
    async def follow_prompts(self) -> None:
        """Each call shown waiting follows its proposal, wherever it is decided: approved →
        running → how the call ended, with its result (a left-undecided one too)."""
        if self.core is None:
            return
        core = self.core
        for proposal_id, held in list(self.held.items()):
            try:
                proposal = await core.proposal(proposal_id)
            except Exception:  # gone or damaged: the Approvals pane says so
                continue
            self.follow_prompt(held, proposal)

    def follow_prompt(self, held: HeldCall, proposal: Proposal) -> None:
        """One call shown waiting, as its proposal now is."""
        if proposal.status in SETTLED:
            self.call_decided(proposal.id, decided_record(held.record(), proposal))
        elif proposal.status in (ProposalStatus.APPROVED, ProposalStatus.EXECUTING):
            prompt = held.prompt
            if prompt is not None and (
                prompt.outcome is None or prompt.outcome.plain != APPROVED_RUNNING.plain
            ):
                self.settle_prompt(prompt, APPROVED_RUNNING, final=False)
            if held.line is not None and (held.line.record or held.line.waiting):
                held.line.running()
                self.show_status(f"running {proposal.tool}…")

    def show_status(self, text: str) -> None:
        status = self.query_one("#chat-status", Static)
        status.update(Text(text, style="italic"))
        status.set_class(bool(text), "active")

    def watch_core(self, core: Core | None) -> None:
        if core is not None:
            self.update_title()
            self.check_ollama()

    @work(exclusive=True, group="ollama", exit_on_error=False)
    async def check_ollama(self) -> None:
        """In the background: the app is usable while Ollama is slow or missing."""
        if self.core is not None:
            self.show_ollama(await self.core.chat.status())

    def update_title(self) -> None:
        if self.core is not None:
            self.border_title = chat_title(self.core.chat)

    def show_startup_error(self, message: str) -> None:
        self.start_failed = True
        self.border_title = "Chat — DIANA did not start"
        self.note(Content.assemble(("DIANA could not start: ", "bold"), message), "error")
        self.note("Fix the problem above, then restart diana-tui. Ctrl+Q quits.", "warning")

    def show_ollama(self, status: OllamaStatus) -> None:
        """Say once, at start, what stands between the person and a working model."""
        self.update_title()
        assert self.core is not None
        warning = startup_warning(status, self.core.chat.model)
        if warning is not None:
            self.note(warning, "warning")

    async def show_history(self, messages: list[StoredMessage], opened: str | None = None) -> None:
        """A reopened conversation, drawn as it was when it was left; a call it left waiting
        follows its proposal from here on (decided since, it says how at once). ``opened``:
        the title of one opened from the Conversations view (the last one otherwise)."""
        if not messages:
            return
        which = (
            "the last conversation" if opened is None else f"“{printable(opened, multiline=False)}”"
        )
        self.note(f"Reopened {which} ({len(messages)} messages). /clear starts a new one.")
        # Its end is drawn first: the messages that surely fill what the transcript shows
        # (their widgets are what takes the time). The earlier ones go above after.
        transcript = self.transcript
        height = transcript.size.height or self.app.size.height
        width = transcript.size.width or self.app.size.width
        first: list[Widget] = []
        start, rows = len(messages), 0
        while start and (rows < height or not first):
            start -= 1
            widgets = message_widgets(messages[start])
            if widgets:
                first[:0] = widgets
                rows += least_rows(widgets, width)
        await transcript.mount_all(first)
        self.follow_waiting(first)
        if start:
            self.mount_earlier(messages[:start], first[0])

    def follow_waiting(self, widgets: list[Widget]) -> None:
        """The calls a reopened conversation left waiting follow their proposals from here
        on (decided since, each says how at once)."""
        held = False
        for line in widgets:
            if isinstance(line, ToolCallLine) and line.record and line.record.proposal_id:
                if line.record.status == PENDING:
                    self.held[line.record.proposal_id] = HeldCall(
                        line.name_, None, line, line.record
                    )
                    held = True
        if held:
            self.follow_prompts()

    @work(group="history", exit_on_error=False)
    async def mount_earlier(self, messages: list[StoredMessage], before: Widget) -> None:
        """A reopened conversation's earlier messages, above its end once that is drawn;
        done once they are laid out and drawn too."""
        await self.refreshed()
        widgets = history_widgets(messages)
        if before.is_attached and widgets:
            await self.transcript.mount_all(widgets, before=before)
            self.follow_waiting(widgets)
            await self.refreshed()

    def copy_transcript(self) -> None:
        """/copy: the conversation as text, to the terminal's clipboard (OSC 52)."""
        text = self.plain_text()
        self.app.copy_to_clipboard(text)
        lines = text.count("\n") + 1
        self.note(f"Copied the conversation ({lines} lines) to the clipboard.")

    def plain_text(self) -> str:
        """Everything in the transcript as text, top to bottom, as /copy copies it."""
        return transcript_text(self.transcript.children)

    # -- input ---------------------------------------------------------------------------

    @on(Input.Submitted, "#chat-input")
    def submit(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.clear()
        if not text:
            return
        self.transcript.anchor()  # back to the end, and follow it, whatever was being read
        if text.startswith("/"):
            self.transcript.mount(UserLine(shown_command(text)))
            self.run_command(text)
        elif self.pasted(text):  # a path to a picture, typed or dropped: it goes with the next
            return
        elif self.core is None and not self.start_failed:
            self.note("DIANA is still starting — ask again in a moment.", "warning")
        elif self.core is None:
            self.note("DIANA did not start, so there is no model to ask.", "error")
        elif self.turn is not None and self.turn.is_running:
            self.note(
                "A reply is still being written — wait for it, or press Esc to stop it.", "warning"
            )
        else:
            # The model's requests go out before the screen is drawn again: a frame drawn
            # while they are being sent holds them up for as long as it takes to draw.
            self.app.delay_update(REQUESTS_FIRST)
            images, self.images = self.images, []
            self.turn = self.run_turn(text, images)
            self.transcript.mount(UserLine(text))
            for image in images:
                self.transcript.mount(Note(image.shown, "info"))

    @on(Input.Changed, "#chat-input")
    def typed(self, event: Input.Changed) -> None:
        """Keys go before the answer being streamed: it is drawn less often meanwhile."""
        if self.turn_view is not None and self.turn_view.answer is not None:
            self.turn_view.answer.typed()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.turn is not None and self.turn.is_running
        return True

    def action_stop(self) -> None:
        if self.turn is not None and self.turn.is_running:
            self.turn.cancel()

    # -- a turn --------------------------------------------------------------------------

    async def attach(self, text: str) -> str:
        """`@server:uri` in the message: the resources read and added to it, each said in
        the chat; "" (nothing sent, the message back in the input) if one cannot be read."""
        from diana.core.api import with_attachments
        from diana.core.api.errors import CatalogError

        assert self.core is not None
        core = self.core
        try:
            sent, attached = await with_attachments(text, core.server_configs, core.connected)
        except CatalogError as exc:
            self.note(f"Not sent: {exc}", "error")
            self.query_one("#chat-input", Input).value = text
            return ""
        for item in attached:
            self.note(attached_line(item), "info")
        return sent

    @work(group="turn", exit_on_error=False)
    async def run_turn(self, text: str, images: list[Image] | None = None) -> None:
        assert self.core is not None
        if "@" in text:  # perhaps `@server:uri`: resources to go with the message
            text = await self.attach(text)
            if not text:
                return
        view = self.turn_view = TurnView(self)
        # The footer's Esc key: its redraw takes tens of milliseconds, which must not stand
        # between Enter and the first token; nor must setting its timer, done once the
        # screen has shown the question (the model is asked meanwhile).
        stop_key: list[Timer] = []
        self.call_after_refresh(self._arm_stop_key, stop_key)
        try:
            await self.core.chat.run_turn(text, view.show, images=images or ())
        except BadImage as exc:  # the model does not take them: nothing was sent
            self.note(f"Not sent: {exc}.", "error")
            self.query_one("#chat-input", Input).value = text
        finally:
            for timer in stop_key:
                timer.stop()
            await view.close()
            self.show_status("")
            self.update_title()
            self.call_after_refresh(self.refresh_bindings)
        if (notice := self.core.chat.context_notice()) is not None:
            self.note(notice[0].upper() + notice[1:] + ".", "warning")

    def _arm_stop_key(self, timers: list[Timer]) -> None:
        if self.turn is not None and self.turn.is_running:
            timers.append(self.set_timer(STOP_KEY_DELAY, self.refresh_bindings))

    @on(ApprovalPrompt.SendOn)
    def send_on(self, event: ApprovalPrompt.SendOn) -> None:
        event.stop()
        held = self.held_calls.get(event.proposal)
        if held is not None:
            held.set()
            self.focus_input()
        elif self.core is not None:  # the App gives typing back if the turn goes on
            self.post_message(self.SendOnRequested())

    def focus_input(self) -> None:
        self.query_one("#chat-input").focus()

    @on(ApprovalPrompt.Decide)
    def prompt_decided(self, event: ApprovalPrompt.Decide) -> None:
        event.stop()
        self.post_message(DecisionRequested(event.proposal, event.verb, seen=event.seen))

    # -- direct commands -----------------------------------------------------------------

    @work(group="command", exit_on_error=False)
    async def run_command(self, text: str) -> None:
        name, _, rest = text.partition(" ")
        command = COMMANDS_BY_NAME.get(name)
        if self.core is None and (command is None or command.needs_core):
            self.note("DIANA did not start; only /help works.", "error")
            return
        if command is None and self.core is not None:
            if name.partition(":")[0][1:] in self.core.server_configs:
                command = PROMPT_COMMAND
        if command is None:
            self.note(f"Unknown command {name}. Type /help.", "warning")
            return
        ran = command.run(self, name, rest.strip())
        if ran is not None:
            await ran

    async def use_prompt(self, target: str, rest: str) -> None:
        """/SERVER:PROMPT NAME=VALUE …: the server's prompt, sent to the model as a message.
        An unknown prompt or argument, or a missing one, is named and nothing is sent."""
        from diana.core.api.errors import CatalogError

        assert self.core is not None
        try:
            text = await prompt_message(self.core, self.app, target, rest)
        except (ValueError, CatalogError) as exc:
            self.note(str(exc), "error")
            return
        if text is None:
            self.note(f"Prompt {target} not sent.", "warning")
            return
        if self.turn is not None and self.turn.is_running:
            self.note("A reply is still being written — send the prompt again after it.", "warning")
            return
        self.turn = self.run_turn(text)
        self.transcript.mount(UserLine(text))

    def show_help(self) -> None:
        self.say(help_table(CHAT_COMMANDS))

    def show_tools(self) -> None:
        assert self.core is not None
        table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False)
        for column in ("tool", "agent", "risk", "description"):
            table.add_column(column, style="bold" if column == "tool" else "")
        for definition, agent in self.core.tool_definitions():
            table.add_row(definition.name, agent, definition.risk.value, definition.description)
        self.say(table)

    async def call_tool(self, text: str) -> None:
        try:
            call = parse_call(text)
        except CommandError as exc:
            self.note(str(exc), "error")
            return
        await self.run_call(call)

    async def install_server(self, registry_name: str) -> None:
        """/install NAME: the sub-agent's addition of a registry server, as a /call of it
        (a proposal to approve here; the server is tested before it is written)."""
        if not registry_name or " " in registry_name:
            self.note(
                "usage: /install REGISTRY_NAME, as a tool-gap report or "
                "mcp_search_servers names it",
                "error",
            )
            return
        await self.run_call(ParsedCall(ADDITION_TOOL, {"registry_name": registry_name}))

    async def run_call(self, call: ParsedCall) -> None:
        assert self.core is not None
        request = self.CallRequested(call.tool, call.arguments)
        self.post_message(request)
        result = await request.outcome
        if result.error_code is ErrorCode.PENDING_APPROVAL:
            proposal = await self.core.proposal(str(result.data["proposal_id"]))
            self.held_calls[proposal.id] = asyncio.Event()
            prompt = await self.ask_decision(proposal, later="leave it pending")
            self.await_call_decision(prompt)
            return
        self.show_result(call.tool, result)

    @work(group="call-decisions", exit_on_error=False)
    async def await_call_decision(self, prompt: ApprovalPrompt) -> None:
        """A /call that needs approval waits here, not in its command: the chat goes on.
        Its outcome comes as every held call's does, from its proposal's change wherever it
        is decided (follow_prompt); left pending (s), it shows its outcome when it comes."""
        proposal = prompt.proposal.id
        try:
            await self.held_calls[proposal].wait()  # decided (call_decided), or left
        finally:
            del self.held_calls[proposal]
        if proposal in self.held:  # left pending: still followed
            self.end_prompt(prompt, PENDING)

    def show_result(
        self,
        tool: str,
        result: ToolResult,
        record: ToolCallRecord | None = None,
        after: Widget | None = None,
    ) -> None:
        """What a /call gave (``record``: how long it ran and waited; ``after``: shown under
        its prompt, not at the end)."""
        if not result.success:
            self.note(failure_line(tool, result), "error")
            return
        timing = f"  {record.timing}" if record is not None else ""
        heading = Content.assemble(("✓ ", tone("good")), (tool, "bold"), (timing, tone("muted")))
        widgets = [Static(heading, classes="output"), Static(pretty(result.data), classes="output")]
        if after is not None and after.is_attached:
            self.transcript.mount_all(widgets, after=after)
        else:
            self.transcript.mount_all(widgets)

    def decide(self, verb: str, rest: str) -> None:
        proposal, _, reason = rest.partition(" ")
        if not proposal:
            self.note(f"usage: /{verb} ID" + (" [reason]" if verb == "reject" else ""), "warning")
            return
        self.post_message(
            DecisionRequested(proposal, verb, reason=reason.strip() or None, from_chat=True)
        )

    async def choose_model(self, name: str) -> None:
        assert self.core is not None
        chat = self.core.chat
        status = await chat.status()
        if not name:
            if not status.reachable:
                self.note(f"{status.problem}.", "warning")
            else:
                self.say(installed_models(status, chat.model))
        elif status.reachable and not status.has(name):
            self.note(f'model "{name}" is not installed — "ollama pull {name}"', "error")
        else:
            request = self.ModelRequested(name)
            self.post_message(request)
            await request.outcome
            self.note(f"Now using {name}.")
            if not status.reachable:
                self.note(f"{status.problem}.", "warning")
        self.update_title()

    async def open_models(self) -> None:
        """/models: the Models view."""
        await self.run_action("app.open_models")

    async def pull_model(self, name: str) -> None:
        """/pull NAME: the model pulled, its progress on one line of the conversation."""
        if not name or " " in name:
            self.note("usage: /pull NAME, e.g. /pull qwen3:8b", "warning")
            return
        line = Static(Content(f"Pulling {name}…"), classes="output pull-progress")
        await self.add(line)
        self.follow_pull(name, line)

    @work(group="pull", exit_on_error=False)
    async def follow_pull(self, name: str, line: Static) -> None:
        from diana.core.api.errors import LLMProblem

        from ..modals.models import progress_bar

        assert self.core is not None
        try:
            async for step in self.core.chat.models.pull(name):
                line.update(
                    Content.assemble(("Pulling ", "bold"), (name, "bold"), "  ", progress_bar(step))
                )
        except LLMProblem as problem:
            line.update(Content.assemble(("✗ ", tone("bad")), problem.message))
            return
        line.update(
            Content.assemble(("✓ ", tone("good")), f"pulled {name} — /model {name} uses it")
        )

    async def set_think(self, value: str) -> None:
        if value not in ("on", "off"):
            self.note("usage: /think on|off", "warning")
            return
        request = self.ThinkRequested(value == "on")
        self.post_message(request)
        await request.outcome
        self.note(f"Thinking {value}.")
        self.update_title()

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, CallProgress) and self.turn_view is not None:
            self.turn_view.progress(event)
        elif isinstance(event, ProposalsChanged):
            if isinstance(event.written, Proposal):  # as written here: nothing to read
                if event.written.id in self.held:
                    self.follow_prompt(self.held[event.written.id], event.written)
            else:
                self.follow_prompts()

    async def show_conversation(self, messages: list[StoredMessage], title: str) -> None:
        """Another conversation in the chat: the transcript drawn anew from its messages.
        Returns once the screen shows it, drawn in one frame (none of the one before, half
        gone, nor of its messages half mounted)."""
        with self.app.batch_update():
            self.forget_transcript()
            await self.show_history(messages, title)
            self.update_title()
            # One layout and paint for all of it: else the pane's title may be drawn first,
            # over the old layout, and the transcript laid out in a frame of its own.
            self.screen.refresh(repaint=False, layout=True)
        await self.laid_out()

    async def laid_out(self) -> None:
        """Until the screen has next been laid out and drawn (the widgets it placed anew
        then refresh themselves, which draws nothing new), or until it has drawn what it
        was asked to, if that comes first (a screen that is not shown lays nothing out)."""
        drawn: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(_: object = None) -> None:
            if not drawn.done():
                drawn.set_result(None)

        signal = self.screen.screen_layout_refresh_signal
        signal.subscribe(self, done, immediate=True)
        try:
            if self.transcript.call_after_refresh(done):  # (false once the pane is closing)
                await drawn
        finally:
            signal.unsubscribe(self)

    async def refreshed(self) -> None:
        """Until the screen has been laid out and drawn as it is now."""
        drawn: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not drawn.done():  # (cancelled meanwhile: a switch to another conversation)
                drawn.set_result(None)

        if self.transcript.call_after_refresh(done):  # (false once the pane is closing)
            await drawn

    async def conversation_deleted(self) -> None:
        """The open conversation was deleted: the chat starts a new one."""
        self.forget_transcript()
        self.note("That conversation was deleted; this is a new one.")

    def forget_transcript(self) -> None:
        self.workers.cancel_group(self, "history")
        self.transcript.remove_children()
        self.turn_view = None
        self.held.clear()  # their prompts are gone; the proposals stay
        for held in self.held_calls.values():
            held.set()

    async def open_chats(self) -> None:
        """/chats: the Conversations view."""
        await self.run_action("app.open_chats")

    def pasted(self, text: str) -> bool:
        """A pasted or dropped text that is the path of a picture: it goes with the next
        message (said in the chat), and is not typed in; anything else is typed."""
        path = dropped_path(text)
        if path is None or self.core is None:
            return False
        self.attach_picture(str(path))
        return True

    async def attach_image(self, path: str) -> None:
        """/image PATH: a picture to go with the next message; /image alone names those
        waiting to go, /image none drops them."""
        if not path or path == "none":
            if path == "none":
                self.images.clear()
            waiting = ", ".join(image.name for image in self.images)
            self.note(
                f"Going with your next message: {waiting}."
                if waiting
                else "usage: /image PATH — a PNG, JPEG, GIF or WebP picture for your next message"
            )
            return
        await self.attach_now(path)

    @work(group="image", exit_on_error=False)
    async def attach_picture(self, path: str) -> None:
        await self.attach_now(path)

    async def attach_now(self, path: str) -> None:
        """The picture read and checked against the model now, so a refusal comes before
        the message is written; one that cannot go is said, and not kept."""
        assert self.core is not None
        try:
            image = read_image(path)
            if len(self.images) >= IMAGES_PER_MESSAGE:
                raise BadImage(f"at most {IMAGES_PER_MESSAGE} images go with one question")
            await self.core.chat.check_takes_images()
        except BadImage as exc:
            self.note(f"{exc}.", "error")
            return
        self.images.append(image)
        self.note(f"{image.shown} — goes with your next message")

    async def set_system(self, text: str) -> None:
        """/system TEXT: this conversation's own system prompt; /system alone shows it,
        /system none removes it."""
        assert self.core is not None
        if not text:
            system = self.core.chat.conversation_settings.system
            self.note(
                f"System prompt: {system}"
                if system
                else "No system prompt of its own: /system TEXT"
            )
            return
        await self.change_setting("system", "", "" if text == "none" else text)

    async def set_option(self, rest: str) -> None:
        """/set NAME VALUE: an Ollama option for this conversation; /set alone lists them,
        /set NAME default removes one."""
        from diana.core.api.shown import options_text
        from diana.core.api.types import OPTIONS

        assert self.core is not None
        name, _, value = rest.partition(" ")
        if not name:
            chat = self.core.chat
            options = options_text(chat.conversation_settings.options)
            fill = chat.context_fill()
            context = "" if fill is None else f" Context: {context_text(*fill)}."
            self.note(
                f"Options: {options or 'the model defaults'}.{context} /set NAME VALUE sets "
                f"one ({', '.join(OPTIONS)}); /set NAME default removes it."
            )
            return
        if not value.strip():
            self.note(f"usage: /set {name} VALUE (or /set {name} default)", "warning")
            return
        value = value.strip()
        await self.change_setting("option", name, None if value == "default" else value)

    async def change_setting(self, kind: str, name: str, value: str | None) -> None:
        from diana.core.api.errors import BadChatInput
        from diana.core.api.shown import options_text

        request = self.SettingRequested(kind, name, value)
        self.post_message(request)
        try:
            settings = await request.outcome
        except BadChatInput as exc:
            self.note(str(exc), "error")
            return
        if kind == "system":
            self.note(
                "System prompt set for this conversation, after diana's own."
                if settings.system
                else "System prompt removed."
            )
        else:
            options = options_text(settings.options)
            self.note(f"Options for this conversation: {options or 'the model defaults'}.")

    async def clear_conversation(self) -> None:
        if self.turn is not None and self.turn.is_running:
            self.note("Stop the reply first (Esc), then /clear.", "warning")
            return
        request = self.ClearRequested()
        self.post_message(request)
        await request.outcome
        self.forget_transcript()
        self.images.clear()
        self.note("New conversation.")
