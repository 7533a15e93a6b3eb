"""The Memory view: the facts DIANA remembers, to see and correct. Opened with m in the
Agents pane or "Memory" in the command palette."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar

from diana.core.api.shown import printable
from diana.core.api.types import Fact
from rich.json import JSON
from rich.table import Table
from rich.text import Text
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
from .detail import DetailView, heading
from .dialogs import ConfirmDialog, Dialog, search_typed

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import Hit, MemoryStatus, SearchResult

LISTED = 200  # the newest facts listed while nothing is searched
FOUND = 50  # the best matches a search lists
TYPING_PAUSE = 0.3  # seconds typing must pause before a search runs
WATCH_INTERVAL = 1.0  # seconds between looks for facts other processes saved or forgot
QUESTION_CUT = 240  # characters of a fact quoted in the question before forgetting it

HOST = re.compile(r" at \S+://\S+")  # " at http://127.0.0.1:11434" in what Ollama's client says
# What says whether facts changed: how many there are, how many have a vector, the newest.
Fingerprint = tuple[int, int, int | None]


def saved_on(iso: str) -> str:
    """The local date a fact was saved."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d")
    except (TypeError, ValueError):  # a damaged row: what it says, not a failure
        return str(iso)[:10]


def one_line(text: str) -> str:
    return printable(text, multiline=False)


def short_why(why: str) -> str:
    """Why there is no vector, in a few words for a title ("Ollama is not reachable"): its
    first clause, without the host's URL; the whole of it is in the line under the search."""
    return HOST.sub("", why.split(" — ", 1)[0])


class SearchField(Entry):
    """The search: typed into, it searches; Down goes to what it found."""

    BINDINGS = [Binding("down", "screen.to_list", "List", id="memory.list")]


class FactTable(FittedTable):
    """The facts listed, newest first: the fact's text takes the rest of the row; on a narrow
    terminal the tags give way first."""

    COLUMNS: ClassVar[tuple[FitColumn, ...]] = (
        FitColumn("id", "Id"),
        FitColumn("saved", "Saved"),
        FitColumn("embedded", "Embedded"),
        FitColumn("tags", "Tags", least=4, most=24),
        FitColumn("fact", "Fact", least=12),
    )
    GIVES_WAY = ("tags",)
    LAST_WANTS = 30
    BINDINGS = [Binding("enter", "select_cursor", "Show in full", id="memory.show")]


class HitTable(FactTable):
    """The facts a search found, best first, with their score."""

    COLUMNS = (FactTable.COLUMNS[0], FitColumn("score", "Score"), *FactTable.COLUMNS[1:])


class FactScreen(DetailView[Fact]):
    """One fact in full: its text, tags, when and where it was saved, its metadata, and
    whether it is found by meaning (has a vector) or by its words only."""

    def __init__(self, fact: Fact, model: str) -> None:
        super().__init__(fact)
        self.model = model

    def dialog_title(self) -> str:
        return f"Fact {self.info.id}"

    def compose_body(self) -> ComposeResult:
        yield Static(id="fact-summary")
        yield heading("Text")
        yield Static(Content(printable(self.info.content)), id="fact-content")
        yield heading("Metadata")
        metadata = self.info.metadata
        yield Static(
            JSON(json.dumps(metadata, ensure_ascii=False)) if metadata else "none",
            id="fact-metadata",
        )

    def on_mount(self) -> None:
        self.restyle()

    def restyle(self) -> None:
        fact = self.info
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        try:
            saved = datetime.fromisoformat(fact.created_at).astimezone()
            when = saved.strftime("%Y-%m-%d %H:%M:%S %Z")
        except (TypeError, ValueError):
            when = fact.created_at
        embedded = (
            Text(f"yes, by {self.model}: found by its meaning and its words")
            if fact.embedded
            else Text("not yet: found by its words only", style=self.ink(tone("caution")))
        )
        for label, value in (
            ("id", str(fact.id)),
            ("saved", when),
            ("by", one_line(fact.source or "unknown")),
            ("tags", one_line(" ".join(fact.tags)) or "—"),
            ("embedded", embedded),
        ):
            grid.add_row(label, value)
        self.query_one("#fact-summary", Static).update(grid)


class MemoryScreen(ThemeAware, Dialog[None]):
    """The facts, newest first, with a search that runs as you type (by words and meaning,
    or by words alone when no vector can be had: the title says which). Enter shows a fact
    in full; d forgets it, once a person says yes. It follows facts saved or forgotten by
    any process (a look a second)."""

    @dataclass
    class ForgetRequested(ActionRequested[Fact | None]):
        """Forget one fact: its text, vector and search entry (None: already forgotten)."""

        fact: int

    BINDINGS = [
        Binding("escape", "clear", "Clear search", id="memory.clear"),
        Binding("escape", "close", "Close", id="memory.close"),
        Binding("d", "forget", "Forget", id="memory.forget"),
        Binding("delete", "forget", "Forget", id="memory.forget-delete", show=False),
        Binding("slash", "search", "Search", id="memory.search"),
    ]

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.searched = ""  # what the list shows matches for; "" the newest facts
        self.facts: list[Fact] = []  # as listed, in order
        self.found: SearchResult | None = None  # the search shown, if one is
        self.status: MemoryStatus | None = None
        self.seen: Fingerprint | None = None  # the facts as last read
        self._shown_for: str | None = None  # the search the rows were drawn for

    def dialog_title(self) -> str:
        return "Memory"

    def compose_body(self) -> ComposeResult:
        yield SearchField(
            id="memory-query", placeholder="Search the facts as you type · Esc clears"
        )
        yield Static(id="memory-summary")
        yield EmptyState(id="memory-empty")
        yield FactTable(id="memory-facts")
        yield HitTable(id="memory-hits")
        yield Static(id="memory-last")

    def on_mount(self) -> None:
        self.query_one("#memory-hits").display = False
        self.query_one("#memory-empty").display = False
        self.entry.focus()
        self.load()
        self.embed_missing()
        self.set_interval(WATCH_INTERVAL, self.look_for_changes)

    @property
    def entry(self) -> Input:
        return self.query_one("#memory-query", Input)

    @property
    def table(self) -> FactTable:
        """The table in use: the search's while one is shown, else the list's."""
        return self.query_one("#memory-hits" if self.found else "#memory-facts", FactTable)

    # -- reading ----------------------------------------------------------------------

    async def fingerprint(self) -> Fingerprint:
        memory = self.core.memory
        status = await memory.status()
        newest = await memory.recent(limit=1)
        return status.facts, status.embedded, newest[0].id if newest else None

    @work(exclusive=True, group="memory", exit_on_error=False)
    async def load(self, pause: float = 0.0) -> None:
        """Read the facts again: the search typed, or the newest; after ``pause`` seconds
        (typing coalesced: a key typed meanwhile starts another wait)."""
        if pause:
            await asyncio.sleep(pause)
        memory = self.core.memory
        searched = self.searched
        # Read before the facts: a change made meanwhile is seen at the next look.
        seen = await self.fingerprint()
        found: SearchResult | None = None
        if searched:
            self.query_one("#memory-summary", Static).update(
                Content.styled(f"Searching for “{one_line(searched)}”…", tone("muted"))
            )
            found = await memory.search(searched, FOUND)
            facts = [hit.fact for hit in found.hits]
        else:
            facts = await memory.recent(limit=LISTED)
        self.status = await memory.status()
        self.seen, self.found, self.facts = seen, found, facts
        self.restyle()

    @work(exclusive=True, group="memory-embed", exit_on_error=False)
    async def embed_missing(self) -> None:
        """Facts without a vector (saved while Ollama was away, or by another process) are
        embedded, as before any search; then the title says whether that worked."""
        memory = self.core.memory
        memory.start_backfill()
        await memory.wait_backfilled()
        self.load()

    @work(exclusive=True, group="memory-watch", exit_on_error=False)
    async def look_for_changes(self) -> None:
        """Facts saved, embedded or forgotten anywhere since the last reading: read again."""
        if self.seen is not None and await self.fingerprint() != self.seen:
            self.load()

    # -- drawing ----------------------------------------------------------------------

    def restyle(self) -> None:
        status = self.status
        if status is None:
            return
        hits = {hit.fact.id: hit for hit in self.found.hits} if self.found else {}
        table = self.table
        other = self.query_one("#memory-facts" if self.found else "#memory-hits", FactTable)
        had_focus = self.focused in (table, other)
        chosen = self.selected()
        same_list = self._shown_for == self.searched
        row = table.cursor_row
        table.clear()
        table.untrack_all()
        for fact in self.facts:
            cells = self._cells(fact, hits.get(fact.id))
            key = str(fact.id)
            table.add_row(*cells, key=key)
            table.track(key, [c.plain for c in cells], fit=False)
        table.fit_tracked()
        if self.facts:
            ids = [fact.id for fact in self.facts]
            if not same_list:
                row = 0  # a new search: its best match
            elif chosen is not None and chosen.id in ids:
                row = ids.index(chosen.id)  # the same fact, wherever it moved
            table.move_cursor(row=min(row, len(ids) - 1))
        self._shown_for = self.searched
        empty = self.query_one("#memory-empty", EmptyState)
        other.display = False
        if self.facts and not table.display:
            # Hidden, it had no width to fit its columns to: fitted once it is laid out.
            table.call_after_refresh(table.fit_columns)
        table.display = bool(self.facts)
        empty.display = not self.facts
        empty.update(self._empty_text())
        if had_focus or (self.focused is not None and not self.focused.display):
            (table if self.facts else self.entry).focus()
        self.box.border_title = self.title_text(status)
        self.query_one("#memory-summary", Static).update(self.summary(status))
        self.refresh_bindings()

    def _cells(self, fact: Fact, hit: Hit | None) -> list[Cell]:
        cells = [cell(str(fact.id), right=True)]
        if hit is not None:
            cells.append(cell(f"{hit.score:.4f}", self.ink(tone("muted")), right=True))
        cells += [
            cell(saved_on(fact.created_at)),
            cell("yes", self.ink(tone("good")))
            if fact.embedded
            else cell("not yet", self.ink(tone("caution"))),
            cell(one_line(" ".join(fact.tags)), self.ink(tone("muted"))),
            cell(one_line(fact.content)),
        ]
        return cells

    def by_words_why(self, status: MemoryStatus) -> str | None:
        """Why searches are by words alone now, or None when they are by meaning too."""
        if self.found is not None:
            return self.found.why if self.found.mode == "lexical" else None
        return status.problem

    def title_text(self, status: MemoryStatus) -> str:
        facts = "1 fact" if status.facts == 1 else f"{status.facts:,} facts"
        why = self.by_words_why(status)
        how = f"by words: {short_why(why)}" if why else status.model
        return f"Memory — {facts} · {how}"

    def summary(self, status: MemoryStatus) -> Content:
        """What is listed, on one line; under it, when searches are by words alone, why."""
        why = self.by_words_why(status)
        found = self.found
        if found is not None:
            matches = len(found.hits)
            head = (
                f"{matches} best {'match' if matches == 1 else 'matches'} for "
                f"“{one_line(found.query)}”"
            )
            how = "" if why else f" · by words and meaning ({status.model})"
            if found.why and not why:
                how += f"; {found.why}"
        elif status.facts:
            listed = len(self.facts)
            head = (
                f"The newest {listed:,} of {status.facts:,}"
                if listed < status.facts
                else "Newest first"
            )
            missing = status.facts - status.embedded
            how = f" · {status.embedded:,} embedded with {status.model}" + (
                f", {missing:,} not yet" if missing else ""
            )
        else:
            return Content("")
        return Content.assemble(
            (head, "bold"),
            how,
            ("\nBy words only: ", tone("caution", bold=True)) if why else "",
            (why or "", tone("caution")),
        )

    def _empty_text(self) -> Content:
        if self.found is not None:
            return Content.assemble(
                f"No fact matches “{one_line(self.found.query)}”.\n",
                ("Esc clears the search.", "dim"),
            )
        return Content.assemble(
            "Nothing remembered yet.\n",
            ("Facts the model saves (save_fact) or you save (/call save_fact) are here.", "dim"),
        )

    # -- keys -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.query("#memory-query"):  # asked by the footer before the view is built
            return action not in ("clear", "forget")
        typing = self.focused is self.entry
        if action == "clear":
            return bool(self.entry.value)
        if action == "close":
            return not self.entry.value
        if action == "forget":
            return not typing and bool(self.facts)
        if action == "search":
            return not typing
        if action == "to_list":
            return typing and bool(self.facts)
        return True

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self.refresh_bindings()

    @on(Input.Changed, "#memory-query")
    def typed(self, event: Input.Changed) -> None:
        self.refresh_bindings()
        search_typed(self, event.value, TYPING_PAUSE)

    @on(Input.Submitted, "#memory-query")
    def search_now(self, event: Input.Submitted) -> None:
        """Enter: the search at once (no pause), and the keys go to its results."""
        event.stop()
        self.load()
        self.action_to_list()

    def action_clear(self) -> None:
        self.entry.value = ""

    def action_search(self) -> None:
        self.entry.focus()

    def action_to_list(self) -> None:
        if self.facts:
            self.table.focus()

    @on(DataTable.RowSelected)
    def show_fact(self, event: DataTable.RowSelected) -> None:
        event.stop()
        fact = self.selected()
        if fact is not None:
            self.app.push_screen(FactScreen(fact, self.core.memory.model))

    def selected(self) -> Fact | None:
        table = self.table
        if not self.facts or table.row_count != len(self.facts):
            return None
        return self.facts[min(table.cursor_row, len(self.facts) - 1)]

    def action_forget(self) -> None:
        fact = self.selected()
        if fact is None:
            return
        text = one_line(fact.content)
        if len(text) > QUESTION_CUT:
            text = text[: QUESTION_CUT - 1] + "…"
        question = Content.assemble(
            "Forget fact ",
            (str(fact.id), "bold"),
            "?\n",
            (text, "italic"),
            ("\nIts text, vector and search entry are removed; this cannot be undone.", "dim"),
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.forget(fact)

        self.app.push_screen(ConfirmDialog("Forget a fact", question), answered)

    @work(group="memory-forget", exit_on_error=False)
    async def forget(self, fact: Fact) -> None:
        """Remove the fact, its vector and its full-text row, then read the list again."""
        request = self.ForgetRequested(fact.id)
        self.post_message(request)
        gone = await request.outcome
        last = self.query_one("#memory-last", Static)
        if gone is None:
            last.update(
                Content.styled(f"Fact {fact.id} was already forgotten elsewhere", tone("caution"))
            )
        else:
            last.update(
                Content.assemble(("Forgot ", "bold"), f"fact {gone.id}: ", one_line(gone.content))
            )
        self.load()
