"""The `diana-tui` app: five panes over one core Core; the actions it carries out for its
widgets are in tui/actions.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from diana.core.api import Core, load_servers, load_settings, load_tools
from diana.core.api.errors import CloseError, ConfigError, StorageError
from diana.core.api.shown import printable
from diana.core.api.types import MCP_SERVERS_FILE, TOOLS_FILE, Elicitation, Paths
from diana.core.api.types import FormAnswer as Answer
from diana.core.events import Notice, Subscription
from diana.core.ports import Ports
from diana.core.profiles import Profile
from rich.cells import cell_len
from rich.segment import Segment
from textual import work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.cache import LRUCache
from textual.color import Color
from textual.css.model import RuleSet
from textual.css.stylesheet import Stylesheet
from textual.css.types import CSSLocation
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.screen import Screen
from textual.worker import Worker, WorkerCancelled, WorkerFailed, WorkerState

from . import (
    CONFIG_DIR_HELP,
    DATA_DIR_HELP,
    EXIT_INTERRUPTED,
    imports_done,
    started,
    styles_dir,
)
from .actions import ActionsApp
from .main_screen import MainScreen
from .messages import CoreEvent, WorkFailed
from .modals.chats import ChatsScreen
from .modals.dialogs import Dialog
from .modals.elicitation import ElicitationScreen
from .modals.help import HelpScreen, keys_in_use
from .modals.memory import MemoryScreen
from .modals.models import ModelsScreen
from .modals.prompts import HumanInputScreen
from .modals.tool_form import ToolFormScreen
from .panes import ApprovalsPane, ChatPane, ExecutionLogPane
from .panes.base import Pane
from .restyle import restyled_once

SEVERITY: dict[str, SeverityLevel] = {"warning": "warning", "error": "error"}


class PrintableLines(LineFilter):
    """The last step of every line any widget draws: what ``printable`` would not let
    through is taken out. Rich and Textual pass ESC and C1 controls on to the terminal
    (they strip only BEL, BS, VT, FF and CR), so a tool result, server name, stderr line or
    model answer holding an escape sequence would be obeyed, not shown. A sequence is
    removed whole when it lies within one piece of text (a BEL-terminated OSC has already
    lost its BEL to Rich: then only its introducer goes). Each line keeps its width."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(control or text.isprintable() for text, _, control in segments):
            return segments
        shown = []
        for segment in segments:
            text, style, control = segment
            # A tab or newline left in a line is as zero-width as ESC: it goes, not a space.
            kept = text if control else printable(text.translate(NO_BREAKS), multiline=False)
            if kept != text:
                kept += " " * (cell_len(text) - cell_len(kept))
                segment = Segment(kept, style)
            shown.append(segment)
        return shown


PRINTABLE_LINES = PrintableLines()
NO_BREAKS = str.maketrans("", "", "\t\n")


class ParsedOnceStylesheet(Stylesheet):
    """The app's stylesheet, whose CSS (styles/app.tcss and each widget's default CSS) is
    parsed once per process and set of theme variables, not again by every app made in it
    (the tests and the screenshot script make hundreds). What a parse gives is only read."""

    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._variables_key: tuple[tuple[str, str], ...] | None = None

    def set_variables(self, variables: dict[str, str]) -> None:
        super().set_variables(variables)
        self._variables_key = None

    def _parse_rules(
        self,
        css: str,
        read_from: CSSLocation,
        is_default_rules: bool = False,
        tie_breaker: int = 0,
        scope: str = "",
    ) -> list[RuleSet]:
        if self._variables_key is None:
            self._variables_key = tuple(sorted(self._variables.items()))
        key = (self._variables_key, css, read_from, is_default_rules, tie_breaker, scope)
        rules = _PARSED_CSS.get(key)
        if rules is None:
            rules = super()._parse_rules(css, read_from, is_default_rules, tie_breaker, scope)
            _PARSED_CSS[key] = rules
        return rules


# What each CSS source parsed to, for the few themes an app is made with.
_PARSED_CSS: LRUCache[tuple[Any, ...], list[RuleSet]] = LRUCache(512)


class DianaApp(ActionsApp):
    """DIANA's workbench."""

    CSS_PATH = [str(styles_dir() / "app.tcss")]
    TITLE = "DIANA"
    SUB_TITLE = "workbench"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        # Not in the footer: each pane's border (or, one pane at a time, the pane bar) shows
        # its key, and the footer keeps its width for the keys of the pane in use. Priority:
        # carried out as the key arrives, so the keys typed after it go to the pane it
        # focuses, never to the one that had the focus before.
        Binding("f2", "focus_pane('chat')", "Chat", id="focus.chat", show=False, priority=True),
        Binding(
            "f3",
            "focus_pane('approvals')",
            "Approvals",
            id="focus.approvals",
            show=False,
            priority=True,
        ),
        Binding(
            "f4",
            "focus_pane('servers')",
            "MCP Servers",
            id="focus.servers",
            show=False,
            priority=True,
        ),
        Binding(
            "f5", "focus_pane('agents')", "Agents", id="focus.agents", show=False, priority=True
        ),
        Binding(
            "f6", "focus_pane('log')", "Execution Log", id="focus.log", show=False, priority=True
        ),
        # Shown at every size: the way to every other key.
        Binding("f1", "help", "Help", id="help", key_display="F1", priority=True),
        Binding("question_mark", "help", "Help", id="help.question", show=False),
        # In the footer while it has room: on a small terminal the pane's own keys need it
        # (the key works the same, and the command palette lists it).
        Binding("ctrl+t", "add_tool(False)", "Add tool", id="tools.add"),
        Binding("ctrl+t", "add_tool(True)", "Add tool", id="tools.add_small", show=False),
        # On a small terminal the footer shows F1 Help rather than Quit: the pane's keys
        # take the rest of 80 columns, and the help (and the palette) name Ctrl+Q.
        Binding("ctrl+q", "quit(False)", "Quit", id="quit", priority=True),
        Binding("ctrl+q", "quit(True)", "Quit", id="quit.small", show=False, priority=True),
    ]

    # "starting" until the core is open and the panes are handed it, then "running"; or
    # "failed" (the reason is in the chat). The chat's title says which.
    phase: var[str] = var("starting")

    def __init__(self, paths: Paths, **runtime_options: Any) -> None:
        """``runtime_options`` go to Core.open (an injected clock, id maker, backoff)."""
        super().__init__()
        self.stylesheet = ParsedOnceStylesheet(variables=self.get_css_variables())
        self.paths = paths
        self.runtime_options = runtime_options
        self.core: Core | None = None
        self.subscription: Subscription | None = None
        self.startup_error: str | None = None
        self.close_error: str | None = None  # what failed to stop, printed after the screen
        self.interrupted = False  # by SIGINT: Ctrl-C before the screen took the keys, kill -INT
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing = False

    def get_default_screen(self) -> MainScreen:
        return self.main

    @cached_property
    def main(self) -> MainScreen:
        """The workbench: the screen under every dialog."""
        return MainScreen(id="main")

    def get_line_filters(self) -> Sequence[LineFilter]:
        return [*super().get_line_filters(), PRINTABLE_LINES]

    def on_load(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.interrupted:  # before there was a loop to tell
            self.interrupt()

    def sigint(self, _signum: int, _frame: object) -> None:
        """The SIGINT handler while the app runs (main sets it): quit as Ctrl+Q does, and
        exit 130. It may run anywhere in the loop's thread: it only schedules the quitting."""
        self.interrupted = True
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.interrupt)

    def interrupt(self) -> None:
        self.run_worker(self.action_quit(), group="quit")

    def on_mount(self) -> None:
        if self.interrupted:
            return
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: self.run_worker(self.action_quit()))
        loop.add_signal_handler(signal.SIGHUP, lambda: self.run_worker(self.hang_up()))
        # The screen is drawn first and takes keys (Ctrl+Q) while the core starts.
        self.call_after_refresh(self.start_runtime)

    @work(exclusive=True, group="start", exit_on_error=False)
    async def start_runtime(self) -> None:
        """Open the core, then fill the panes; a failure is shown in the chat, one line."""
        try:
            core = await Core.open(
                Profile.APP,
                self.paths.config_dir,
                self.paths.data_dir,
                ports=Ports(
                    ask_person=self.ask_person,
                    answer_server=self.answer_server,
                    server_requests_changed=self.server_requests_changed,
                    sampling_waits=self.sampling_waits,
                ),
                **self.runtime_options,
            )
        except (ConfigError, StorageError) as exc:
            self.failed_to_start(str(exc))
            return
        except Exception as exc:  # anything else at start-up: one line, never a traceback
            self.failed_to_start(f"{type(exc).__name__}: {exc}")
            return
        if self.closing:  # quit while it was opening
            await core.close()
            return
        self.core = core
        self.subscription = core.subscribe()
        screen = self.main
        chat = self.query_one(ChatPane)
        await chat.show_history(await core.chat.open_latest())
        # The log's history is on screen before the first live event: none is missed,
        # none is shown twice.
        await self.query_one(ExecutionLogPane).open(core)
        for pane in screen.panes:  # each fills itself, in its own workers
            pane.core = core
        self.pump_events(self.subscription)
        for notice in core.notices:
            self.notify(notice, severity="warning", timeout=10)
        self.query_one("#chat-input").focus()
        self.phase = "running"
        # What start-up made lives as long as the app: kept out of the collector's full
        # passes, which otherwise hold a key up for 200 ms now and then under a flood of
        # log rows (bench/bench_log.py: the longest pause 211 ms, frozen 67 ms).
        gc.freeze()
        started()  # and the collector, off while the app started, runs again

    def on_approvals_pane_first_read(self, _event: ApprovalsPane.FirstRead) -> None:
        # The proposals pending at start, read by the pane in a worker once the core is
        # open, are kept out of the collector's full passes as what start-up made is: ten
        # thousand made each full pass take 30 to 150 ms (bench_approvals.py --f3).
        gc.freeze()

    def failed_to_start(self, problem: str) -> None:
        self.startup_error = problem
        started()
        self.query_one(ChatPane).show_startup_error(problem)
        self.phase = "failed"

    async def ask_person(self, question: str, choices: list[str]) -> str | None:
        """request_human_input: a modal with the model's question; None if dismissed."""
        answered: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def done(answer: str | None) -> None:
            if not answered.done():
                answered.set_result(answer)

        asked = HumanInputScreen(question, choices)
        asked.held = True
        self.push_screen(asked, done)
        return await answered

    async def answer_server(self, request: Elicitation) -> Answer:
        """An MCP server asks the person something: a modal naming the server, one at a time
        (the core asks them in turn) saying how many more wait. Cancelled (the call ended,
        no answer in time, or diana is stopping), the modal goes."""
        answered: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        waiting = self.core.elicitations_waiting() if self.core is not None else 0
        screen = ElicitationScreen(request, waiting=waiting)
        screen.held = True

        def done(answer: Answer | None) -> None:
            if not answered.done():
                answered.set_result(answer or Answer("cancel"))

        self.push_screen(screen, done)
        try:
            return await answered
        except asyncio.CancelledError:
            if screen.is_attached:
                screen.dismiss(Answer("cancel"))
            raise

    def server_requests_changed(self) -> None:
        """More or fewer servers' requests wait: the one asked says how many."""
        if self.core is None:
            return
        for screen in self.screen_stack:
            if isinstance(screen, ElicitationScreen) and screen.declinable:
                screen.show_waiting(self.core.elicitations_waiting())

    @work(exclusive=True, group="events", exit_on_error=False)
    async def pump_events(self, subscription: Subscription) -> None:
        """Hand each core event, in order, to what shows it: a message to every widget
        whose ``EVENTS`` names the event's type (the pane that owns that data, the screen
        on top), a toast for a notice. Nothing is awaited here: slow work is the
        receivers', in their workers, so a burst of one kind never holds up another."""
        main = self.main
        receivers: list[Any] = [main, *main.panes]
        async for event in subscription:
            if isinstance(event, Notice):
                self.notify(event.message, severity=SEVERITY.get(event.level, "information"))
                continue
            on_top = [self.screen] if self.screen is not main else []
            for receiver in receivers + on_top:
                if isinstance(event, getattr(receiver, "EVENTS", ())):
                    receiver.post_message(CoreEvent(event))

    def sampling_waits(self, proposal: str, server: str) -> None:
        """A server's request to the local model waits in Approvals: said, wherever the
        person is looking (the call that made it waits too)."""
        self.notify(
            f"MCP server {server} asks the local model to write a reply: proposal {proposal} "
            "waits in Approvals (F3)",
            severity="warning",
            timeout=10,
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            if worker.group == "start" and self.phase == "starting":
                self.failed_to_start(f"{type(worker.error).__name__}: {worker.error}")
            self.report_failure(worker.name or "a background job", worker.error)

    def on_work_failed(self, event: WorkFailed) -> None:
        self.report_failure(event.what, event.error)

    def report_failure(self, what: str, error: BaseException) -> None:
        """The one place where a failure in the UI's own work is reported: log and toast."""
        if self.core is not None:
            self.core.log_event(
                "ui.failure", "error", what=what, error=f"{type(error).__name__}: {error}"
            )
        self.notify(f"{what} failed: {type(error).__name__}: {error}", severity="error", timeout=10)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("add_tool", "quit"):  # one of their two bindings, by the terminal's size
            screen = self.screen
            small = isinstance(screen, MainScreen) and screen.compact
            return parameters == (small,)
        return True

    def action_add_tool(self, _small: bool = False) -> None:
        """The form that writes a new local tool into tools.json."""
        if self.core is None:
            return

        def added(name: str | None) -> None:
            if name is not None:
                self.notify(f"{name} added to tools.json; it is callable in a moment", timeout=4)

        self.push_screen(ToolFormScreen(self.core.local_tools_dir), added)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if self.core is not None and not isinstance(screen, MemoryScreen):
            yield SystemCommand(
                "Memory",
                "The facts DIANA remembers: search them, see one in full, forget one",
                self.action_open_memory,
            )
        if self.core is not None and not isinstance(screen, ChatsScreen):
            yield SystemCommand(
                "Conversations",
                "Every conversation kept: search, open, rename, delete or export one",
                self.action_open_chats,
            )
        if self.core is not None and not isinstance(screen, ModelsScreen):
            yield SystemCommand(
                "Models",
                "The models Ollama has, what each can do; pull, remove or choose one",
                self.action_open_models,
            )

    def action_open_chats(self) -> None:
        """The Conversations view (Ctrl+O or /chats in the chat, or the command palette)."""
        if self.core is not None and not isinstance(self.screen, ChatsScreen):
            self.push_screen(ChatsScreen(self.core))

    def action_open_memory(self) -> None:
        """The Memory view (m in Agents, or the command palette)."""
        if self.core is not None and not isinstance(self.screen, MemoryScreen):
            self.push_screen(MemoryScreen(self.core))

    def action_help(self) -> None:
        """The keys of the pane or view in use, and the global ones (F1 again closes)."""
        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
        else:
            self.push_screen(HelpScreen(keys_in_use(self.screen)))

    def action_open_models(self) -> None:
        """The Models view (Ctrl+L or /models in the chat, or the command palette)."""
        if self.core is not None and not isinstance(self.screen, ModelsScreen):
            self.push_screen(ModelsScreen(self.core))

    def action_focus_pane(self, pane_id: str) -> None:
        if not self.close_views():
            return
        if pane_id == "approvals":
            self.query_one(ApprovalsPane).select_newest()
        pane = self.query_one(f"#{pane_id}", Pane)
        with restyled_once(self.stylesheet):
            self.main.show_pane(pane)
            # At once (Widget.focus would wait for the keys already queued).
            self.main.set_focus(pane.focus_target)

    def close_views(self) -> bool:
        """Back to the workbench: every view opened over it (a pane's detail, policy, Memory,
        usage, a form, the palette) is closed as Esc would close it, so no key acts on a view
        left behind its pane. A question the core waits on is not: it keeps the keys, and
        False says so."""
        while self.screen is not self.main:
            screen = self.screen
            if isinstance(screen, Dialog):
                if screen.held:
                    self.notify("Answer the question first (Esc declines it).", timeout=4)
                    return False
                screen.action_close()
            else:
                self.pop_screen()
            if self.screen is screen:  # it would not go
                return False
        return True

    async def hang_up(self) -> None:
        """The terminal is gone: stop the servers and write the log out, then leave at once
        (restoring a terminal that no longer exists could wait forever)."""
        await self.close_runtime()
        os._exit(128 + signal.SIGHUP)

    def action_help_quit(self) -> None:
        """Ctrl+C, where nothing copies: say how to quit (Textual's own finds no plain
        ``quit`` action among the bindings, which are per terminal size here)."""
        self.notify("Press [b]Ctrl+Q[/b] to quit the app", title="Do you want to quit?")

    async def action_quit(self, _small: bool = False) -> None:
        await self.close_runtime()
        self.exit(0)

    async def on_unmount(self) -> None:
        await self.close_runtime()

    async def close_runtime(self) -> None:
        self.closing = True
        for worker in self.workers:
            if worker.group == "start":  # still opening: what it opened is released
                worker.cancel()
                with contextlib.suppress(WorkerCancelled, WorkerFailed):
                    await worker.wait()
        core, self.core = self.core, None
        if self.subscription is not None:
            self.subscription.close()
        if core is not None:
            try:
                await core.close()
            except Exception as exc:  # every part was still closed; say what failed
                self.close_error = (
                    str(exc) if isinstance(exc, CloseError) else (f"{type(exc).__name__}: {exc}")
                )


def make_app(
    config_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    **runtime_options: Any,
) -> DianaApp:
    """The one factory: builds the app from config for the CLI, tests and screenshots.
    Reads the settings first, so a malformed config raises ConfigError before any screen."""
    paths = Paths.resolve(config_dir, data_dir)
    load_settings(paths)
    load_servers(paths.config_file(MCP_SERVERS_FILE))
    load_tools(paths.config_file(TOOLS_FILE))
    return DianaApp(paths, **runtime_options)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        imports_done()  # until here Ctrl-C exited at once (tui/__init__.py)
        return run_app(argv)
    except KeyboardInterrupt:  # Ctrl-C before the screen takes the keys, or SIGINT
        _problem("interrupted")
        return EXIT_INTERRUPTED


def run_app(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="diana-tui", description="DIANA's workbench.")
    parser.add_argument(
        "--config-dir",
        metavar="DIR",
        help=CONFIG_DIR_HELP,
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help=DATA_DIR_HELP,
    )
    args = parser.parse_args(argv)
    try:
        app = make_app(args.config_dir, args.data_dir)
    except ConfigError as exc:
        _problem(f"config error in {exc}")
        return 2
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when ignored (nohup, `&`)
        signal.signal(signal.SIGINT, app.sigint)
    try:
        app.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    if app.interrupted:
        if app.close_error:
            _problem(f"while stopping: {app.close_error}")
        _problem("interrupted")
        return EXIT_INTERRUPTED
    if app.startup_error:
        _problem(app.startup_error)
        return 2
    if app.close_error:
        _problem(f"while stopping: {app.close_error}")
        return 1
    return app.return_code or 0


def _problem(message: str) -> None:
    """One line on stderr, once the screen is gone: nothing in it a terminal would obey."""
    print(f"diana-tui: {printable(message, multiline=False)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
