"""The Models view: the models Ollama has, what each can do, which is loaded and which the
chat uses; pull one (with its progress), remove one, or make one the chat's. Opened with
Ctrl+L in the chat, /models, or "Models" in the command palette."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from diana.core.api.errors import LLMProblem
from diana.core.api.shown import capabilities_text, context_text, printable, size_text
from diana.core.api.types import ModelInfo, PullProgress
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
from .dialogs import ConfirmDialog, Dialog

if TYPE_CHECKING:
    from diana.core.api import Core

BAR_WIDTH = 24  # cells of the pull's progress bar


def one_line(text: str) -> str:
    return printable(text, multiline=False)


def progress_bar(step: PullProgress, width: int = BAR_WIDTH) -> str:
    """A text bar (nothing animates, so snapshots hold still) and the step's percentage."""
    percent = step.percent
    if percent is None:
        return one_line(step.status)
    filled = round(width * percent / 100)
    done = f"{size_text(step.completed or 0)} of {size_text(step.total or 0)}"
    return f"{'█' * filled}{'░' * (width - filled)} {percent:3.0f}%  {done}"


class ModelTable(FittedTable):
    """The installed models: what each can do takes what is left; on a narrow terminal the
    family, quantisation and size give way first."""

    COLUMNS: ClassVar[tuple[FitColumn, ...]] = (
        FitColumn("mark", " "),
        FitColumn("name", "Name", most=40),
        FitColumn("params", "Params"),
        FitColumn("context", "Context"),
        FitColumn("size", "Size", least=0, droppable=True),
        FitColumn("quant", "Quant", least=0, droppable=True),
        FitColumn("family", "Family", least=0, droppable=True),
        FitColumn("can", "Can", least=5),
    )
    GIVES_WAY = ("family", "quant", "size")
    LAST_WANTS = 16
    BINDINGS = [Binding("enter", "select_cursor", "Use in chat", id="models.use")]


class ModelsScreen(ThemeAware, Dialog[None]):
    """The models, by name. p pulls one (its name asked in a line), with a bar while it
    pulls; Esc or Ctrl+C stops the pull. d removes the selected model once a person says
    yes; Enter makes it the chat's model."""

    @dataclass
    class UseRequested(ActionRequested[None]):
        """Make this model the chat's, from its next message."""

        model: str

    BINDINGS = [
        Binding("escape", "stop_pull", "Stop pull", id="models.stop"),
        Binding("ctrl+c", "stop_pull", "Stop pull", id="models.stop-ctrl-c", show=False),
        Binding("escape", "cancel_name", "Cancel", id="models.cancel-name"),
        Binding("escape", "close", "Close", id="models.close"),
        Binding("p", "ask_pull", "Pull", id="models.pull"),
        Binding("d", "remove", "Remove", id="models.remove"),
        Binding("r", "reload", "Refresh", id="models.refresh"),
    ]

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.models: list[ModelInfo] = []
        self.problem: str | None = None
        self.pulling: str | None = None  # the model being pulled
        self.step: PullProgress | None = None
        self.last: Content | None = None  # what the last pull or removal came to

    def dialog_title(self) -> str:
        return "Models"

    def compose_body(self) -> ComposeResult:
        yield Static(id="models-summary")
        yield EmptyState(id="models-empty")
        yield ModelTable(id="models-table")
        name = Entry(id="models-pull-name", placeholder="Model to pull, e.g. qwen3:8b · Enter")
        name.display = False
        yield name
        yield Static(id="models-progress")

    def on_mount(self) -> None:
        self.query_one("#models-empty").display = False
        self.query_one("#models-progress").display = False
        self.table.focus()
        self.load()

    @property
    def table(self) -> ModelTable:
        return self.query_one("#models-table", ModelTable)

    @property
    def name_field(self) -> Input:
        return self.query_one("#models-pull-name", Input)

    # -- reading ----------------------------------------------------------------------

    @work(exclusive=True, group="models", exit_on_error=False)
    async def load(self) -> None:
        try:
            self.models = await self.core.chat.models.installed()
            self.problem = None
        except LLMProblem as problem:
            self.models, self.problem = [], problem.message
        self.restyle()

    # -- drawing ----------------------------------------------------------------------

    def current(self, model: ModelInfo) -> bool:
        chosen = self.core.chat.model
        return model.name in (chosen, f"{chosen}:latest")

    def restyle(self) -> None:
        table = self.table
        chosen = self.selected()
        table.clear()
        table.untrack_all()
        for model in self.models:
            cells = self._cells(model)
            table.add_row(*cells, key=model.name)
            table.track(model.name, [c.plain for c in cells], fit=False)
        table.fit_tracked()
        names = [m.name for m in self.models]
        if names:
            at = [i for i, m in enumerate(self.models) if self.current(m)] or [0]
            row = names.index(chosen.name) if chosen is not None and chosen.name in names else at[0]
            table.move_cursor(row=row)
            if not table.display:
                table.call_after_refresh(table.fit_columns)
        table.display = bool(self.models)
        empty = self.query_one("#models-empty", EmptyState)
        empty.display = not self.models
        empty.update(self._empty_text())
        loaded = sum(m.loaded for m in self.models)
        self.box.border_title = (
            f"Models — {len(self.models)} installed · {loaded} loaded"
            if self.problem is None
            else "Models — Ollama is not answering"
        )
        self.query_one("#models-summary", Static).update(
            Content.assemble(
                ("● ", tone("good")),
                "loaded  ",
                ("▶ ", tone("busy")),
                f"the chat's model ({one_line(self.core.chat.model)})",
            )
        )
        self.show_progress()
        self.refresh_bindings()

    def _cells(self, model: ModelInfo) -> list[Cell]:
        mark = Text()
        mark.append("▶" if self.current(model) else " ", self.ink(tone("busy")))
        mark.append("●" if model.loaded else " ", self.ink(tone("good")))
        return [
            cell(mark),
            cell(one_line(model.name), "bold" if self.current(model) else ""),
            cell(model.parameter_size or "?"),
            cell(context_text(model.context_length)),
            cell(size_text(model.size)),
            cell(model.quantization or "?", self.ink(tone("muted"))),
            cell(model.family or "?", self.ink(tone("muted"))),
            cell(capabilities_text(model)),
        ]

    def _empty_text(self) -> Content:
        if self.problem is not None:
            return Content.assemble((one_line(self.problem), tone("bad")))
        return Content.assemble("No model installed.\n", ("p pulls one, e.g. qwen3:8b.", "dim"))

    def show_progress(self) -> None:
        line = self.query_one("#models-progress", Static)
        if self.pulling is not None:
            step = self.step
            bar = "starting…" if step is None else progress_bar(step)
            status = "" if step is None or step.percent is None else f"{one_line(step.status)}\n"
            line.update(
                Content.assemble(
                    ("Pulling ", "bold"),
                    (one_line(self.pulling), "bold"),
                    ("  Esc stops; pulling again continues\n", "dim"),
                    status,
                    (bar, tone("busy")),
                )
            )
        elif self.last is not None:
            line.update(self.last)
        line.display = self.pulling is not None or self.last is not None

    # -- pulling and removing ---------------------------------------------------------

    @work(exclusive=True, group="models-pull", exit_on_error=False)
    async def pull(self, name: str) -> None:
        self.pulling, self.step, self.last = name, None, None
        self.show_progress()
        self.refresh_bindings()
        try:
            async for step in self.core.chat.models.pull(name):
                self.step = step
                self.show_progress()
            self.last = Content.assemble(("✓ ", tone("good")), f"pulled {one_line(name)}")
        except LLMProblem as problem:
            self.last = Content.assemble(("✗ ", tone("bad")), one_line(problem.message))
        finally:
            if self.last is None:  # cancelled
                at = (
                    ""
                    if self.step is None or self.step.percent is None
                    else (f" at {self.step.percent:.0f}%")
                )
                self.last = Content.assemble(
                    ("■ ", tone("caution")),
                    f"pull of {one_line(name)} stopped{at} — pulling again continues",
                )
            self.pulling = None
            self.show_progress()
            self.refresh_bindings()
        self.load()

    @work(group="models-remove", exit_on_error=False)
    async def remove_model(self, model: ModelInfo) -> None:
        question = Content.assemble(
            "Remove ", (one_line(model.name), "bold"), f" ({size_text(model.size)}) from Ollama?"
        )
        if not await self.app.push_screen_wait(ConfirmDialog("Remove model", question)):
            return
        try:
            await self.core.chat.models.remove(model.name)
            self.last = Content.assemble(("✓ ", tone("good")), f"removed {one_line(model.name)}")
        except LLMProblem as problem:
            self.last = Content.assemble(("✗ ", tone("bad")), one_line(problem.message))
        self.load()

    # -- keys -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.query("#models-pull-name"):  # asked by the footer before it is built
            return action in ("close", "reload")
        typing = self.focused is self.name_field
        if action == "stop_pull":
            return self.pulling is not None
        if action == "cancel_name":
            return typing and self.pulling is None
        if action == "close":
            return self.pulling is None and not typing
        if action == "ask_pull":
            return self.pulling is None and not typing
        if action == "remove":
            return not typing and self.selected() is not None
        if action == "reload":
            return not typing
        return True

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self.refresh_bindings()

    def action_stop_pull(self) -> None:
        self.workers.cancel_group(self, "models-pull")

    def action_ask_pull(self) -> None:
        field = self.name_field
        field.display = True
        field.value = ""
        field.focus()

    def action_cancel_name(self) -> None:
        self.name_field.display = False
        self.table.focus()

    def action_reload(self) -> None:
        self.load()

    def action_remove(self) -> None:
        model = self.selected()
        if model is not None:
            self.remove_model(model)

    @on(Input.Submitted, "#models-pull-name")
    def pull_named(self, event: Input.Submitted) -> None:
        event.stop()
        name = event.value.strip()
        if not name:
            return
        self.name_field.display = False
        self.table.focus()
        self.pull(name)

    @on(DataTable.RowSelected, "#models-table")
    def use_model(self, event: DataTable.RowSelected) -> None:
        event.stop()
        model = self.selected()
        if model is not None:
            self.use(model.name)

    @work(exclusive=True, group="models-use", exit_on_error=False)
    async def use(self, name: str) -> None:
        request = self.UseRequested(name)
        self.post_message(request)
        await request.outcome
        self.restyle()
        self.notify(f"The chat now uses {name}.", timeout=4)

    def selected(self) -> ModelInfo | None:
        table = self.table
        if not self.models or table.row_count != len(self.models):
            return None
        return self.models[min(table.cursor_row, len(self.models) - 1)]
