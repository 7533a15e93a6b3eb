"""A server in full: status, process, errors, tools, resources, prompts, log and stderr."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diana.core.api.types import LOG_LEVELS, Elicitation, ServerInfo, ServerStatus
from diana.core.api.types import Field as ElicitField
from diana.core.api.types import FormAnswer as Answer
from diana.core.events import ServerStatusChanged
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..messages import CoreEvent
from ..panes.servers import status_label
from ..theme import Ink, tone
from .detail import DetailView, heading, local_time
from .dialogs import ConfirmDialog
from .elicitation import ElicitationScreen
from .prompts import TemplateScreen
from .resource import ResourceScreen

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import ResourceInfo, ServerConnection, ToolChange

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
        ("error at", local_time(info.last_error_at)),
        ("connect", f"{info.connect_latency_ms} ms" if info.connect_latency_ms else "—"),
        ("protocol", info.protocol_version or "—"),
        ("calls", f"{info.calls} ({info.errors} failed)"),
        ("attempts", str(info.attempts)),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


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


class ServerDetailScreen(DetailView[ServerInfo]):
    """Everything known about one server: status, process, errors, tools, its resources and
    prompts (asked of it when the view opens), its log messages and stderr."""

    BINDINGS = [
        Binding("r", "reconnect", "Reconnect", id="detail.reconnect"),
        Binding("l", "log_level", "Log level", id="detail.log-level"),
        Binding("a", "accept_change", "Accept change", id="detail.accept-change"),
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
        pins: Core | None = None,
    ) -> None:
        super().__init__(info)
        self.diagnostics = diagnostics  # the server's info as it is now, by name
        self.connect = connect  # its live connection, for its resources and prompts
        self.pins = pins  # its tools held because their definition changed, and accepting
        self.held_tools: list[ToolChange] = []
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
        yield Static(id="detail-held")
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
        self.query_one("#detail-held", Static).display = False
        self.show(self.info)
        self.load_catalog()
        self.load_held()
        self.set_interval(1.0, self.refresh_info)  # log messages and stderr come unannounced
        self.set_interval(1.0, self.load_held)  # held or accepted by any process

    @work(exclusive=True, group="held-tools", exit_on_error=False)
    async def load_held(self) -> None:
        """This server's tools held because their definition changed since accepted."""
        if self.pins is None:
            return
        held = [c for c in await self.pins.tool_changes() if c.server == self.info.name]
        if held != self.held_tools:
            self.held_tools = held
            self.show_held()
            self.refresh_bindings()

    def show_held(self) -> None:
        panel = self.query_one("#detail-held", Static)
        panel.display = bool(self.held_tools)
        rows: list[Content] = []
        for change in self.held_tools:
            rows.append(
                Content.assemble(
                    ("⚠ " + change.tool, tone("caution", bold=True)),
                    f" held: {', '.join(change.changed_parts())} changed since accepted",
                )
            )
            for part, old, new in change.differences():
                rows.append(Content.styled(f"  {part}", "bold"))
                rows.append(Content.assemble(("  - ", tone("bad")), old))
                rows.append(Content.assemble(("  + ", tone("good")), new))
        rows.append(Content.styled("a accepts the new definition", MUTED))
        panel.update(Content("\n").join(rows))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """a (accept a changed tool) is offered only while one of its tools is held."""
        return bool(self.held_tools) if action == "accept_change" else True

    def action_accept_change(self) -> None:
        if not self.held_tools:
            return
        change = self.held_tools[0]
        question = Content.assemble(
            "Accept the new definition of ",
            (change.tool, "bold"),
            f" ({', '.join(change.changed_parts())} changed)? It can be called again.",
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.accept_tool(change.tool)

        self.app.push_screen(ConfirmDialog("Accept a changed tool", question), answered)

    @work(group="held-tools-accept", exit_on_error=False)
    async def accept_tool(self, name: str) -> None:
        from diana.core.api.errors import UnknownHeldTool

        if self.pins is None:
            return
        try:
            await self.pins.accept_tool(name)
        except UnknownHeldTool as exc:  # accepted elsewhere meanwhile
            self.notify(str(exc), severity="warning")
        self.load_held()

    @work(exclusive=True, group="catalog")
    async def load_catalog(self) -> None:
        """The server's resources and prompts, asked of it now."""
        from diana.core.api import list_prompts, list_resources
        from diana.core.api.errors import CatalogError

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
                (local_time(e.at)[11:], MUTED),
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
