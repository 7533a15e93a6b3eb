"""One resource as read, kept up to date while its server tells of changes."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diana.core.api import save_to
from diana.core.api.errors import UnreadableFile
from rich.console import Group
from rich.json import JSON
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import Static

from ..theme import tone
from .detail import DetailView
from .prompts import SavePathScreen

if TYPE_CHECKING:
    from diana.core.api.types import ResourceContent, ServerConnection

MUTED = tone("muted")


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
        from diana.core.api import unwatch_resource

        if self.watched is not None:
            await unwatch_resource(self.watched, self.info["uri"], self.changed)

    def changed(self, _uri: str) -> None:
        self.updates += 1
        self.read(first=False)

    @work(exclusive=True, group="catalog")
    async def read(self, first: bool) -> None:
        from diana.core.api import can_subscribe, read_resource, watch_resource
        from diana.core.api.errors import CatalogError

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
