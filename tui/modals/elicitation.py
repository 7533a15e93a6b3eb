"""An MCP server's question to the person, as a form or a URL to open."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from diana.core.api import check_answer, open_url
from diana.core.api.errors import UnsafeURL
from diana.core.api.types import Elicitation
from diana.core.api.types import Field as ElicitField
from diana.core.api.types import FormAnswer as Answer
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static

from ..completion import AskedSuggester
from ..entry import Entry
from ..theme import tone
from .dialogs import Dialog

MUTED = tone("muted")


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
