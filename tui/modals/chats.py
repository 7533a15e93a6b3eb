"""The Conversations view: every conversation kept, the one used last first, with a search
that runs as you type (titles and the words said, SQLite FTS5). Enter opens one in the chat;
r renames it, d deletes it once a person says yes, e exports it (Markdown, or JSON for a
.json file); n starts a new one. Opened with Ctrl+O in the chat, /chats, or "Conversations"
in the palette."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from diana.core.api import save_to
from diana.core.api.errors import BadChatInput, UnknownChat, UnreadableFile
from diana.core.api.shown import printable
from diana.core.api.types import ChatSummary
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import DataTable, Input, Static

from ..entry import Entry
from ..fitted import Cell, FitColumn, FittedTable, cell
from ..messages import ActionRequested
from ..panes.base import EmptyState
from ..theme import ThemeAware, tone
from .dialogs import ConfirmDialog, Dialog, search_typed

if TYPE_CHECKING:
    from diana.core.api import Core

LISTED = 500  # conversations listed (the newest, or the newest that match)
TYPING_PAUSE = 0.15  # seconds typing must pause before a search runs


def one_line(text: str) -> str:
    return printable(text, multiline=False)


def used_on(iso: str) -> str:
    """When a conversation was last used, as the list shows it: 2026-03-14 09:26."""
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso[:16]


class ChatsSearch(Entry):
    """The search: the list follows what is typed; ↓ goes to the list."""

    BINDINGS: ClassVar = [Binding("down", "screen.to_list", "List", id="chats.list")]


class LineField(Entry):
    """A line asked for one thing (a new title, a file to export to); Enter does it."""


class ChatTable(FittedTable):
    """The conversations: the title takes what is left; on a narrow terminal the model gives
    way first."""

    COLUMNS: ClassVar[tuple[FitColumn, ...]] = (
        FitColumn("mark", " "),
        FitColumn("used", "Last used"),
        FitColumn("count", "Msgs"),
        FitColumn("model", "Model", least=0, droppable=True, most=24),
        FitColumn("title", "Title", least=12),
    )
    GIVES_WAY = ("model",)
    LAST_WANTS = 36
    BINDINGS: ClassVar = [Binding("enter", "select_cursor", "Open", id="chats.open")]


class ChatsScreen(ThemeAware, Dialog[None]):
    """The conversations; the one open in the chat is marked ▶."""

    @dataclass
    class OpenRequested(ActionRequested[None]):
        """Open this conversation in the chat, to go on with it."""

        conversation: str

    class NewRequested(ActionRequested[None]):
        """The chat starts a new conversation (the one open stays stored)."""

    @dataclass
    class DeleteRequested(ActionRequested[ChatSummary]):
        """Delete this conversation and its messages (its calls stay in the log)."""

        conversation: str

    BINDINGS: ClassVar = [
        Binding("escape", "cancel_line", "Cancel", id="chats.cancel-line"),
        Binding("escape", "clear", "Clear search", id="chats.clear"),
        Binding("escape", "close", "Close", id="chats.close"),
        Binding("r", "rename", "Rename", id="chats.rename"),
        Binding("d", "delete", "Delete", id="chats.delete"),
        Binding("delete", "delete", "Delete", id="chats.delete-key", show=False),
        Binding("e", "export", "Export", id="chats.export"),
        Binding("n", "new", "New", id="chats.new"),
        Binding("slash", "search", "Search", id="chats.search"),
    ]

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.searched = ""  # what the list shows matches for; "" every conversation
        self.chats: list[ChatSummary] = []
        self.total = 0  # conversations kept, whatever the search
        self.asking: str | None = None  # what the line asks for: "rename", "export"
        self.loaded = asyncio.Event()  # set each time the list is drawn

    def dialog_title(self) -> str:
        return "Conversations"

    def compose_body(self) -> ComposeResult:
        yield ChatsSearch(id="chats-query", placeholder="Search titles and messages as you type")
        yield Static(id="chats-summary")
        yield EmptyState(id="chats-empty")
        yield ChatTable(id="chats-table")
        line = LineField(id="chats-line")
        line.display = False
        yield line
        yield Static(id="chats-last")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#chats-empty").display = False
        self.query_one("#chats-last").display = False
        self.entry.focus()
        self.load()

    @property
    def entry(self) -> Input:
        return self.query_one("#chats-query", Input)

    @property
    def line(self) -> Input:
        return self.query_one("#chats-line", Input)

    @property
    def table(self) -> ChatTable:
        return self.query_one("#chats-table", ChatTable)

    # -- reading ----------------------------------------------------------------------

    @work(exclusive=True, group="chats", exit_on_error=False)
    async def load(self, pause: float = 0.0) -> None:
        """Read the list again: the matches of what is typed, or every conversation."""
        if pause:
            await asyncio.sleep(pause)  # a key typed meanwhile starts another wait
        chats = self.core.chats
        searched = self.searched
        self.total = await chats.count()
        self.chats = await (chats.search(searched, LISTED) if searched else chats.recent(LISTED))
        self.restyle()
        self.loaded.set()

    # -- drawing ----------------------------------------------------------------------

    def restyle(self) -> None:
        table = self.table
        chosen = self.selected()
        had_focus = self.focused is table
        table.clear()
        table.untrack_all()
        for chat in self.chats:
            cells = self._cells(chat)
            table.add_row(*cells, key=chat.id)
            table.track(chat.id, [c.plain for c in cells], fit=False)
        table.fit_tracked()
        ids = [c.id for c in self.chats]
        if ids:
            row = ids.index(chosen.id) if chosen is not None and chosen.id in ids else 0
            table.move_cursor(row=row)
            if not table.display:
                table.call_after_refresh(table.fit_columns)
        table.display = bool(ids)
        empty = self.query_one("#chats-empty", EmptyState)
        empty.display = not ids
        empty.update(self._empty_text())
        if had_focus and not ids:
            self.entry.focus()
        count = "1 conversation" if self.total == 1 else f"{self.total:,} conversations"
        self.box.border_title = f"Conversations — {count}"
        self.query_one("#chats-summary", Static).update(self._summary())
        self.refresh_bindings()

    def _cells(self, chat: ChatSummary) -> list[Cell]:
        is_open = chat.id == self.core.chat.conversation_id
        return [
            cell("▶" if is_open else " ", self.ink(tone("busy"))),
            cell(used_on(chat.updated_at), self.ink(tone("muted"))),
            cell(str(chat.messages), right=True),
            cell(one_line(chat.model), self.ink(tone("muted"))),
            cell(one_line(chat.title) or "(untitled)", "bold" if is_open else ""),
        ]

    def _summary(self) -> Content:
        if self.searched:
            found = len(self.chats)
            return Content.assemble(
                (f"{found} {'match' if found == 1 else 'matches'}", "bold"),
                f" for “{one_line(self.searched)}” · Esc clears",
            )
        if not self.total:
            return Content("")
        return Content.assemble(
            ("Newest first", "bold"), " · Enter opens · ", ("▶", tone("busy")), " open in the chat"
        )

    def _empty_text(self) -> Content:
        if self.searched:
            return Content.assemble(
                f"No conversation holds “{one_line(self.searched)}”.\n",
                ("Esc clears the search.", "dim"),
            )
        return Content.assemble(
            "No conversation yet.\n", ("Ask something in the chat: it is kept here.", "dim")
        )

    def tell(self, text: Content) -> None:
        last = self.query_one("#chats-last", Static)
        last.update(text)
        last.display = True

    # -- keys -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.query("#chats-line"):  # asked by the footer before the view is built
            return action == "close"
        typing = self.focused is self.entry
        asking = self.asking is not None
        if action == "cancel_line":
            return asking
        if action == "clear":
            return not asking and bool(self.entry.value)
        if action == "close":
            return not asking and not self.entry.value
        if action in ("rename", "delete", "export"):
            return not typing and not asking and self.selected() is not None
        if action in ("search", "new"):
            return not typing and not asking
        if action == "to_list":
            return typing and bool(self.chats)
        return True

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self.refresh_bindings()

    @on(Input.Changed, "#chats-query")
    def typed(self, event: Input.Changed) -> None:
        self.refresh_bindings()
        search_typed(self, event.value, TYPING_PAUSE)

    @on(Input.Submitted, "#chats-query")
    def open_first(self, event: Input.Submitted) -> None:
        """Enter in the search: the conversation highlighted (the newest match) opens."""
        event.stop()
        chat = self.selected()
        if chat is not None:
            self.open_chat(chat.id)

    def action_clear(self) -> None:
        self.entry.value = ""
        self.entry.focus()

    def action_search(self) -> None:
        self.entry.focus()

    def action_to_list(self) -> None:
        if self.chats:
            self.table.focus()

    def action_cancel_line(self) -> None:
        self.asking = None
        self.line.display = False
        self.table.focus()

    @on(DataTable.RowSelected, "#chats-table")
    def open_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        chat = self.selected()
        if chat is not None:
            self.open_chat(chat.id)

    def selected(self) -> ChatSummary | None:
        table = self.table
        if not self.chats or table.row_count != len(self.chats):
            return None
        return self.chats[min(table.cursor_row, len(self.chats) - 1)]

    # -- acting -----------------------------------------------------------------------

    @work(exclusive=True, group="chats-open", exit_on_error=False)
    async def open_chat(self, conversation: str) -> None:
        request = self.OpenRequested(conversation)
        self.post_message(request)
        try:
            await request.outcome
        except (UnknownChat, BadChatInput) as exc:
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
            self.load()
            return
        except Exception as exc:  # a turn still running (Busy), the database
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
            return
        self.dismiss(None)

    @work(exclusive=True, group="chats-open", exit_on_error=False)
    async def action_new(self) -> None:
        request = self.NewRequested()
        self.post_message(request)
        try:
            await request.outcome
        except Exception as exc:  # a turn still running
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
            return
        self.dismiss(None)

    def ask_line(self, asking: str, value: str, placeholder: str) -> None:
        self.asking = asking
        line = self.line
        line.placeholder = placeholder
        line.value = value
        line.display = True
        line.focus()
        line.cursor_position = len(value)
        self.refresh_bindings()

    def action_rename(self) -> None:
        chat = self.selected()
        if chat is not None:
            self.ask_line("rename", chat.title, "New title · Enter renames · Esc cancels")

    def action_export(self) -> None:
        chat = self.selected()
        if chat is not None:
            self.ask_line(
                "export",
                f"~/diana-chat-{chat.id}.md",
                "Export to a file (.json: JSON, else Markdown) · Enter · Esc cancels",
            )

    @on(Input.Submitted, "#chats-line")
    def line_given(self, event: Input.Submitted) -> None:
        event.stop()
        chat, asking = self.selected(), self.asking
        self.action_cancel_line()
        if chat is None or asking is None:
            return
        if asking == "rename":
            self.rename(chat, event.value)
        elif event.value.strip():
            self.export(chat, Path(event.value.strip()).expanduser())

    @work(group="chats-change", exit_on_error=False)
    async def rename(self, chat: ChatSummary, title: str) -> None:
        try:
            renamed = await self.core.chats.rename(chat.id, title)
        except (UnknownChat, BadChatInput) as exc:
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
        else:
            self.tell(Content.assemble(("✓ ", tone("good")), f"renamed: {one_line(renamed.title)}"))
        self.load()

    @work(group="chats-change", exit_on_error=False)
    async def export(self, chat: ChatSummary, target: Path) -> None:
        form = "json" if target.suffix.lower() == ".json" else "md"
        try:
            text = await self.core.chats.export(chat.id, form)
            await asyncio.to_thread(save_to, target, text.encode("utf-8"))
        except (UnknownChat, BadChatInput, UnreadableFile) as exc:
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
            return
        self.tell(Content.assemble(("✓ ", tone("good")), f"exported to {one_line(str(target))}"))

    def action_delete(self) -> None:
        chat = self.selected()
        if chat is None:
            return
        question = Content.assemble(
            "Delete the conversation ",
            (one_line(chat.title) or "(untitled)", "bold"),
            f" ({chat.messages} messages)?",
            ("\nIts messages go; the calls it made stay in the log. This cannot be undone.", "dim"),
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.delete(chat)

        self.app.push_screen(ConfirmDialog("Delete a conversation", question), answered)

    @work(group="chats-change", exit_on_error=False)
    async def delete(self, chat: ChatSummary) -> None:
        request = self.DeleteRequested(chat.id)
        self.post_message(request)
        try:
            gone = await request.outcome
        except Exception as exc:  # gone already, being answered, the database
            self.tell(Content.assemble(("✗ ", tone("bad")), one_line(str(exc))))
        else:
            self.tell(Content.assemble(("✓ ", tone("good")), f"deleted: {one_line(gone.title)}"))
        self.load()
