"""One MCP server as diana sees it: its config (what may be shown), its state and its tools.

Made by the MCP manager; shown by the MCP Servers pane and the server's detail view; printed
by `diana servers`; written by a running app for `diana` beside it to read, as ``public()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any


class ServerStatus(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    READY = "ready"
    ERROR = "error"


@dataclass(frozen=True)
class ServerLog:
    """One message the server logged to diana (notifications/message)."""

    at: datetime
    level: str
    logger: str | None
    text: str

    def public(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "level": self.level,
            "logger": self.logger,
            "text": self.text,
        }


@dataclass(frozen=True)
class ServerTool:
    """One tool a server lists: its name as offered to the model (None when it was
    rejected), the server's own name for it, and how risky diana judged it."""

    server_tool: str
    name: str | None = None
    description: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    risk: str | None = None


@dataclass(frozen=True, kw_only=True)
class ServerInfo:
    name: str
    transport: str
    # What it runs (stdio) or where it is (HTTP), as written: never an env or header value.
    command: str | None = None
    args: list[str] | None = None
    url: str | None = None
    env: list[str] | None = None  # the variables' names only
    headers: list[str] | None = None  # the headers' names only
    auth: str | None = None  # the OAuth grant, if it signs in
    timeout: float
    status: str  # ready, connected, connecting, disconnected, error or disabled
    agent: str
    tool_count: int = 0
    last_error: str | None = None
    last_error_at: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    stderr_tail: list[str] = field(default_factory=list)
    connect_latency_ms: float | None = None
    protocol_version: str | None = None
    calls: int = 0
    errors: int = 0
    attempts: int = 0
    retry_in_s: float | None = None  # until the next attempt of a server that is down
    retry_delay_s: float | None = None
    sign_in_needed: bool = False
    more_scope: str | None = None  # asked for mid-session beyond its grant: i signs in again
    sign_in_url: str | None = None
    signing_in: bool = False
    roots: list[str] = field(default_factory=list)
    log_level: str = "info"
    logs: list[dict[str, Any]] = field(default_factory=list)
    tools: list[ServerTool] = field(default_factory=list)

    @property
    def disabled(self) -> bool:
        return self.status == "disabled"

    def public(self) -> dict[str, Any]:
        """As JSON: every field, the config's only where the server has them."""
        shown: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in _CONFIG_ONLY_IF_SET and not value:
                if not (item.name == "args" and self.command):  # a command's args: even none
                    continue
            shown[item.name] = value
        shown["tools"] = [tool.__dict__ for tool in self.tools]
        return shown

    @classmethod
    def from_public(cls, shown: dict[str, Any]) -> ServerInfo:
        """Read back what ``public`` gave (keys it does not know are left out)."""
        known = {item.name for item in fields(cls)}
        values = {key: value for key, value in shown.items() if key in known}
        values["tools"] = [ServerTool(**tool) for tool in shown.get("tools", [])]
        return cls(**values)


_CONFIG_ONLY_IF_SET = frozenset({"command", "args", "url", "env", "headers", "auth"})
