"""One MCP server's state while diana runs it: its status, tools, process, errors, counters,
retries and sign-in, as its connection keeps them up to date (the manager makes a
``ServerInfo`` of them for the app and `diana servers`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

import mcp_types as types

from .info import ServerLog, ServerStatus
from .stdio import ProcessExit

STDERR_LINES = 200
LOG_KEPT = 500  # the server's own log messages kept (notifications/message)


@dataclass
class ServerState:
    """Everything known about one server, for status lines and the detail view."""

    status: ServerStatus = ServerStatus.DISCONNECTED
    tools: list[types.Tool] = field(default_factory=list)
    tools_listed_at: datetime | None = None  # when ``tools`` was last listed
    last_error: str | None = None
    last_error_at: datetime | None = None
    pid: int | None = None
    exit: ProcessExit | None = None
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    logs: deque[ServerLog] = field(default_factory=lambda: deque(maxlen=LOG_KEPT))
    connect_latency_ms: float | None = None
    protocol_version: str | None = None
    calls: int = 0
    errors: int = 0
    attempts: int = 0
    next_retry_at: float | None = None  # time.monotonic() of the next automatic attempt
    retry_delay: float | None = None  # the backoff chosen for that attempt, in seconds
    last_attempt_ok: bool | None = None  # how the latest finished attempt ended
    # OAuth: the server wants a person to sign in (not retried until asked), and the
    # authorization URL while a sign-in is under way (to copy if no browser opened).
    sign_in_needed: bool = False
    sign_in_url: str | None = None
    # The scope it asked for mid-session beyond its grant, until a person signs in again.
    more_scope: str | None = None
