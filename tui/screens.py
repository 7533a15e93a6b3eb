"""Modal screens opened from the panes."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from diana.core.approvals.store import Proposal
from diana.core.browser import UnsafeURL, open_url
from diana.core.cost import estimate_words
from diana.core.elicitation import Answer, Elicitation, check_answer
from diana.core.elicitation import Field as ElicitField
from diana.core.events import CallFinished, ServerStatusChanged
from diana.core.files import UnreadableFile, save_to
from diana.core.mcp.config import LOG_LEVELS, agent_id_for
from diana.core.mcp.info import ServerInfo, ServerStatus
from diana.core.sampling import asks_sampling
from diana.core.stats import USAGE_COLUMNS, usage_cells
from diana.core.telemetry import redact
from rich.console import Group
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import (
    Button,
    Checkbox,
    Input,
    Label,
    OptionList,
    Select,
    SelectionList,
    Static,
)
from textual.widgets.option_list import Option

from .completion import AskedSuggester
from .dialogs import Dialog
from .entry import Entry
from .fitted import FitColumn, FittedTable, cell
from .messages import CoreEvent
from .panes.approvals import risk_text
from .panes.servers import status_label
from .theme import Ink, ThemeAware, tone

if TYPE_CHECKING:
    from diana.core.mcp.catalog import ResourceContent, ResourceInfo
    from diana.core.mcp.connection import ServerConnection
    from diana.core.runtime import Runtime
    from diana.core.stats import UsageReport

MUTED = tone("muted")
LOG_SHOWN = 50  # the server's latest log messages in its detail view


def server_summary(info: ServerInfo, ink: Ink) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    where = info.url or " ".join([info.command or "", *(info.args or [])])
    badge, style = status_label(info)
    rows: list[tuple[str, Any]] = [
        ("status", Text(badge, style=ink(style))),
        ("transport", info.transport),
        ("runs" if info.transport == "stdio" else "url", where),
    ]
    if info.env:
        rows.append(("env", ", ".join(f"{k}=***" for k in info.env)))
    if info.headers:
        rows.append(("headers", ", ".join(f"{k}: ***" for k in info.headers)))
    rows += [
        ("pid", str(info.pid) if info.pid else "—"),
        (
            "exit",
            info.exit_signal or (f"code {info.exit_code}" if info.exit_code is not None else "—"),
        ),
        (
            "last error",
            Text(info.last_error or "—", style=ink(tone("bad")) if info.last_error else ""),
        ),
        ("error at", _local_time(info.last_error_at)),
        ("connect", f"{info.connect_latency_ms} ms" if info.connect_latency_ms else "—"),
        ("protocol", info.protocol_version or "—"),
        ("calls", f"{info.calls} ({info.errors} failed)"),
        ("attempts", str(info.attempts)),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def _local_time(moment: datetime | str | None) -> str:
    if not moment:
        return "—"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def tool_table(info: ServerInfo) -> Table:
    """A server's tools: each name whole (a narrow terminal wraps the description instead)."""
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, expand=True)
    longest = max((len(tool.name or tool.server_tool) for tool in info.tools), default=4)
    table.add_column("tool", style="bold", no_wrap=True, min_width=min(longest, 40))
    table.add_column("risk", no_wrap=True)
    table.add_column("hints")
    table.add_column("description", ratio=1)
    for tool in info.tools:
        hints = ", ".join(k for k, v in tool.annotations.items() if v) or "none"
        table.add_row(
            tool.name or tool.server_tool, tool.risk or "rejected", hints, tool.description or ""
        )
    return table


Shown = TypeVar("Shown")  # what a detail view shows


class DetailView(ThemeAware, Dialog[None], Generic[Shown]):
    """A view of one thing in full, scrolled inside its box; Esc closes it."""

    SCROLLS = True

    def __init__(self, info: Shown) -> None:
        super().__init__()
        self.info = info


def heading(text: str) -> Static:
    return Static(Content.styled(text, "bold underline"), classes="detail-heading")


class ServerDetailScreen(DetailView[ServerInfo]):
    """Everything known about one server: status, process, errors, tools, its resources and
    prompts (asked of it when the view opens), its log messages and stderr."""

    BINDINGS = [
        Binding("r", "reconnect", "Reconnect", id="detail.reconnect"),
        Binding("l", "log_level", "Log level", id="detail.log-level"),
    ]

    @dataclass
    class ReconnectRequested(Message):
        """Reconnect the server this view shows."""

        server: str

    EVENTS = (ServerStatusChanged,)  # kept up to date while open

    def __init__(
        self,
        info: ServerInfo,
        diagnostics: Callable[[str], ServerInfo] | None = None,
        connect: Callable[[str], Awaitable[ServerConnection]] | None = None,
    ) -> None:
        super().__init__(info)
        self.diagnostics = diagnostics  # the server's info as it is now, by name
        self.connect = connect  # its live connection, for its resources and prompts
        self.resources: list[ResourceInfo] = []
        self.min_level = "info"  # log messages this severe or more are shown

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if self.diagnostics is not None and isinstance(event, ServerStatusChanged):
            if event.server == self.info.name:
                self.refresh_info()
                if event.status == ServerStatus.READY:  # connected again: ask it again
                    self.load_catalog()

    def refresh_info(self) -> None:
        if self.diagnostics is None:
            return
        try:
            self.show(self.diagnostics(self.info.name))
        except KeyError:  # taken out of the config meanwhile: the last view stays
            pass

    def compose_body(self) -> ComposeResult:
        yield Static(id="detail-summary")
        yield heading("Tools")
        yield Static(id="detail-tools")
        yield heading("Resources (Enter reads one)")
        yield OptionList(id="detail-resources")
        yield heading("Prompts")
        yield Static(id="detail-prompts")
        yield Static(id="detail-log-heading", classes="detail-heading")
        yield Static(id="detail-log")
        yield heading("stderr (last 200 lines)")
        yield Static(id="detail-stderr")

    def dialog_title(self) -> str:
        return f"MCP server {self.info.name}"

    def on_mount(self) -> None:
        self.show(self.info)
        self.load_catalog()
        self.set_interval(1.0, self.refresh_info)  # log messages and stderr come unannounced

    @work(exclusive=True, group="catalog")
    async def load_catalog(self) -> None:
        """The server's resources and prompts, asked of it now."""
        from diana.core.mcp.catalog import CatalogError, list_prompts, list_resources

        resources = self.query_one("#detail-resources", OptionList)
        prompts = self.query_one("#detail-prompts", Static)
        if self.connect is None:
            return
        if self.info.status is not ServerStatus.READY:  # asked again once it is
            resources.clear_options()
            waiting = "asked once the server is ready"
            resources.add_option(Option(Content.styled(waiting, MUTED), disabled=True))
            prompts.update(Content.styled(waiting, MUTED))
            return
        try:
            connection = await self.connect(self.info.name)
            self.resources = await list_resources(connection)
            offered = await list_prompts(connection)
        except (CatalogError, KeyError) as exc:
            resources.clear_options()
            resources.add_option(Option(Content.styled(f"not asked: {exc}", MUTED), disabled=True))
            prompts.update(Content.styled("not asked", MUTED))
            return
        resources.clear_options()
        resources.add_options(resource_option(r) for r in self.resources)
        if not self.resources:
            resources.add_option(Option(Content.styled("no resources", MUTED), disabled=True))
        rows = [
            Content.assemble(
                (p.name, "bold"),
                f"({', '.join(a.name + ('' if a.required else '?') for a in p.arguments)})  ",
                p.description or "",
            )
            for p in offered
        ]
        prompts.update(Content("\n").join(rows) if rows else Content.styled("no prompts", MUTED))

    @on(OptionList.OptionSelected, "#detail-resources")
    def read_resource(self, event: OptionList.OptionSelected) -> None:
        if self.connect is None or not 0 <= event.option_index < len(self.resources):
            return
        chosen = self.resources[event.option_index]
        server, connect = self.info.name, self.connect

        def open_uri(uri: str | None) -> None:
            if uri:
                self.app.push_screen(ResourceScreen(server, uri, connect))

        if chosen.template:
            self.fill_in(chosen.uri, open_uri)
        else:
            open_uri(chosen.uri)

    def fill_in(self, template: str, then: Callable[[str | None], None]) -> None:
        """A template's variables asked for one by one (the URI made from them, each value
        encoded as the template says); one the SDK cannot read is shown whole to fill in."""
        from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

        try:
            parsed = UriTemplate.parse(template)
        except InvalidUriTemplate:
            parsed = None
        if parsed is None or not parsed.variable_names:
            self.app.push_screen(TemplateScreen(template), then)
            return
        fields = [ElicitField(n, n, None, "string", True) for n in parsed.variable_names]
        request = Elicitation(self.info.name, f"Read {template}", "form", fields)

        def filled(answer: Answer | None) -> None:
            if answer is not None and answer.action == "accept":
                values = {name: str(value) for name, value in (answer.content or {}).items()}
                then(parsed.expand(values))

        self.app.push_screen(ElicitationScreen(request, "Read a resource"), filled)

    def action_log_level(self) -> None:
        """Show less severe messages, or only more severe ones: round the levels."""
        shown = LOG_LEVELS[: LOG_LEVELS.index("error") + 1]
        self.min_level = shown[(shown.index(self.min_level) + 1) % len(shown)]
        self.show(self.info)

    def show(self, info: ServerInfo) -> None:
        self.info = info
        self.query_one("#detail-summary", Static).update(server_summary(info, self.ink))
        self.query_one("#detail-tools", Static).update(
            tool_table(info) if info.tools else Content.styled("no tools listed", MUTED)
        )
        self.show_log(info)
        stderr = "\n".join(info.stderr_tail)
        self.query_one("#detail-stderr", Static).update(
            Content(stderr) if stderr else Content.styled("nothing on stderr", MUTED)
        )

    def show_log(self, info: ServerInfo) -> None:
        least = LOG_LEVELS.index(self.min_level)
        entries = [e for e in info.logs if _severity(e.level) >= least]
        self.query_one("#detail-log-heading", Static).update(
            Content.styled(
                f"Server log ({self.min_level} and above; l changes it)", "bold underline"
            )
        )
        lines = [
            Content.assemble(
                (_local_time(e.at)[11:], MUTED),
                " ",
                (f"{e.level:<8}", _level_tone(e.level)),
                " ",
                e.text,
            )
            for e in entries[-LOG_SHOWN:]
        ]
        self.query_one("#detail-log", Static).update(
            Content("\n").join(lines) if lines else Content.styled("nothing logged", MUTED)
        )

    def restyle(self) -> None:
        self.show(self.info)

    def action_reconnect(self) -> None:
        self.post_message(self.ReconnectRequested(self.info.name))


def proposal_summary(proposal: Proposal, ink: Ink) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    confidence = proposal.confidence
    rows: list[tuple[str, Any]] = [
        ("status", proposal.status.value),
        ("tool", proposal.tool),
        ("agent", proposal.agent or "—"),
        ("risk", risk_text(proposal.risk, ink)),
        ("reason", proposal.reason),
        ("confidence", "none given" if confidence is None else f"{confidence}"),
        ("estimated cost", estimate_words(proposal.estimated_cost)),
        ("origin", proposal.origin),
        ("correlation", proposal.correlation_id),
        ("created", _local_time(proposal.created_at)),
    ]
    if proposal.decided_at:
        rows.append(("decided", f"{_local_time(proposal.decided_at)} by {proposal.decided_by}"))
    if proposal.reject_reason:
        rows.append(("why rejected", proposal.reject_reason))
    if proposal.error:
        rows.append(("error", Text(proposal.error, style=ink(tone("bad")))))
    if proposal.note:
        rows.append(("stored", proposal.note))
    if proposal.damaged:
        damaged = Text(f"{proposal.damaged}: it cannot run", style=ink(tone("bad", bold=True)))
        rows.append(("damaged", damaged))
    for label, value in rows:
        grid.add_row(label, value)
    return grid


class ProposalDetailScreen(DetailView[Proposal]):
    """One proposal in full: arguments as pretty JSON (secrets hidden), reason, origin."""

    def compose_body(self) -> ComposeResult:
        yield Static(id="proposal-summary")
        arguments = self.info.shown_arguments
        if asks_sampling(self.info.tool, arguments) is not None:
            yield from self.sampling_request(arguments)
            return
        yield heading("Arguments")
        yield Static(JSON(json.dumps(arguments, ensure_ascii=False)), id="proposal-arguments")
        if self.info.result is not None:
            yield heading("Result")
            yield Static(
                JSON(json.dumps(redact(self.info.result), ensure_ascii=False, default=str)),
                id="proposal-result",
            )

    def sampling_request(self, arguments: dict[str, Any]) -> ComposeResult:
        """What a server asks the model, as a person reads a conversation: the system prompt,
        each message under its role, the limits; then the reply once there is one."""
        hints = ", ".join(arguments.get("model_hints") or []) or "none"
        limits = f"up to {arguments['reply_limit']} tokens · model hints: {hints}"
        if arguments.get("temperature") is not None:
            limits += f" · temperature {arguments['temperature']}"
        yield heading(f"MCP server {arguments['server']} asks the local model")
        yield Static(limits, id="sampling-limits")
        if arguments.get("system_prompt"):
            yield heading("System prompt")
            yield Static(Content(arguments["system_prompt"]), classes="sampling-text")
        for message in arguments["messages"]:
            images = len(message.get("images") or [])
            extra = f" · {images} image{'' if images == 1 else 's'}" if images else ""
            yield heading(f"{message['role'].capitalize()}{extra}")
            yield Static(Content(message["text"]), classes="sampling-text")
        result = redact(self.info.result)
        if isinstance(result, dict) and "text" in result:
            tokens = result.get("counted") or {}
            yield heading(f"Reply · {result.get('model')} · {tokens.get('reply', '?')} tokens")
            yield Static(Content(str(result["text"])), classes="sampling-text")

    def dialog_title(self) -> str:
        return f"Proposal {self.info.id}"

    def on_mount(self) -> None:
        self.restyle()

    def restyle(self) -> None:
        self.query_one("#proposal-summary", Static).update(proposal_summary(self.info, self.ink))


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


def _severity(level: str) -> int:
    return LOG_LEVELS.index(level) if level in LOG_LEVELS else 0


def _level_tone(level: str) -> str:
    severity = _severity(level)
    if severity >= LOG_LEVELS.index("error"):
        return tone("bad")
    return tone("caution") if severity >= LOG_LEVELS.index("warning") else MUTED


def resource_option(resource: ResourceInfo) -> Option:
    kind = " (template)" if resource.template else ""
    return Option(
        Content.assemble(
            (resource.uri + kind, "bold"),
            "  ",
            resource.name,
            ("  " + resource.mime_type if resource.mime_type else "", MUTED),
        )
    )


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


class ResourceScreen(DetailView[dict[str, Any]]):
    """One resource as read: text as text, JSON indented, anything else by type and size;
    s saves it to a file. A server that can tell of changes is asked to (a subscription), and
    the view reads the resource again at each one, saying when."""

    BINDINGS = [Binding("s", "save", "Save to a file", id="resource.save")]

    def __init__(
        self, server: str, uri: str, connect: Callable[[str], Awaitable[ServerConnection]]
    ) -> None:
        super().__init__({"server": server, "uri": uri})
        self.connect = connect
        self.contents: list[ResourceContent] = []
        self.watched: ServerConnection | None = None  # subscribed through this connection
        self.updates = 0

    def dialog_title(self) -> str:
        return f"{self.info['server']} · {self.info['uri']}"

    def compose_body(self) -> ComposeResult:
        yield Static(id="resource-live")
        yield Static(Content.styled("reading…", MUTED), id="resource-body")

    def on_mount(self) -> None:
        self.query_one("#resource-live").display = False
        self.read(first=True)

    async def on_unmount(self) -> None:
        from diana.core.mcp.catalog import unwatch_resource

        if self.watched is not None:
            await unwatch_resource(self.watched, self.info["uri"], self.changed)

    def changed(self, _uri: str) -> None:
        self.updates += 1
        self.read(first=False)

    @work(exclusive=True, group="catalog")
    async def read(self, first: bool) -> None:
        from diana.core.mcp.catalog import (
            CatalogError,
            can_subscribe,
            read_resource,
            watch_resource,
        )

        body = self.query_one("#resource-body", Static)
        try:
            connection = await self.connect(self.info["server"])
            self.contents = await read_resource(connection, self.info["uri"])
        except (CatalogError, KeyError) as exc:
            body.update(Content.styled(str(exc), tone("bad")))
            return
        live = self.query_one("#resource-live", Static)
        if first and can_subscribe(connection):
            try:
                await watch_resource(connection, self.info["uri"], self.changed)
                self.watched = connection
            except CatalogError as exc:  # shown as read, without updates
                live.display = True
                live.update(Content.styled(f"not watched: {exc}", MUTED))
        if self.watched is not None:
            live.display = True
            said = "no change yet"
            if self.updates:
                when = datetime.now().strftime("%H:%M:%S")
                said = f"changed {self.updates} times, last read {when}"
            live.update(Content.styled(f"● live: the server tells of changes · {said}", MUTED))
        self.restyle()

    def restyle(self) -> None:
        parts: list[Any] = []
        for part in self.contents:
            if part.text is None:
                parts.append(Text(f"{part.describe()} — s saves it", style=self.ink(MUTED)))
            elif (part.mime_type or "").endswith("json"):
                try:
                    parts.append(JSON(part.text))
                except ValueError:
                    parts.append(Text(part.text))
            else:
                parts.append(Text(part.text))
        if parts:
            self.query_one("#resource-body", Static).update(Group(*parts))

    def action_save(self) -> None:
        if not self.contents:
            return
        part = self.contents[0]
        default = Path(part.uri.rstrip("/").rsplit("/", 1)[-1] or "resource").name

        def save(path: str | None) -> None:
            if not path:
                return
            target = Path(os.path.expanduser(path))
            data = part.data if part.data is not None else (part.text or "").encode()
            try:
                save_to(target, data)
            except UnreadableFile as exc:
                self.notify(f"Not saved: {exc}", severity="error")
                return
            self.notify(f"Saved {part.describe()} to {target}", timeout=4)

        self.app.push_screen(SavePathScreen(default), save)


class SavePathScreen(FilledInDialog):
    DIALOG_TITLE = "Save to a file"
    PLACEHOLDER = "a path — Enter saves, Esc cancels"

    def prompt(self) -> Content:
        return Content("Save the resource as (a file here, or a path; ~ is your home):")


class ElicitationScreen(Dialog[Answer]):
    """An MCP server asks the person something: a form made from what it asked for (text,
    numbers, yes/no, a choice; defaults filled in, required ones marked *), or a URL to open.
    Ctrl+S sends, Ctrl+R declines, Esc cancels; a value that does not fit keeps the form open
    and names the field. Requests come one at a time: how many more wait is said at the
    top."""

    BINDINGS = [
        Binding("escape", "close", "Cancel", id="elicit.cancel"),
        Binding("ctrl+s", "accept", "Send", id="elicit.accept"),
        Binding("ctrl+r", "decline", "Decline", id="elicit.decline"),
        Binding("ctrl+o", "open_url", "Open the URL", id="elicit.open"),
    ]

    SCROLLS = True  # a long form (server-everything asks for 13 fields) scrolls in its box

    def __init__(
        self,
        request: Elicitation,
        title: str | None = None,
        complete: Callable[[str, str, dict[str, str]], Awaitable[list[str]]] | None = None,
        waiting: int = 0,
    ) -> None:
        super().__init__()
        self.request = request
        self.waiting = waiting  # requests waiting behind this one
        self.title_ = title or f"MCP server {request.server} asks"
        # What the server suggests for a field: (field, typed so far, the other fields).
        self.complete = complete
        # A form of diana's own (a prompt's arguments) is sent or cancelled: no one to decline.
        self.declinable = title is None

    def dialog_title(self) -> str:
        return self.title_

    def on_mount(self) -> None:
        super().on_mount()
        self.show_waiting(self.waiting)  # as it is now, not as when it was composed
        if self.request.fields:  # typing goes to the first field at once
            self.query_one("#elicit-0").focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "decline":
            return self.declinable
        return action != "open_url" or self.request.mode == "url"

    def compose_body(self) -> ComposeResult:
        yield Static(self.waiting_line(), id="elicit-waiting")
        yield Static(Content(self.request.message), classes="elicit-message")
        if self.request.mode == "url":
            yield Static(Content.styled(self.request.url or "", "bold"), id="elicit-url")
            yield Static(Content.styled("Ctrl+O opens it; Ctrl+S when done", MUTED))
        for index, spec in enumerate(self.request.fields):
            mark = " *" if spec.required else ""
            yield Label(Content.assemble((spec.title + mark, "bold"), f"  {spec.describe()}"))
            if spec.description:
                yield Label(Content.styled(spec.description, MUTED))
            yield self._input(index, spec)
        yield Static(id="elicit-error", classes="form-error")
        with Horizontal(classes="form-row"):
            yield Button("Send", id="elicit-accept", variant="primary")
            if self.declinable:
                yield Button("Decline", id="elicit-decline")
            yield Button("Cancel", id="elicit-cancel")

    def waiting_line(self) -> Content:
        if not self.waiting:
            return Content()
        return Content.styled(f"{self.waiting} more waiting", tone("caution"))

    def show_waiting(self, waiting: int) -> None:
        """How many requests wait behind this one, as it changes."""
        self.waiting = waiting
        for line in self.query("#elicit-waiting").results(Static):  # none before compose
            line.update(self.waiting_line())
            line.display = bool(waiting)

    def _input(self, index: int, spec: ElicitField) -> Widget:
        ident = f"elicit-{index}"
        if spec.kind == "boolean":
            return Checkbox(spec.title, value=bool(spec.default), id=ident)
        if spec.kind == "choices":
            chosen = spec.default if isinstance(spec.default, list) else []
            return SelectionList[str](
                *[(title, value, value in chosen) for value, title in spec.choices], id=ident
            )
        if spec.kind == "choice":
            options = [(title, value) for value, title in spec.choices]
            known = {value for value, _title in spec.choices}
            start = str(spec.default) if str(spec.default) in known else Select.NULL
            # A required choice with no default starts blank: sending it blank names it.
            blank = not spec.required or start is Select.NULL
            return Select(options, value=start, id=ident, allow_blank=blank)
        shown = "" if spec.default is None else str(spec.default)
        suggester = None
        if self.complete is not None and spec.kind == "string" and not spec.secret:
            complete = self.complete

            async def suggest(typed: str, name: str = spec.name) -> list[str]:
                return await complete(name, typed, self.typed_values(besides=name))

            suggester = AskedSuggester(suggest)
        return Entry(value=shown, password=spec.secret, id=ident, suggester=suggester)

    def typed_values(self, besides: str) -> dict[str, str]:
        """What the text fields hold now, but one."""
        names = {f"elicit-{index}": spec.name for index, spec in enumerate(self.request.fields)}
        return {
            names[field.id]: field.value
            for field in self.query(Input)
            if field.id in names and names[field.id] != besides and field.value
        }

    def values(self) -> dict[str, Any]:
        content: dict[str, Any] = {}
        for index, spec in enumerate(self.request.fields):
            widget = self.query_one(f"#elicit-{index}")
            if isinstance(widget, Checkbox):
                content[spec.name] = widget.value
            elif isinstance(widget, SelectionList):
                content[spec.name] = list(widget.selected)
            elif isinstance(widget, Select):
                content[spec.name] = None if widget.is_blank() else widget.value
            elif isinstance(widget, Input):
                content[spec.name] = widget.value
        return content

    def action_accept(self) -> None:
        if self.request.mode == "url":
            self.dismiss(Answer("accept"))
            return
        try:
            checked = check_answer(self.request.fields, self.values())
        except ValueError as exc:
            self.query_one("#elicit-error", Static).update(Content.styled(str(exc), tone("bad")))
            return
        self.dismiss(Answer("accept", checked))

    def action_decline(self) -> None:
        self.dismiss(Answer("decline"))

    def action_close(self) -> None:
        self.dismiss(Answer("cancel"))

    @work(group="browser", exit_on_error=False)
    async def action_open_url(self) -> None:
        """The page in the browser ($BROWSER, else the system's), if it is one diana opens."""
        try:
            opened = await open_url(self.request.url or "")
        except UnsafeURL as exc:
            self.query_one("#elicit-error", Static).update(Content.styled(str(exc), tone("bad")))
            return
        if not opened:
            self.app.copy_to_clipboard(self.request.url or "")
            self.notify("No browser opened it; the URL is on the clipboard.", timeout=8)

    @on(Button.Pressed, "#elicit-accept")
    def _send(self) -> None:
        self.action_accept()

    @on(Button.Pressed, "#elicit-decline")
    def _decline(self) -> None:
        self.action_decline()

    @on(Button.Pressed, "#elicit-cancel")
    def _cancel(self) -> None:
        self.action_close()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_accept()


# The figures a narrow terminal leaves out first, in order.
DROPPED_FIRST = ("REJECTED", "REFUSED", "TIMED OUT", "P50", "COST")


class UsageTable(FittedTable):
    """Each tool's figures; on a narrow terminal the least needed columns are left out (the
    view says which) rather than cut off at the edge."""

    COLUMNS = (
        FitColumn("tool", "Tool", least=12, most=32),
        FitColumn("agent", "Agent", least=5, droppable=True),
        *(
            FitColumn(
                heading.lower().replace(" ", "_"),
                heading.capitalize(),
                least=0 if heading in DROPPED_FIRST else None,
                droppable=heading in DROPPED_FIRST,
            )
            for heading in USAGE_COLUMNS[:-1]
        ),
        FitColumn("last_used", "Last used", least=17),
    )
    GIVES_WAY = ("agent", *(h.lower().replace(" ", "_") for h in DROPPED_FIRST), "tool")
    LAST_WANTS = 17  # a date and time, and the blank a cell keeps


USAGE_SORTS = (
    ("calls", lambda u: (-u.calls, u.name)),
    ("failures", lambda u: (-(u.failed + u.timed_out), -u.calls, u.name)),
    ("p95 latency", lambda u: (-(u.p95_ms or 0.0), u.name)),
    ("cost", lambda u: (-u.cost, u.name)),
    ("last used", lambda u: (u.last_used or "", u.name)),
    ("name", lambda u: (u.name, u.agent or "")),
)
USAGE_WINDOWS = (("all time", None), ("the last 24 h", 1), ("the last 7 days", 7))


class UsageScreen(ThemeAware, Dialog[None]):
    """How each tool is used, from the execution log (every process's calls): calls, how
    they ended, p50/p95 latency, cost, last use. s sorts by the next column, w changes the
    time window; it follows calls as they finish (at most once a second)."""

    BINDINGS = [
        Binding("s", "sort", "Sort", id="usage.sort"),
        Binding("w", "window", "Time window", id="usage.window"),
    ]
    EVENTS = (CallFinished,)

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.sort = 0
        self.window = 0
        self.report: UsageReport | None = None
        self._again = False

    def dialog_title(self) -> str:
        return "Tool usage"

    def compose_body(self) -> ComposeResult:
        yield Static(id="usage-summary")
        yield UsageTable(id="usage-table")

    def on_mount(self) -> None:
        super().on_mount()
        self.load()

    def on_core_event(self, _message: CoreEvent) -> None:
        if not self._again:  # calls finishing in a burst: one reading, a second later
            self._again = True
            self.set_timer(1.0, self.load)

    @work(exclusive=True, group="usage", exit_on_error=False)
    async def load(self) -> None:
        from diana.core.stats import usage

        self._again = False
        runtime = self.runtime
        days = USAGE_WINDOWS[self.window][1]
        since = None if days is None else runtime.clock.now() - timedelta(days=days)
        servers = {name: agent_id_for(name) for name in runtime.mcp.configs}
        await runtime.execution_log.flush()
        self.report = await usage(runtime.db, servers, since=since)
        self.restyle()

    def restyle(self) -> None:
        report = self.report
        if report is None:
            return
        label, key = USAGE_SORTS[self.sort]
        table = self.query_one("#usage-table", UsageTable)
        table.clear()
        table.untrack_all()
        failing = {USAGE_COLUMNS.index("FAILED"), USAGE_COLUMNS.index("TIMED OUT")}
        for tool in sorted(report.tools, key=key):
            cells = usage_cells(tool)
            style = self.ink(tone("bad")) if tool.failed + tool.timed_out else ""
            row = (
                cell(tool.name, "bold"),
                cell(tool.agent or "—"),
                *(
                    cell(c, style if i in failing else "", right=True)
                    for i, c in enumerate(cells[:-1])
                ),
                cell(cells[-1]),
            )
            row_key = f"{tool.name}\0{tool.agent}"
            table.add_row(*row, key=row_key)
            table.track(row_key, [c.plain for c in row], fit=False)
        table.fit_tracked()
        self.show_summary(label)

    def show_summary(self, sorted_by: str) -> None:
        report, table = self.report, self.query_one("#usage-table", UsageTable)
        assert report is not None
        calls = sum(t.calls for t in report.tools)
        window = USAGE_WINDOWS[self.window][0]
        # A narrow terminal leaves columns out: say which, so none is missed unawares.
        hidden = (
            f" · not shown here: {', '.join(table.left_out).lower()} (diana stats has all)"
            if table.left_out
            else ""
        )
        self.query_one("#usage-summary", Static).update(
            Content.assemble(
                (f"{calls:,} calls of {len(report.tools)} tools", "bold"),
                f" in {window} · sorted by {sorted_by} · ",
                ("s", "bold"),
                " sorts · ",
                ("w", "bold"),
                " changes the window",
                hidden,
            )
        )

    def on_resize(self) -> None:
        if self.report is not None:
            self.call_after_refresh(self.show_summary, USAGE_SORTS[self.sort][0])

    def action_sort(self) -> None:
        self.sort = (self.sort + 1) % len(USAGE_SORTS)
        self.restyle()

    def action_window(self) -> None:
        self.window = (self.window + 1) % len(USAGE_WINDOWS)
        self.load()
