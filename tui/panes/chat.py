"""The chat: a conversation with the local model, streamed, and direct commands that work with
or without one. Every tool call, the model's or a /call, goes through the core's orchestrator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from diana.core.approvals.service import result_of
from diana.core.approvals.store import SETTLED, Proposal, ProposalStatus
from diana.core.arguments import ArgumentsError, parse_arguments
from diana.core.attachments import Attached, split_attachments
from diana.core.events import CallProgress, ProposalsChanged
from diana.core.llm.conversation import Kind
from diana.core.llm.conversation import Message as StoredMessage
from diana.core.llm.gaps import ToolGapReport
from diana.core.llm.ollama import OllamaStatus
from diana.core.llm.session import (
    ApprovalPending,
    Delta,
    FactUsed,
    GapFound,
    Progress,
    ToolCallFinished,
    ToolCallRecord,
    ToolCallStarted,
    TurnCancelled,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from diana.core.llm.sources import Source
from diana.core.models import ErrorCode, ToolResult
from diana.core.runtime import Runtime
from diana.core.telemetry import names_a_secret, redact
from pydantic import ValidationError
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import var
from textual.timer import Timer
from textual.widget import AwaitMount, Widget
from textual.widgets import Input, Static
from textual.worker import Worker

from ..completion import ChatSuggester
from ..entry import Entry
from ..messages import CoreEvent, DecisionRequested

if TYPE_CHECKING:
    from diana.core.elicitation import Answer
    from diana.core.mcp.catalog import PromptInfo
    from diana.core.mcp.connection import ServerConnection
from ..theme import tone
from .base import Pane
from .transcript import (
    AnswerView,
    ApprovalPrompt,
    Expandable,
    GapReportView,
    Note,
    SourceList,
    ThinkingView,
    ToolCallLine,
    UserLine,
    pretty,
)

HELP = [
    ("/tools", "list the tools the agents provide"),
    ("/call TOOL {json}", 'call a tool, e.g. /call get_current_time {"timezone": "UTC"}'),
    ("/install NAME", "add a server from the MCP Registry (tested, after your approval)"),
    ("/approve ID", "approve a proposal and run it"),
    ("/reject ID [reason]", "reject a proposal"),
    ("/model [NAME]", "list the installed models, or switch to one"),
    ("/think on|off", "ask a thinking model to think (shown folded)"),
    ("/SERVER:PROMPT [NAME=VALUE …]", "send an MCP server's prompt to the model"),
    ("/clear", "start a new conversation (the old one stays stored)"),
    ("/copy", "copy the conversation, as text, to the clipboard"),
    ("/help", "show this list"),
]

T = TypeVar("T")
# What `/` completes to, besides servers' names: each command's name.
COMMANDS = [usage.split()[0][1:] for usage, _ in HELP if ":" not in usage]

ADDITION_TOOL = "mcp_request_server_addition"  # what /install calls
STOP_KEY_DELAY = 0.3  # seconds into a turn before the footer shows Esc
REQUESTS_FIRST = 0.01  # seconds the screen waits after Enter, while the model is asked


@dataclass(frozen=True)
class ParsedCall:
    tool: str
    arguments: dict[str, object]


class CommandError(Exception):
    """A direct command that cannot run as typed; shown as one line."""


def parse_call(text: str) -> ParsedCall:
    """Parse the part after ``/call``: a tool name, then an optional JSON object."""
    parts = text.strip().split(maxsplit=1)
    if not parts:
        raise CommandError('usage: /call TOOL {"argument": "value"}')
    try:
        arguments = parse_arguments(parts[1] if len(parts) > 1 else None)
    except ArgumentsError as exc:
        raise CommandError(f"arguments: {exc}") from None
    return ParsedCall(parts[0], arguments)


def shown_command(text: str) -> str:
    """The typed line as it may be shown: /call arguments with secret values hidden."""
    name, _, rest = text.partition(" ")
    if name != "/call":
        return text
    try:
        call = parse_call(rest)
    except CommandError:
        return text if not names_a_secret(rest) else f"{name} {rest.split()[0]} …"
    if not call.arguments:
        return text
    return f"{name} {call.tool} {json.dumps(redact(call.arguments), ensure_ascii=False)}"


def ollama_state(status: OllamaStatus | None, model: str) -> str:
    if status is None:
        return "checking Ollama…"
    if not status.reachable:
        return "Ollama not reachable"
    if not status.has(model):
        return "model not installed"
    return "Ollama ready"


class ChatPane(Pane):
    """The conversation and the input."""

    PANE_TITLE = "Chat"
    FOCUS_KEY = "F2"
    BINDINGS = [Binding("escape", "stop", "Stop reply", id="chat.stop")]
    # How far the turn's tool calls have got; what became of the proposals shown inline.
    EVENTS = (CallProgress, ProposalsChanged)
    turn: Worker[None] | None = None
    turn_view: TurnView | None = None  # what draws the turn running, or the last one
    start_failed: var[bool] = var(False)  # the core could not open: nothing to ask

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A /call waiting for a decision, by proposal: set when the person leaves it pending.
        self.held_calls: dict[str, asyncio.Event] = {}
        self._fit_asked = False
        self.border_title = "Chat — starting…"  # until the core is open, or failed to

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="chat-transcript")
        yield Static(id="chat-status")
        yield Entry(
            id="chat-input",
            classes="pane-body",
            placeholder="Ask DIANA, or type a command — /help lists them",
            suggester=ChatSuggester(
                COMMANDS, self.server_names, self.server_resources, self.server_prompts
            ),
        )

    def server_names(self) -> list[str]:
        return [] if self.runtime is None else list(self.runtime.mcp.configs)

    async def server_resources(self) -> list[tuple[str, str]]:
        """Every ready server's resources, for `@server:uri`."""
        from diana.core.mcp.catalog import list_resources

        listed = await self._from_ready_servers(list_resources)
        return [(server, r.uri) for server, r in listed if not r.template]

    async def server_prompts(self) -> list[tuple[str, str]]:
        """Every ready server's prompts, for `/server:prompt`."""
        from diana.core.mcp.catalog import list_prompts

        return [(server, p.name) for server, p in await self._from_ready_servers(list_prompts)]

    async def _from_ready_servers(
        self, listing: Callable[[ServerConnection], Awaitable[list[T]]]
    ) -> list[tuple[str, T]]:
        """What ``listing`` gives for each ready server (one that fails to list gives none)."""
        from diana.core.mcp.catalog import CatalogError

        if self.runtime is None:
            return []
        found: list[tuple[str, T]] = []
        for name, connection in list(self.runtime.mcp.connections.items()):
            if connection.ready:
                with contextlib.suppress(CatalogError):
                    found += [(name, item) for item in await listing(connection)]
        return found

    def on_mount(self) -> None:
        super().on_mount()
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
        self, proposal: Proposal, later: str = "send on without deciding"
    ) -> ApprovalPrompt:
        """Show a call that waits for the person, with its a/r/s prompt, and hand the prompt
        the keys. Whatever decides it (these keys, the Approvals pane, /approve, another
        process) reaches the waiting side through the approvals service."""
        prompt = ApprovalPrompt(proposal, later)
        await self.add(prompt)
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

    @work(exclusive=True, group="prompt-follow", exit_on_error=False)
    async def follow_prompts(self) -> None:
        """Each inline prompt follows its proposal, wherever it is decided: approved →
        running → how the call ended (a left-undecided one too)."""
        if self.runtime is None:
            return
        store = self.runtime.approvals.store
        for prompt in [p for p in self.transcript.query(ApprovalPrompt) if not p.final]:
            try:
                proposal = await store.get(prompt.proposal.id)
            except Exception:  # gone or damaged: the Approvals pane says so
                continue
            if proposal.status in SETTLED:
                result, status = result_of(proposal)
                self.end_prompt(prompt, status, result.error)
            elif proposal.status in (ProposalStatus.APPROVED, ProposalStatus.EXECUTING):
                if prompt.outcome is None or prompt.outcome.plain != APPROVED_RUNNING.plain:
                    self.settle_prompt(prompt, APPROVED_RUNNING, final=False)
                if self.turn_view is not None:
                    self.turn_view.approved(proposal)

    def show_status(self, text: str) -> None:
        status = self.query_one("#chat-status", Static)
        status.update(Text(text, style="italic"))
        status.set_class(bool(text), "active")

    def watch_runtime(self, runtime: Runtime | None) -> None:
        if runtime is not None:
            self.update_title()
            self.check_ollama()

    @work(exclusive=True, group="ollama", exit_on_error=False)
    async def check_ollama(self) -> None:
        """In the background: the app is usable while Ollama is slow or missing."""
        if self.runtime is not None:
            self.show_ollama(await self.runtime.chat.status())

    def update_title(self) -> None:
        if self.runtime is None:
            return
        chat = self.runtime.chat
        think = " · thinking on" if chat.think else ""
        self.border_title = f"Chat — {chat.model} · {ollama_state(chat.last_status, chat.model)}"
        self.border_title += think

    def show_startup_error(self, message: str) -> None:
        self.start_failed = True
        self.border_title = "Chat — DIANA did not start"
        self.note(Content.assemble(("DIANA could not start: ", "bold"), message), "error")
        self.note("Fix the problem above, then restart diana-tui. Ctrl+Q quits.", "warning")

    def show_ollama(self, status: OllamaStatus) -> None:
        """Say once, at start, what stands between the person and a working model."""
        self.update_title()
        assert self.runtime is not None
        model = self.runtime.chat.model
        if not status.reachable:
            self.note(f"{status.problem}. Commands still work: /help.", "warning")
        elif not status.has(model):
            self.note(
                f'model "{model}" is not installed — "ollama pull {model}", or /model to '
                "pick an installed one.",
                "warning",
            )

    async def show_history(self, messages: list[StoredMessage]) -> None:
        """A reopened conversation, drawn as it was when it was left."""
        if not messages:
            return
        self.note(
            f"Reopened the last conversation ({len(messages)} messages). /clear starts a new one."
        )
        widgets: list[Widget] = []
        for message in messages:
            if message.role == "user":  # what was typed; what went with it, one line each
                typed, attached = split_attachments(message.content)
                widgets.append(UserLine(typed))
                widgets += [Note(attached_line(item), "info") for item in attached]
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
                    widgets.append(AnswerView(message.content))
                widgets += rested_on(message.data)
        await self.transcript.mount_all(widgets)

    def copy_transcript(self) -> None:
        """/copy: the conversation as text, to the terminal's clipboard (OSC 52)."""
        text = self.plain_text()
        self.app.copy_to_clipboard(text)
        lines = text.count("\n") + 1
        self.note(f"Copied the conversation ({lines} lines) to the clipboard.")

    def plain_text(self) -> str:
        """Everything in the transcript as text, top to bottom, as /copy copies it."""
        lines: list[str] = []
        for child in self.transcript.children:
            if isinstance(child, AnswerView):
                lines.append(child.text)
            elif isinstance(child, Expandable):
                lines.append(child.header().plain)
                if child.expanded:
                    lines.append(_plain(child.details()))
            elif isinstance(child, Static):
                lines.append(_plain(child.content))
        return "\n".join(lines)

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
        elif self.runtime is None and not self.start_failed:
            self.note("DIANA is still starting — ask again in a moment.", "warning")
        elif self.runtime is None:
            self.note("DIANA did not start, so there is no model to ask.", "error")
        elif self.turn is not None and self.turn.is_running:
            self.note(
                "A reply is still being written — wait for it, or press Esc to stop it.", "warning"
            )
        else:
            # The model's requests go out before the screen is drawn again: a frame drawn
            # while they are being sent holds them up for as long as it takes to draw.
            self.app.delay_update(REQUESTS_FIRST)
            self.turn = self.run_turn(text)
            self.transcript.mount(UserLine(text))

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
        from diana.core.mcp.catalog import CatalogError, with_attachments

        assert self.runtime is not None
        mcp = self.runtime.mcp
        try:
            sent, attached = await with_attachments(text, mcp.configs, mcp.connected)
        except CatalogError as exc:
            self.note(f"Not sent: {exc}", "error")
            self.query_one("#chat-input", Input).value = text
            return ""
        for item in attached:
            self.note(attached_line(item), "info")
        return sent

    @work(group="turn", exit_on_error=False)
    async def run_turn(self, text: str) -> None:
        assert self.runtime is not None
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
            await self.runtime.chat.run_turn(text, view.show)
        finally:
            for timer in stop_key:
                timer.stop()
            await view.close()
            self.show_status("")
            self.update_title()
            self.call_after_refresh(self.refresh_bindings)

    def _arm_stop_key(self, timers: list[Timer]) -> None:
        if self.turn is not None and self.turn.is_running:
            timers.append(self.set_timer(STOP_KEY_DELAY, self.refresh_bindings))

    @on(ApprovalPrompt.SendOn)
    def send_on(self, event: ApprovalPrompt.SendOn) -> None:
        event.stop()
        held = self.held_calls.get(event.proposal)
        if held is not None:
            held.set()
        elif self.runtime is None or not self.runtime.chat.send_on():
            return
        self.query_one("#chat-input").focus()

    @on(ApprovalPrompt.Decide)
    def prompt_decided(self, event: ApprovalPrompt.Decide) -> None:
        event.stop()
        self.post_message(DecisionRequested(event.proposal, event.verb, seen=event.seen))

    # -- direct commands -----------------------------------------------------------------

    @work(group="command", exit_on_error=False)
    async def run_command(self, text: str) -> None:
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name == "/help":
            self.show_help()
        elif name == "/copy":
            self.copy_transcript()
        elif self.runtime is None:
            self.note("DIANA did not start; only /help works.", "error")
        elif name == "/tools":
            self.show_tools()
        elif name == "/call":
            await self.call_tool(rest)
        elif name == "/install":
            await self.install_server(rest)
        elif name in ("/approve", "/reject"):
            self.decide(name[1:], rest)
        elif name == "/model":
            await self.choose_model(rest)
        elif name == "/think":
            self.set_think(rest)
        elif name == "/clear":
            self.clear_conversation()
        elif name.partition(":")[0][1:] in self.runtime.mcp.configs:
            await self.use_prompt(name[1:], rest)
        else:
            self.note(f"Unknown command {name}. Type /help.", "warning")

    async def use_prompt(self, target: str, rest: str) -> None:
        """/SERVER:PROMPT NAME=VALUE …: the server's prompt, sent to the model as a message.
        An unknown prompt or argument, or a missing one, is named and nothing is sent."""
        from diana.core.arguments import prompt_arguments
        from diana.core.mcp.catalog import CatalogError, get_prompt, list_prompts, prompt_text

        assert self.runtime is not None
        server, _, name = target.partition(":")
        try:
            arguments = prompt_arguments(shlex.split(rest))
            connection = await self.runtime.mcp.connected(server)
            prompts = {p.name: p for p in await list_prompts(connection)}
            prompt = prompts.get(name)
            if prompt is None:
                offered = ", ".join(prompts) or "none"
                raise ValueError(f"MCP server {server} has no prompt {name!r} (it has: {offered})")
            known = {a.name for a in prompt.arguments}
            if prompt.missing(arguments) and set(arguments) <= known:
                filled = await self.fill_in(prompt, arguments)  # a form for what is missing
                if filled is None:
                    return
                arguments = filled
            problem = prompt.argument_problem(arguments)
            if problem is not None:
                takes = " ".join(f"{a.name}=…" for a in prompt.arguments)
                raise ValueError(f"{problem}; e.g. /{server}:{name} {takes}".rstrip())
            _description, messages = await get_prompt(connection, prompt, arguments)
        except (ValueError, CatalogError) as exc:
            self.note(str(exc), "error")
            return
        text = prompt_text(messages)
        if self.turn is not None and self.turn.is_running:
            self.note("A reply is still being written — send the prompt again after it.", "warning")
            return
        self.turn = self.run_turn(text)
        self.transcript.mount(UserLine(text))

    async def fill_in(self, prompt: PromptInfo, given: dict[str, str]) -> dict[str, str] | None:
        """The prompt's arguments in a form (the ones given filled in); None if cancelled."""
        from diana.core.elicitation import Elicitation, Field

        from ..modals.elicitation import ElicitationScreen

        fields = [
            Field(a.name, a.name, a.description, "string", a.required, given.get(a.name))
            for a in prompt.arguments
        ]
        request = Elicitation(prompt.server, prompt.description or "", "form", fields)
        answered: asyncio.Future[Answer | None] = asyncio.get_running_loop().create_future()
        title = f"Prompt {prompt.server}:{prompt.name}"
        runtime = self.runtime

        async def complete(argument: str, typed: str, others: dict[str, str]) -> list[str]:
            from diana.core.mcp.catalog import complete_argument

            if runtime is None or prompt.server not in runtime.mcp.connections:
                return []
            connection = runtime.mcp.connections[prompt.server]
            return await complete_argument(connection, prompt.name, argument, typed, others)

        form = ElicitationScreen(request, title, complete=complete)
        self.app.push_screen(form, answered.set_result)
        answer = await answered
        if answer is None or answer.action != "accept":
            self.note(f"Prompt {prompt.server}:{prompt.name} not sent.", "warning")
            return None
        return {k: str(v) for k, v in (answer.content or {}).items()}

    def show_help(self) -> None:
        table = Table.grid(padding=(0, 2))
        for command, meaning in HELP:
            table.add_row(Text(command, style="bold"), meaning)
        table.add_row(Text("Esc", style="bold"), "stop the reply being written")
        self.say(table)

    def show_tools(self) -> None:
        assert self.runtime is not None
        table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False)
        for column in ("tool", "agent", "risk", "description"):
            table.add_column(column, style="bold" if column == "tool" else "")
        for definition, agent in self.runtime.orchestrator.tool_definitions():
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
        assert self.runtime is not None
        result = await self.runtime.call_tool(call.tool, call.arguments, origin="chat")
        if result.error_code is ErrorCode.PENDING_APPROVAL:
            proposal = await self.runtime.approvals.store.get(str(result.data["proposal_id"]))
            self.held_calls[proposal.id] = asyncio.Event()
            prompt = await self.ask_decision(proposal, later="leave it pending")
            self.await_call_decision(call.tool, prompt)
            return
        self.show_result(call.tool, result)

    @work(group="call-decisions", exit_on_error=False)
    async def await_call_decision(self, tool: str, prompt: ApprovalPrompt) -> None:
        """A /call that needs approval waits here, not in its command: the chat goes on."""
        assert self.runtime is not None
        proposal = prompt.proposal.id
        left = self.held_calls[proposal]
        decision = asyncio.ensure_future(self.runtime.approvals.wait(proposal))
        leaving = asyncio.ensure_future(left.wait())
        try:
            done, _ = await asyncio.wait({decision, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            del self.held_calls[proposal]
            for task in (decision, leaving):
                task.cancel()
        if decision not in done:
            self.end_prompt(prompt, PENDING)
            return
        result, status = result_of(decision.result())
        self.end_prompt(prompt, status, result.error)
        if result.success:
            self.show_result(tool, result)

    def show_result(self, tool: str, result: ToolResult) -> None:
        if result.success:
            self.say(Content.assemble(("✓ ", tone("good")), (tool, "bold")))
            self.say(pretty(result.data))
            return
        self.note(failure_line(tool, result), "error")

    def decide(self, verb: str, rest: str) -> None:
        proposal, _, reason = rest.partition(" ")
        if not proposal:
            self.note(f"usage: /{verb} ID" + (" [reason]" if verb == "reject" else ""), "warning")
            return
        self.post_message(
            DecisionRequested(proposal, verb, reason=reason.strip() or None, from_chat=True)
        )

    async def choose_model(self, name: str) -> None:
        assert self.runtime is not None
        chat = self.runtime.chat
        status = await chat.status()
        if not name:
            if not status.reachable:
                self.note(f"{status.problem}.", "warning")
            else:
                listing = ", ".join(
                    f"{m} (in use)" if m == chat.model else m for m in status.models
                )
                self.say(Text.assemble(("installed models: ", "bold"), listing or "none"))
        elif status.reachable and not status.has(name):
            self.note(f'model "{name}" is not installed — "ollama pull {name}"', "error")
        else:
            chat.model = name
            self.note(f"Now using {name}.")
            if not status.reachable:
                self.note(f"{status.problem}.", "warning")
        self.update_title()

    def set_think(self, value: str) -> None:
        assert self.runtime is not None
        if value not in ("on", "off"):
            self.note("usage: /think on|off", "warning")
            return
        self.runtime.chat.think = value == "on"
        self.note(f"Thinking {value}.")
        self.update_title()

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, CallProgress) and self.turn_view is not None:
            self.turn_view.progress(event)
        elif isinstance(event, ProposalsChanged):
            self.follow_prompts()

    def clear_conversation(self) -> None:
        assert self.runtime is not None
        if self.turn is not None and self.turn.is_running:
            self.note("Stop the reply first (Esc), then /clear.", "warning")
            return
        self.runtime.chat.clear()
        self.transcript.remove_children()
        for held in self.held_calls.values():  # their prompts are gone; the proposals stay
            held.set()
        self.note("New conversation.")


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

    def __init__(self, pane: ChatPane) -> None:
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
        elif isinstance(event, TurnStarted):
            self.correlation_id = event.correlation_id
            self.next_answer = AnswerView()
            self.next_answer_mounted = pane.transcript.mount(self.next_answer)
        elif isinstance(event, Progress):
            if event.retry:
                pane.note(event.text, "warning")
            pane.show_status(event.text + "…")
        elif isinstance(event, ToolCallStarted):
            await self.end_block()
            line = ToolCallLine(event.name, event.arguments)
            self.calls[event.index] = line
            await pane.add(line)
            pane.show_status(f"running {event.name}…")
        elif isinstance(event, ApprovalPending):
            if event.index in self.calls:
                self.calls[event.index].wait_for_decision()
            self.prompts[event.index] = await pane.ask_decision(event.proposal)
            pane.show_status(f"waiting for your decision on {event.proposal.id}")
        elif isinstance(event, ToolCallFinished):
            self.finish_call(event.index, event.record)
        elif isinstance(event, GapFound):
            await self.withdraw()
            await pane.add(GapReportView(event.report))
        elif isinstance(event, TurnFailed):
            await self.end_block()
            await pane.add(Note(event.problem.message, "error"))
            if pane.runtime is not None:
                await pane.runtime.chat.status()
        elif isinstance(event, TurnCancelled):
            await self.end_block()
            await pane.add(Note("Stopped.", "warning"))
        elif isinstance(event, TurnFinished):
            await self.end_block()
            for widget in rested_on(event.response.model_dump(mode="json")):
                await pane.add(widget)
            if event.notice:
                await pane.add(Note(event.notice.capitalize() + ".", "warning"))
            pending = [
                r.proposal_id
                for r in event.response.tool_calls
                if r.proposal_id and r.status == "pending_approval"
            ]
            if pending:
                await pane.add(
                    Note(
                        f"Still waiting for approval: {', '.join(pending)} (F3: Approvals).",
                        "warning",
                    )
                )

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
        line = self.calls.get(index)
        if line is not None:
            line.finish(record)
        prompt = self.prompts.pop(index, None)
        if prompt is not None:
            self.pane.end_prompt(prompt, record.status, record.error)

    def approved(self, proposal: Proposal) -> None:
        """A call of this turn that waited was approved (anywhere): it runs now."""
        for index, prompt in self.prompts.items():
            if prompt.proposal.id == proposal.id and index in self.calls:
                self.calls[index].wait_for_decision(False)
                self.pane.show_status(f"running {proposal.tool}…")

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
    if status == "rejected":
        return Content.styled("✗ rejected", tone("caution"))
    return Content.styled(f"✗ {status.replace('_', ' ')}: {error or ''}", tone("bad"))


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
