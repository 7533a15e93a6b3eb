"""The chat's direct commands: what one is (name, arguments, help line, handler), how a /call
is read and shown, and the /help list, made from the same table that dispatches them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from diana.core.api import parse_arguments
from diana.core.api.errors import ArgumentsError
from diana.core.api.shown import names_a_secret, redact
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


class CommandHost(Protocol):
    """What the commands ask of the chat pane that runs them."""

    def show_help(self) -> None: ...
    def show_tools(self) -> None: ...
    def copy_transcript(self) -> None: ...
    async def call_tool(self, text: str) -> None: ...
    async def install_server(self, registry_name: str) -> None: ...
    def decide(self, verb: str, rest: str) -> None: ...
    async def choose_model(self, name: str) -> None: ...
    async def set_think(self, value: str) -> None: ...
    async def open_models(self) -> None: ...
    async def pull_model(self, name: str) -> None: ...
    async def use_prompt(self, target: str, rest: str) -> None: ...
    async def clear_conversation(self) -> None: ...
    async def open_chats(self) -> None: ...
    async def set_system(self, text: str) -> None: ...
    async def set_option(self, rest: str) -> None: ...
    async def attach_image(self, path: str) -> None: ...


def help_table(commands: Sequence[ChatCommand[Host]]) -> Table:
    """/help: each command and what it does, then the stop key and where the keys are."""
    table = Table.grid(padding=(0, 2))
    for command in commands:
        table.add_row(Text(command.usage, style="bold"), command.help)
    table.add_row(Text("Esc", style="bold"), "stop the reply being written")
    table.add_row(
        Text("F1", style="bold"),
        "every key of the pane in use, and the global ones (F2 to F6: the panes)",
    )
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


# The chat's commands, in /help's order: this table is both the dispatch and the /help list.
CHAT_COMMANDS: tuple[ChatCommand[CommandHost], ...] = (
    ChatCommand(
        "/tools", "", "list the tools the agents provide", lambda pane, _, __: pane.show_tools()
    ),
    ChatCommand(
        "/call",
        "TOOL {json}",
        'call a tool, e.g. /call get_current_time {"timezone": "UTC"}',
        lambda pane, _, rest: pane.call_tool(rest),
    ),
    ChatCommand(
        "/install",
        "NAME",
        "add a server from the MCP Registry (tested, after your approval)",
        lambda pane, _, rest: pane.install_server(rest),
    ),
    ChatCommand(
        "/approve",
        "ID",
        "approve a proposal and run it",
        lambda pane, _, rest: pane.decide("approve", rest),
    ),
    ChatCommand(
        "/reject",
        "ID [reason]",
        "reject a proposal",
        lambda pane, _, rest: pane.decide("reject", rest),
    ),
    ChatCommand(
        "/model",
        "[NAME]",
        "list the installed models, or switch to one",
        lambda pane, _, rest: pane.choose_model(rest),
    ),
    ChatCommand(
        "/models",
        "",
        "the Models view: what each model can do; pull, remove or choose one (Ctrl+L)",
        lambda pane, _, __: pane.open_models(),
    ),
    ChatCommand(
        "/pull",
        "NAME",
        "pull a model from Ollama's library, its progress shown here",
        lambda pane, _, rest: pane.pull_model(rest),
    ),
    ChatCommand(
        "/think",
        "on|off",
        "ask a thinking model to think (shown folded)",
        lambda pane, _, rest: pane.set_think(rest),
    ),
    ChatCommand(
        "/SERVER:PROMPT",
        "[NAME=VALUE …]",
        "send an MCP server's prompt to the model",
        lambda pane, name, rest: pane.use_prompt(name[1:], rest),
    ),
    ChatCommand(
        "/chats",
        "",
        "the Conversations view: search, open, rename, delete or export one (Ctrl+O)",
        lambda pane, _, __: pane.open_chats(),
    ),
    ChatCommand(
        "/image",
        "PATH",
        "a picture (PNG, JPEG, GIF, WebP) to go with your next message, for a model that "
        "takes images; pasting or dropping its path does the same",
        lambda pane, _, rest: pane.attach_image(rest),
    ),
    ChatCommand(
        "/system",
        "[TEXT|none]",
        "this conversation's own system prompt, after diana's (alone: show it)",
        lambda pane, _, rest: pane.set_system(rest),
    ),
    ChatCommand(
        "/set",
        "[NAME VALUE|default]",
        "an Ollama option for this conversation, e.g. /set temperature 0.2",
        lambda pane, _, rest: pane.set_option(rest),
    ),
    ChatCommand(
        "/clear",
        "",
        "start a new conversation (the old one stays stored)",
        lambda pane, _, __: pane.clear_conversation(),
    ),
    ChatCommand(
        "/copy",
        "",
        "copy the conversation, as text, to the clipboard",
        lambda pane, _, __: pane.copy_transcript(),
        needs_core=False,
    ),
    ChatCommand(
        "/help", "", "show this list", lambda pane, _, __: pane.show_help(), needs_core=False
    ),
)
COMMANDS_BY_NAME = {command.name: command for command in CHAT_COMMANDS if command.completes}
PROMPT_COMMAND = next(command for command in CHAT_COMMANDS if not command.completes)
# What `/` completes to, besides servers' names: each command's name.
COMMANDS = [name[1:] for name in COMMANDS_BY_NAME]
