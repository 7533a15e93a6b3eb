from __future__ import annotations

import json
from dataclasses import dataclass

from rich.console import RenderableType
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.widgets import Input, RichLog
from textual.worker import Worker

from core.arguments import ArgumentsError, parse_arguments
from core.models import ToolResult
from core.runtime import Runtime
from core.telemetry import SECRET_KEY as SECRET_HINT
from core.telemetry import redact

from .base import Pane

PROMPT = "\u276f "  # heavy right-pointing angle: marks what the person typed

HELP = [
    ("/tools", "list the tools the agents provide"),
    ("/call TOOL {json}", 'call a tool, e.g. /call get_current_time {"timezone": "UTC"}'),
    ("/help", "show this list"),
]


@dataclass(frozen=True)
class ParsedCall:
    tool: str
    arguments: dict[str, object]


class CommandError(Exception):
    """A direct command that cannot run as typed; shown as one line."""


def parse_call(text: str) -> ParsedCall:
    """Parse the part after ``/call``: a tool name, then an optional JSON object."""
    parts = text.strip().split(maxsplit=1)
    if not parts:
        raise CommandError('usage: /call TOOL {"argument": "value"}')
    try:
        arguments = parse_arguments(parts[1] if len(parts) > 1 else None)
    except ArgumentsError as exc:
        raise CommandError(f"arguments: {exc}") from None
    return ParsedCall(parts[0], arguments)


def shown_command(text: str) -> str:
    """The typed line as it may be shown: /call arguments with secret values hidden."""
    name, _, rest = text.partition(" ")
    if name != "/call":
        return text
    try:
        call = parse_call(rest)
    except CommandError:
        return text if not SECRET_HINT.search(rest) else f"{name} {rest.split()[0]} …"
    if not call.arguments:
        return text
    return f"{name} {call.tool} {json.dumps(redact(call.arguments), ensure_ascii=False)}"


class ChatPane(Pane):
    """The conversation and the input. Direct commands run through the core's orchestrator."""

    PANE_TITLE = "Chat"
    FOCUS_KEY = "F2"
    runtime: Runtime | None = None
    last_command: Worker[None] | None = None

    def compose(self) -> ComposeResult:
        yield RichLog(id="chat-transcript", wrap=True, markup=False, auto_scroll=True)
        yield Input(
            id="chat-input",
            classes="pane-body",
            placeholder="Type a direct command — /help lists them",
        )

    def on_mount(self) -> None:
        super().on_mount()
        self.say(
            Text.assemble(
                ("DIANA", "bold"),
                " — the language model is not connected in "
                "this version; direct commands work. Type ",
                ("/help", "bold"),
                ".",
            )
        )

    def show_startup_error(self, message: str) -> None:
        self.say(Text.assemble(("DIANA could not start: ", "bold red"), (message, "red")))
        self.say(
            Text("Fix the problem above, then restart diana-tui. Ctrl+Q quits.", style="yellow")
        )

    def say(self, renderable: RenderableType) -> None:
        self.query_one("#chat-transcript", RichLog).write(renderable)

    @on(Input.Submitted, "#chat-input")
    def submit(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.clear()
        if text:
            self.say(Text.assemble((PROMPT, "bold cyan"), (shown_command(text), "bold")))
            self.last_command = self.run_command(text)

    @work(group="command", exit_on_error=False)
    async def run_command(self, text: str) -> None:
        if not text.startswith("/"):
            self.say(
                Text(
                    "No language model is connected: only direct commands work. Type /help.",
                    style="yellow",
                )
            )
            return
        name, _, rest = text.partition(" ")
        if name == "/help":
            self.show_help()
        elif name == "/tools":
            self.show_tools()
        elif name == "/call":
            await self.call_tool(rest)
        else:
            self.say(Text(f"Unknown command {name}. Type /help.", style="yellow"))

    def show_help(self) -> None:
        table = Table.grid(padding=(0, 2))
        for command, meaning in HELP:
            table.add_row(Text(command, style="bold"), meaning)
        self.say(table)

    def show_tools(self) -> None:
        if self.runtime is None:
            return
        table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False)
        for column in ("tool", "agent", "risk", "description"):
            table.add_column(column, style="bold" if column == "tool" else "")
        for definition, agent in self.runtime.orchestrator.tool_definitions():
            table.add_row(definition.name, agent, definition.risk.value, definition.description)
        self.say(table)

    async def call_tool(self, text: str) -> None:
        if self.runtime is None:
            return
        try:
            call = parse_call(text)
        except CommandError as exc:
            self.say(Text(str(exc), style="red"))
            return
        result = await self.runtime.orchestrator.execute(call.tool, call.arguments, origin="chat")
        self.show_result(call.tool, result)

    def show_result(self, tool: str, result: ToolResult) -> None:
        if result.success:
            self.say(Text.assemble(("✓ ", "green"), (tool, "bold")))
            if isinstance(result.data, str):
                self.say(result.data)
            else:
                self.say(JSON(json.dumps(result.data, default=str, ensure_ascii=False)))
        else:
            code = result.error_code.value if result.error_code else "failed"
            self.say(
                Text.assemble(
                    ("✗ ", "red"), (tool, "bold"), f" {code}: ", (result.error or "", "red")
                )
            )
