"""The "Add server" form of the MCP Servers pane.

It only asks: what the person typed is checked with mcp-servers.json's rules (a mistake keeps
the form open, everything typed, and names the field) and handed back as a name and a config;
the pane queues it with the MCP sub-agent, which tests the server before writing the file.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from diana.core.api import check_server, parse_json
from diana.core.api.errors import ConfigError, JSONProblem
from diana.core.api.types import MCP_SERVERS_FILE
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Label, Select, TextArea

from ..entry import Entry
from .dialogs import FormDialog, FormError

REMOTE_TRANSPORTS = ("streamable-http", "sse")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ServerFormResult:
    """The server to add: its name and its mcp-servers.json entry (without the name)."""

    name: str
    config: dict[str, Any]
    # What must be installed before it runs (a registry server's virtual environment).
    prepare: Callable[[], Awaitable[str]] | None = field(default=None, compare=False)


def parse_args(text: str) -> list[str]:
    """Arguments typed space-separated (shell quoting works) or as a JSON list of strings."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            value = parse_json(text)
        except JSONProblem as exc:
            raise FormError(f"args: {exc}") from None
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise FormError("args: a JSON list must hold only strings")
        return value
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise FormError(f"args: {exc}") from None


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and lines starting with # are skipped."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not _ENV_NAME.match(key):
            raise FormError(f"env line {number}: expected KEY=VALUE, got {line[:40]!r}")
        env[key] = value.strip()
    return env


def form_entry(
    name: str,
    command: str,
    args: str,
    env: str,
    url: str,
    transport: str,
    timeout: str = "",
) -> ServerFormResult:
    """What was typed as one server entry, checked like mcp-servers.json; FormError names the
    field that is wrong."""
    name, command, url = name.strip(), command.strip(), url.strip()
    if not name:
        raise FormError("name: give the server a name (letters, digits, - _ .)")
    if command and url:
        raise FormError("command / URL: give a command for a local server or a URL, not both")
    config: dict[str, Any]
    if command:
        config = {"command": command, "args": parse_args(args)}
        variables = parse_env(env)
        if variables:
            config["env"] = variables
    elif url:
        if args.strip() or env.strip():
            raise FormError("args / env: only a local server (a command) takes them")
        config = {"url": url, "transport": transport}
    else:
        raise FormError("command: give a command to run, or the URL of a remote server")
    if timeout.strip():
        try:
            config["timeout"] = float(timeout)
        except ValueError:
            raise FormError(f"timeout: {timeout.strip()!r} is not a number of seconds") from None
    try:
        check_server(name, config, MCP_SERVERS_FILE)
    except ConfigError as exc:
        raise FormError(exc.message.removeprefix(f'server "{name}": ')) from None
    return ServerFormResult(name, config)


class ServerFormScreen(FormDialog[ServerFormResult | None]):
    """Returns the server to add, or None if the person cancelled."""

    BINDINGS = [Binding("ctrl+s", "submit", "Add the server", id="server_form.submit")]
    DIALOG_TITLE = "Add an MCP server"
    ID_PREFIX = "server-form"

    def compose_fields(self) -> ComposeResult:
        yield from self.line("Name", "name", "files")
        yield from self.line("Command (a local server)", "command", "uvx")
        yield from self.line(
            "Arguments: space-separated, or a JSON list",
            "args",
            "mcp-server-time --local-timezone UTC",
        )
        yield Label("Environment: KEY=VALUE lines (${VAR} takes DIANA's own)")
        yield TextArea(id="server-form-env")
        yield Label("…or the URL of a remote server")
        with Horizontal(id="server-form-remote", classes="form-row"):
            yield Entry(id="server-form-url", placeholder="https://example.com/mcp")
            yield Select(
                [(t, t) for t in REMOTE_TRANSPORTS],
                value=REMOTE_TRANSPORTS[0],
                allow_blank=False,
                id="server-form-transport",
            )
        yield Entry(id="server-form-timeout", placeholder="timeout in seconds (default 10)")

    def entry(self) -> ServerFormResult:
        transport = self.query_one("#server-form-transport", Select).value
        return form_entry(
            self.value("name"),
            self.value("command"),
            self.value("args"),
            self.value("env"),
            self.value("url"),
            str(transport),
            self.value("timeout"),
        )

    def submit(self) -> None:
        self.dismiss(self.entry())
