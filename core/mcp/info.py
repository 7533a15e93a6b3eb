"""One MCP server as diana sees it: its config (what may be shown), its state and its tools.

Made by the MCP manager; shown by the MCP Servers pane and the server's detail view; printed
by `diana servers`; written by a running app for `diana` beside it to read. One pydantic
model serves them all: ``model_dump(mode="json")`` is the JSON they share (a config field
the server does not have is left out), ``model_validate`` reads it back.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
)

# A moment as JSON: its own ISO form (UTC as +00:00), as the shared rows have always held it.
Moment = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str, when_used="json")]


class ServerStatus(StrEnum):
    """Where a server stands: the first five while diana runs it; ``disabled`` when it is
    switched off, ``not started`` when autoStart is false and nothing needed it yet."""

    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    READY = "ready"
    ERROR = "error"
    DISABLED = "disabled"
    NOT_STARTED = "not started"


class ServerLog(BaseModel):
    """One message the server logged to diana (notifications/message)."""

    model_config = ConfigDict(frozen=True)

    at: Moment
    level: str
    logger: str | None
    text: str


class ServerTool(BaseModel):
    """One tool a server lists: its name as offered to the model (None when it was
    rejected), the server's own name for it, and how risky diana judged it."""

    model_config = ConfigDict(frozen=True)

    server_tool: str
    name: str | None = None
    description: str | None = None
    annotations: dict[str, Any] = Field(default_factory=dict)
    risk: str | None = None


class ServerInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

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
    status: ServerStatus
    agent: str
    tool_count: int = 0
    last_error: str | None = None
    last_error_at: Moment | None = None
    pid: int | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    stderr_tail: list[str] = Field(default_factory=list)
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
    roots: list[str] = Field(default_factory=list)
    log_level: str = "info"
    logs: list[ServerLog] = Field(default_factory=list)
    tools: list[ServerTool] = Field(default_factory=list)

    @property
    def disabled(self) -> bool:
        return self.status is ServerStatus.DISABLED

    @model_serializer(mode="wrap")
    def _config_only_if_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Every field; the config's only where the server has them."""
        shown: dict[str, Any] = handler(self)
        for name in _CONFIG_ONLY_IF_SET:
            if not shown.get(name, True) and not (name == "args" and self.command):
                del shown[name]  # a command's args are shown even when there are none
        return shown


_CONFIG_ONLY_IF_SET = ("command", "args", "url", "env", "headers", "auth")
