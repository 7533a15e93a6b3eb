"""The chat's direct commands: what one is (name, arguments, help line, handler), how a /call
is read and shown, and the /help list, made from the same table that dispatches them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from diana.core.arguments import ArgumentsError, parse_arguments
from diana.core.telemetry import names_a_secret, redact
from rich.table import Table
from rich.text import Text

Host = TypeVar("Host")  # what a command runs in: the chat pane

ADDITION_TOOL = "mcp_request_server_addition"  # what /install calls


@dataclass(frozen=True)
class ChatCommand(Generic[Host]):
    """One slash command: its /help line and what runs it, given the pane, the name as typed
    and the rest of the line."""

    name: str  # as typed, with its slash: "/call"
    arguments: str  # as /help shows them: "TOOL {json}"
    help: str
    run: Callable[[Host, str, str], Awaitable[None] | None]
    needs_core: bool = True  # False: works while the core is missing (/help, /copy)

    @property
    def usage(self) -> str:
        return f"{self.name} {self.arguments}".rstrip()

    @property
    def completes(self) -> bool:
        """Offered when `/` is typed (a server's prompt is offered by the server's name)."""
        return ":" not in self.name


def help_table(commands: Sequence[ChatCommand[Host]]) -> Table:
    """/help: each command and what it does, then the stop key."""
    table = Table.grid(padding=(0, 2))
    for command in commands:
        table.add_row(Text(command.usage, style="bold"), command.help)
    table.add_row(Text("Esc", style="bold"), "stop the reply being written")
    return table


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
        return text if not names_a_secret(rest) else f"{name} {rest.split()[0]} …"
    if not call.arguments:
        return text
    return f"{name} {call.tool} {json.dumps(redact(call.arguments), ensure_ascii=False)}"
