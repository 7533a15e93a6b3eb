from __future__ import annotations

import asyncio
import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from diana.core.api import Core
from diana.core.api.types import MCPSubagent, ServerInfo, ServerStatus
from diana.core.events import ServerStatusChanged, SubagentChanged
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, ListItem, ListView, Static

from ..messages import CoreEvent
from ..modals.server_form import ServerFormResult, ServerFormScreen
from ..theme import tone
from .base import EmptyState, Pane

STATUS_STYLE = {
    ServerStatus.READY: tone("good", bold=True),
    ServerStatus.CONNECTED: tone("busy"),
    ServerStatus.CONNECTING: tone("busy"),
    ServerStatus.DISCONNECTED: tone("caution"),
    ServerStatus.ERROR: tone("bad", bold=True),
    ServerStatus.DISABLED: tone("muted"),
    ServerStatus.NOT_STARTED: tone("muted"),
}


def status_label(info: ServerInfo) -> tuple[str, str]:
    """A server's status as its badge shows it, and the badge's style."""
    status = info.status
    if info.disabled:
        return "○ disabled", STATUS_STYLE[ServerStatus.DISABLED]
    if status is ServerStatus.NOT_STARTED:
        return "○ not started", STATUS_STYLE[ServerStatus.NOT_STARTED]
    if status is ServerStatus.ERROR and info.sign_in_needed:
        return "● signed out", tone("caution", bold=True)
    if info.signing_in and status is not ServerStatus.READY:
        return "● signing in…", STATUS_STYLE[ServerStatus.CONNECTING]
    label = "connecting…" if status is ServerStatus.CONNECTING else status.value
    return "● " + label, STATUS_STYLE.get(status, "")


def retry_text(seconds: float) -> str:
    """When the next attempt is, as a person reads it: seconds under a minute, else minutes
    (rounded up, so it never says "in 0" before it happens)."""
    if seconds < 60:
        return f"retry in {max(1, math.ceil(seconds))} s"
    return f"retry in {math.ceil(seconds / 60)} min"


REQUEST_LINES = 4  # the sub-agent's latest requests shown under the servers
REQUEST_STYLE = {
    "queued": ("○", tone("muted")),
    "in_progress": ("◐", tone("busy")),
    "completed": ("✓", tone("good")),
    "failed": ("✗", tone("bad", bold=True)),
    "cancelled": ("⊘", tone("caution")),
}
BAR_CELLS = 10


def progress_bar(progress: int) -> str:
    filled = round(max(0, min(100, progress)) * BAR_CELLS / 100)
    return "█" * filled + "░" * (BAR_CELLS - filled)


def request_line(request: dict[str, Any]) -> Content:
    """One request (as its public view): state, what, which server, a progress bar, and
    what it is doing or why it ended as it did."""
    state = str(request["state"])
    icon, style = REQUEST_STYLE.get(state, ("?", ""))
    kind = str(request["kind"]).removesuffix("_server")
    progress = int(request["progress"])
    return Content.assemble(
        (f"{icon} ", style),
        (f"{kind} ", "bold"),
        f"{request['server']} ",
        (progress_bar(progress), style),
        f" {progress:>3}% ",
        (state.replace("_", " "), style),
        ": ",
        (str(request["message"]), tone("bad") if state == "failed" else tone("muted")),
    )


def row_id(server: str) -> str:
    return "server-" + re.sub(r"[^A-Za-z0-9_-]", "-", server)


class ServerRow(ListItem):
    """One server: badge, name, tool count, last error, and a Reconnect button (Enable, on
    a disabled server)."""

    def __init__(self, info: ServerInfo) -> None:
        super().__init__(id=row_id(info.name), classes="server-row")
        self.server = info.name
        self.info = info
        self.retry_at: float | None = None  # time.monotonic() of the next attempt
        self.held = 0  # its tools held because their definition changed (core/mcp/pins.py)
        self._composed = False

    def compose(self) -> ComposeResult:
        with Horizontal(classes="server-line"):
            yield Static(classes="server-badge")
            yield Static(Content.styled(self.server, "bold"), classes="server-name")
            yield Static(classes="server-tools")
            yield Button("Reconnect", classes="reconnect", compact=True)
        yield Static(classes="server-error")

    def on_mount(self) -> None:
        self._composed = True
        self.show(self.info)

    @property
    def disabled_server(self) -> bool:
        return self.info.disabled

    def show(self, info: ServerInfo) -> None:
        self.info = info
        retry_in = info.retry_in_s if info.status is ServerStatus.ERROR else None
        self.retry_at = None if retry_in is None else time.monotonic() + retry_in
        if not self._composed:  # its parts are not there yet: on_mount shows the latest
            return
        self.query_one(".server-badge", Static).update(Content.styled(*status_label(info)))
        count = info.tool_count
        tools = "off" if self.disabled_server else f"{count} tool{'s' if count != 1 else ''}"
        self.query_one(".server-tools", Static).update(
            Content.assemble(tools, (f" ⚠ {self.held} changed", tone("caution", bold=True)))
            if self.held
            else Content(tools)
        )
        self.query_one(Button).label = (
            "Enable"
            if self.disabled_server
            else "Start"
            if info.status is ServerStatus.NOT_STARTED
            else "Reconnect"
        )
        self.show_problem()

    def show_problem(self) -> None:
        """The line under the name: when it is tried again (counting down), and why it is
        down."""
        error = self.info.last_error if self.info.status is not ServerStatus.READY else None
        if error is None and self.info.more_scope:
            error = f"wants more access (scope {self.info.more_scope}): i signs in again"
        line = Content()  # in the error colour (styles/app.tcss)
        if self.retry_at is not None:
            line = line.append_text(retry_text(self.retry_at - time.monotonic()), "bold")
            if error:
                line = line.append(" · ")
        line = line.append(error or "")
        if not self._composed:
            return
        problem = self.query_one(".server-error", Static)
        problem.update(line)
        problem.display = bool(line)


class RequestsPanel(Static):
    """The sub-agent's latest requests under the servers: one line each (the styles clip
    them), but why one failed shown whole, wrapped to the panel's own width, and wrapped
    again whenever that width changes (it is known only once the panel is laid out)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[dict[str, Any]] = []

    def show(self, requests: list[dict[str, Any]], fallback_width: int) -> None:
        self.requests = requests
        self.display = bool(requests)
        self._draw(self.content_region.width or fallback_width)

    def on_resize(self) -> None:
        if self.requests and self.content_region.width:
            self._draw(self.content_region.width)

    def _draw(self, width: int) -> None:
        lines: list[Content] = []
        for request in self.requests:
            line = request_line(request)
            lines.extend(line.wrap(width) if request["state"] == "failed" else [line])
        title = Content.styled("MCP sub-agent", tone("muted", bold=True))
        self.update(Content("\n").join([title, *lines]))


class ServersPane(Pane):
    """Every MCP server with its status; r reconnects the selected one, R all of them, i signs
    in to one that asks for it (OAuth, in the browser), e disables or enables it. Under them,
    the MCP sub-agent's latest requests; a adds a server through it, x cancels the latest
    request still open."""

    PANE_TITLE = "MCP Servers"
    SHORT_TITLE = "Servers"
    FOCUS_KEY = "F4"
    BINDINGS = [
        Binding("r", "reconnect", "Reconnect", id="servers.reconnect"),
        Binding("R", "reconnect_all", "Reconnect all", id="servers.reconnect_all"),
        Binding("i", "sign_in", "Sign in", id="servers.sign_in"),
        # One key; the footer names what it does to the selected server.
        Binding("e", "switch(False)", "Disable", id="servers.disable"),
        Binding("e", "switch(True)", "Enable", id="servers.enable"),
        Binding("a", "add_server", "Add server", id="servers.add"),
        # Left out of the footer, which is full at 80 columns; README and the palette say it.
        Binding("f", "find_server", "Find server", id="servers.find", show=False),
        Binding("x", "cancel_request", "Cancel request", id="servers.cancel_request"),
        Binding("enter", "details", "Details", id="servers.details", show=False),
    ]

    EVENTS = (ServerStatusChanged, SubagentChanged)

    @dataclass
    class ReconnectRequested(Message):
        """The person asked to reconnect one server (``server``) or all (None)."""

        server: str | None

    @dataclass
    class SignInRequested(Message):
        """The person asked to sign in to a server that wants OAuth."""

        server: str

    @dataclass
    class SwitchRequested(Message):
        """The person asked to switch a server on (``enable``) or off."""

        server: str
        enable: bool

    @dataclass
    class DetailsRequested(Message):
        """The person asked for one server's detail view."""

        server: str

    @dataclass
    class AddRequested(Message):
        """Queue the addition of the server a form (or the MCP Registry) gave: the person
        asked, so no proposal is needed."""

        form: ServerFormResult

    @dataclass
    class CancelSubagentRequested(Message):
        """Cancel the sub-agent's request that is open (``request``)."""

        request: str
        kind: str
        server: str

    def compose(self) -> ComposeResult:
        yield EmptyState(
            "No MCP servers.\n[dim]Add them to mcp-servers.json in the config directory; "
            "changes apply while DIANA runs.[/]",
            id="servers-empty",
            classes="empty",
        )
        yield ListView(id="servers-list", classes="pane-body")
        requests = RequestsPanel(id="subagent-requests")
        requests.display = False  # until the sub-agent has a request to show
        yield requests

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._servers: list[ServerInfo] = []  # the latest shown; the rows follow
        self._rows_lock = asyncio.Lock()
        # Requests of other diana processes (and of earlier runs), as they last wrote them.
        self._elsewhere: list[dict[str, Any]] = []
        self._held: dict[str, int] = {}  # each server's tools held, as the pins last said

    def on_mount(self) -> None:
        self.set_interval(1.0, self._count_down)
        self.set_interval(1.0, self.look_elsewhere)
        self.set_interval(1.0, self.look_at_pins)

    @property
    def subagent(self) -> MCPSubagent | None:
        """The MCP sub-agent: the pane only asks it, never waits on it."""
        return None if self.core is None else self.core.server_requests

    def watch_core(self, core: Core | None) -> None:
        if core is not None:
            self.show(core.server_diagnostics())
            self.show_requests()

    def on_core_event(self, message: CoreEvent) -> None:
        if isinstance(message.event, SubagentChanged):
            self.show_requests()
        elif self.core is not None:
            self.show(self.core.server_diagnostics())

    def _count_down(self) -> None:
        for row in self.server_list.query(ServerRow):
            if row.retry_at is not None:
                row.show_problem()

    @property
    def server_list(self) -> ListView:
        return self.query_one("#servers-list", ListView)

    def show(self, servers: list[ServerInfo]) -> None:
        """Show ``servers``: the title at once, the rows as soon as the ones asked for earlier
        are in place (a burst of changes is applied in order, the last one winning)."""
        self._servers = servers
        ready = sum(info.status is ServerStatus.READY for info in servers)
        off = sum(info.disabled for info in servers)
        waiting = sum(info.status is ServerStatus.NOT_STARTED for info in servers)
        on = len(servers) - off
        disabled = f" · {off} disabled" if off else ""
        not_started = f" · {waiting} not started" if waiting else ""
        self.border_title = (
            f"MCP Servers {ready}/{on} ready{not_started}{disabled}" if servers else "MCP Servers"
        )
        self.badge = f"{ready}/{on}" if servers else ""
        self._sync_rows()

    @work(group="server-rows", exit_on_error=False)
    async def _sync_rows(self) -> None:
        """Bring the rows in line with the servers last shown: update, add, remove and move
        in place. One at a time: a row being mounted or removed is awaited before the next
        change looks at the list."""
        async with self._rows_lock:
            servers = self._servers
            wanted = {info.name: info for info in servers}
            rows = {row.server: row for row in self.server_list.query(ServerRow)}
            selected = self.selected_server()
            gone = [row for name, row in rows.items() if name not in wanted]
            if gone:
                await self.server_list.remove_children(gone)
            for name, info in wanted.items():
                if name in rows:
                    rows[name].show(info)
            new = [ServerRow(info) for name, info in wanted.items() if name not in rows]
            for row in new:
                row.held = self._held.get(row.server, 0)
            if new:
                await self.server_list.mount_all(new)
            self._keep_order(list(wanted), selected)
            if servers and self.server_list.index is None:
                self.server_list.index = 0
            self.query_one("#servers-empty").display = not servers
            self.server_list.display = bool(servers)
            self.refresh_bindings()  # i and e follow the selected server's state
        if self.query_one("#subagent-requests").display:
            self.show_requests()  # a test's tool count beside the one the server offers now

    def _keep_order(self, names: list[str], selected: str | None) -> None:
        """Rows in the order of mcp-servers.json (a restarted server keeps its place), the
        selection on the same server."""
        rows = {row.server: row for row in self.server_list.query(ServerRow)}
        if [row.server for row in self.server_list.query(ServerRow)] == names:
            return
        for index, name in enumerate(names):
            self.server_list.move_child(rows[name], before=index)
        if selected in names:
            self.server_list.index = names.index(selected)

    @work(exclusive=True, group="subagent-elsewhere", exit_on_error=False)
    async def look_elsewhere(self) -> None:
        """Requests that `diana` commands (or another app) make, within a second."""
        records = self.subagent.records if self.subagent is not None else None
        if records is None:
            return
        here = os.getpid()
        found = [r for r in await records.recent(REQUEST_LINES) if r.get("pid") != here]
        if found != self._elsewhere:
            self._elsewhere = found
            self.show_requests()

    @work(exclusive=True, group="pins", exit_on_error=False)
    async def look_at_pins(self) -> None:
        """Each server's tools held because their definition changed, whichever process
        saw it or accepted it, within a second: the badge on its row. (A read that fails,
        the database closing as the app quits, leaves the badges as they were.)"""
        if self.core is None:
            return
        held: dict[str, int] = {}
        for change in await self.core.tool_changes():
            held[change.server] = held.get(change.server, 0) + 1
        if held == self._held:
            return
        self._held = held
        for row in self.server_list.query(ServerRow):
            row.held = held.get(row.server, 0)
            row.show(row.info)

    def show_requests(self) -> None:
        """The sub-agent's latest requests, this process's and others', newest first
        (called on each SubagentChanged, and when another process's change)."""
        mine = self.subagent.recent(REQUEST_LINES) if self.subagent is not None else []
        requests = sorted(
            [r.public() for r in mine] + self._elsewhere,
            key=lambda r: str(r["created_at"]),
            reverse=True,
        )[:REQUEST_LINES]
        panel = self.query_one("#subagent-requests", RequestsPanel)
        panel.show(requests, max(self.content_region.width - 2, 20))
        # the tooltip has every message whole
        panel.tooltip = "\n".join(
            f"{r['request_id']} {r['kind']} {r['server']}: {r['message']}" for r in requests
        )
        self.refresh_bindings()  # x, while one is open

    def action_add_server(self) -> None:
        if self.subagent is None:
            return
        self.app.push_screen(ServerFormScreen(), self.add_server)

    def action_find_server(self) -> None:
        """A server from the MCP Registry: searched, its settings asked, then queued as the
        Add server form's are."""
        if self.core is None:
            return
        from ..modals.registry import RegistrySearchScreen

        # The names in use (listed here, and those being added): the form suggests another.
        taken = {row.server for row in self.query(ServerRow)}
        if self.subagent is not None:
            taken |= {r.server for r in self.subagent.recent(REQUEST_LINES) if r.open}
        self.app.push_screen(RegistrySearchScreen(self.core, taken), self.add_server)

    def add_server(self, form: ServerFormResult | None) -> None:
        """Queue what the form gave: the person asked, so no proposal is needed."""
        if form is not None and self.subagent is not None:
            self.post_message(self.AddRequested(form))

    def action_cancel_request(self) -> None:
        if self.subagent is None:
            return
        latest = next((r for r in self.subagent.recent(REQUEST_LINES) if r.open), None)
        if latest is None:  # x is offered only while one is open
            return
        self.post_message(self.CancelSubagentRequested(latest.id, latest.kind.value, latest.server))

    @property
    def focus_target(self) -> Any:
        return self.server_list if self.server_list.display else self.query_one("#servers-empty")

    def selected_server(self) -> str | None:
        row = self.selected_row()
        return None if row is None else row.server

    def selected_row(self) -> ServerRow | None:
        item = self.server_list.highlighted_child
        return item if isinstance(item, ServerRow) else None

    def action_reconnect(self) -> None:
        row = self.selected_row()
        if row is not None and not self._told_disabled(row):
            self.post_message(self.ReconnectRequested(row.server))

    def _told_disabled(self, row: ServerRow) -> bool:
        """A disabled server is neither connected nor shown in detail: say how to enable it."""
        if row.disabled_server:
            self.notify(f"{row.server} is disabled: e enables it", timeout=4)
        return row.disabled_server

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """i is offered (and in the footer) only on a server that asks for a sign-in (or for
        more access than it was granted); e says
        Enable on a disabled server, Disable on any other; x only while a sub-agent request
        is open."""
        if action == "cancel_request":  # x, while a request is open
            return self.subagent is not None and self.subagent.busy
        if action not in ("sign_in", "switch"):
            return True
        row = self.selected_row()
        if row is None:
            return False
        if action == "switch":
            return parameters == (row.disabled_server,)
        return row.info.sign_in_needed or bool(row.info.more_scope)

    def action_switch(self, enable: bool) -> None:
        row = self.selected_row()
        if row is not None:
            self.post_message(self.SwitchRequested(row.server, enable))

    def action_sign_in(self) -> None:
        server = self.selected_server()
        if server is not None:
            self.post_message(self.SignInRequested(server))

    @on(ListView.Highlighted, "#servers-list")
    def server_highlighted(self) -> None:
        self.refresh_bindings()

    def action_reconnect_all(self) -> None:
        self.post_message(self.ReconnectRequested(None))

    def action_details(self) -> None:
        row = self.selected_row()
        if row is not None and not self._told_disabled(row):
            self.post_message(self.DetailsRequested(row.server))

    @on(Button.Pressed, ".reconnect")
    def reconnect_pressed(self, event: Button.Pressed) -> None:
        """Reconnect, or Enable on a disabled server."""
        event.stop()
        row = next((a for a in event.button.ancestors if isinstance(a, ServerRow)), None)
        if row is None:
            return
        if row.disabled_server:
            self.post_message(self.SwitchRequested(row.server, True))
        else:
            self.post_message(self.ReconnectRequested(row.server))

    @on(ListView.Selected, "#servers-list")
    def row_selected(self, event: ListView.Selected) -> None:
        if isinstance(event.item, ServerRow) and not self._told_disabled(event.item):
            self.post_message(self.DetailsRequested(event.item.server))
