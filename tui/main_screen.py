"""The workbench screen: five panes at once where the terminal has room, one at a time where
it has not.

Wide (at least ``WIDE`` columns and ``TALL`` rows) every pane is on screen. Smaller, the pane
that holds the focus fills the screen (Textual's maximize), F2 to F6 switch, and a pane bar
under the header names every pane with what it is counting (pending approvals, servers
ready), so nothing waiting for the person is out of sight."""

from __future__ import annotations

from diana.core.events import ConfigChecked
from rich.text import Text
from textual import events, messages
from textual._time import get_time
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.reactive import Reactive, var
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Static

from .footer import KeysFooter
from .messages import CoreEvent
from .panes import AgentsPane, ApprovalsPane, ChatPane, ExecutionLogPane, ServersPane
from .panes.base import Pane
from .restyle import set_class

# The smallest terminal that shows every pane at once with rows to read in each.
WIDE = 140
TALL = 40


class PaneBar(Static):
    """One line: each pane's key, name and badge; the one shown is highlighted."""

    def show(self, panes: list[Pane], shown: Pane | None) -> None:
        line = Text(no_wrap=True, overflow="ellipsis")
        for pane in panes:
            active = pane is shown
            style = "reverse bold" if active else ""
            line.append(f" {pane.FOCUS_KEY} ", style=f"{style} dim" if not active else style)
            line.append(pane.SHORT_TITLE or pane.PANE_TITLE, style=style)
            if pane.badge:
                line.append(f" {pane.badge}", style=f"{style} bold")
            line.append(" ", style=style)
            line.append(" ")
        self.update(line)


class ConfigAlert(Static):
    """A config file that changed and could not be applied, shown until it is fixed: what
    was in force before stays in force meanwhile. Hidden while every file reads well."""

    problems: var[dict[str, str]] = var(dict, always_update=True)

    def checked(self, file: str, problem: str | None) -> None:
        if problem is None:
            self.problems.pop(file, None)
        else:
            self.problems[file] = problem
        self.mutate_reactive(ConfigAlert.problems)

    def watch_problems(self, problems: dict[str, str]) -> None:
        self.display = bool(problems)
        if not problems:
            self.update("")
            return
        files = ", ".join(problems)
        first = next(iter(problems.values()))
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f" ⚠ {files} not applied: ", style="bold")
        line.append(first)
        line.append(" — the last good version stays in force until the file is fixed")
        self.update(line)
        self.tooltip = "\n".join(f"{file}: {problem}" for file, problem in problems.items())


class MainScreen(Screen[None]):
    """The panes, laid out for the terminal's size."""

    ALLOW_IN_MAXIMIZED_VIEW = "#masthead, Footer"
    ESCAPE_TO_MINIMIZE = False  # Esc belongs to the panes (stop a reply, clear a filter)
    EVENTS = (ConfigChecked,)

    compact: var[bool] = var(False)
    # Textual repaints the whole screen when the focus moves or the sub-title changes (the
    # pending count, at each decision); the widgets concerned redraw themselves anyway (the
    # focus restyles them, the header follows its title), and a whole repaint at 160 columns
    # costs a key tens of milliseconds.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    sub_title: Reactive[str | None] = Reactive(None, compute=False, repaint=False)
    # Nor when one pane takes the place of another: the layout that follows redraws what
    # moved, and a whole repaint after it would draw every line a second time.
    maximized: Reactive[Widget | None] = Reactive(None, layout=True, repaint=False)

    _panes: list[Pane] = []
    _laid_out_at = float("-inf")  # when the last whole layout began

    def _refresh_layout(self, size: Size | None = None, scroll: bool = False) -> None:
        if not (scroll and not self._layout_widgets) and (size or self.outer_size):
            self._laid_out_at = get_time()  # a whole layout: every widget is placed anew
        super()._refresh_layout(size, scroll)

    async def _on_layout(self, message: messages.Layout) -> None:
        # A widget asks for a layout in a message the screen reads after the frame it
        # draws next (F3: the footer's keys, the pane bar, the two panes' borders): a
        # layout begun since the message was sent has placed that widget already, and
        # another would only measure and draw the screen a second time.
        if message.time < self._laid_out_at:
            message.stop()
            message.prevent_default()
            return
        await super()._on_layout(message)

    def compose(self) -> ComposeResult:
        with Vertical(id="masthead"):
            yield Header(show_clock=False, icon="◆")
            yield PaneBar(id="pane-bar")
            yield ConfigAlert(id="config-alert")
        with Horizontal(id="top"):
            yield ChatPane(id="chat", classes="pane")
            with Vertical(id="side"):
                yield ApprovalsPane(id="approvals", classes="pane")
                yield ServersPane(id="servers", classes="pane")
                yield AgentsPane(id="agents", classes="pane")
        yield ExecutionLogPane(id="log", classes="pane")
        yield KeysFooter()

    @property
    def panes(self) -> list[Pane]:
        # The five composed panes, found once: a query walks every widget (a long chat's
        # every message), and the pane bar asks at each F-key.
        if not self._panes:
            self._panes = list(self.query(Pane))
        return self._panes

    def on_mount(self) -> None:
        for pane in self.panes:
            self.watch(pane, "badge", self._show_bar, init=False)
        self.watch(self.query_one(ApprovalsPane), "pending", self._show_pending)
        self.compact = self._too_small()
        self._show_bar()

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, ConfigChecked):
            self.query_one(ConfigAlert).checked(event.file, event.problem)

    def _show_pending(self, pending: int) -> None:
        """The header says how many proposals wait, whichever pane is shown."""
        self.sub_title = (
            f"{pending} pending approval{'s' if pending != 1 else ''}" if pending else "workbench"
        )

    def on_resize(self, _event: events.Resize) -> None:
        self.compact = self._too_small()

    def _too_small(self) -> bool:
        width, height = self.app.size
        return width < WIDE or height < TALL

    def watch_compact(self, compact: bool) -> None:
        self.set_class(compact, "-compact")
        for footer in self.query(Footer):  # keys closer together: all of them fit in 80 columns
            footer.compact = compact
            # The pane's own keys need the room; Ctrl+P still opens the palette.
            footer.show_command_palette = not compact
        self.app.refresh_bindings()  # ^t leaves the footer of a small terminal
        if compact:
            self.show_pane(self._pane_of(self.focused) or self.query_one(ChatPane))
        else:
            self.minimize()
        self._show_bar()

    def _watch_maximized(self, previous: Widget | None, maximized: Widget | None) -> None:
        # As Screen's, restyling only what the classes change: the pane shown and the pane
        # hidden alone, not every widget in them (see tui/restyle.py).
        set_class(self, maximized is not None, "-maximized-view")
        if previous is not None:
            set_class(previous, False, "-maximized")
        if maximized is not None:
            set_class(maximized, True, "-maximized")

    def watch_maximized(self) -> None:
        self._show_bar()

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        # The pane of what has the focus now: the news of an earlier focus (F3, then F2 at
        # once) can arrive after the later one, and must not bring its pane back.
        pane = self._pane_of(self.focused)
        if self.compact and pane is not None and self.maximized is not pane:
            self.show_pane(pane)

    def show_pane(self, pane: Pane) -> None:
        """In the one-pane layout, ``pane`` fills the screen (wide, they all show)."""
        if self.compact:
            self.maximize(pane, container=False)

    def _reset_focus(self, widget: Widget, avoiding: list[Widget] | None = None) -> None:
        """Textual moves the focus away from a widget when it hears it was hidden. In the
        one-pane layout that news can come late: F3 hides the chat, F2 at once brings it back
        and focuses its input, then the input hears it was hidden and the focus would go to
        whatever came before it (an inline approval prompt, where a typed `a` approves). A
        widget shown again keeps the focus; one removed, or really hidden, loses it."""
        if not avoiding and self._on_screen(widget):
            return
        super()._reset_focus(widget, avoiding)

    def _on_screen(self, widget: Widget) -> bool:
        nodes = [widget, *widget.ancestors]
        shown = self.maximized is None or self.maximized in nodes
        return (
            shown
            and widget.is_attached
            and all(node.display for node in nodes if isinstance(node, Widget))
        )

    @staticmethod
    def _pane_of(widget: Widget | None) -> Pane | None:
        if isinstance(widget, Pane):
            return widget
        if widget is None:
            return None
        return next((node for node in widget.ancestors if isinstance(node, Pane)), None)

    def _show_bar(self, *_: object) -> None:
        shown = self.maximized if isinstance(self.maximized, Pane) else None
        self.query_one(PaneBar).show(self.panes, shown)
