"""A request of the MCP sub-agent: what it asks (add, remove, test or modify a server, and
how urgently), where it stands (queued, in progress, finished), and what may be shown of it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class RequestKind(StrEnum):
    ADD_SERVER = "add_server"
    REMOVE_SERVER = "remove_server"
    TEST_SERVER = "test_server"
    MODIFY_SERVER = "modify_server"


class RequestPriority(StrEnum):
    """Which queued request runs first: high before normal before low, each in turn."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    @property
    def rank(self) -> int:
        return ("high", "normal", "low").index(self.value)


class RequestState(StrEnum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


OPEN_STATES = frozenset({RequestState.QUEUED, RequestState.IN_PROGRESS})


class RequestFailed(Exception):
    """Why a request failed, in words a person (or the model) can act on."""


class UnknownRequest(LookupError):
    def __init__(self, request_id: str) -> None:
        super().__init__(f'no sub-agent request "{request_id}"')
        self.request_id = request_id


class NotCancellable(Exception):
    """The request has finished, or is writing the file and will finish in a moment."""


@dataclass(eq=False)
class SubagentRequest:
    """One piece of work: what to do, to which server, and how far it got."""

    id: str
    kind: RequestKind
    server: str
    config: dict[str, Any] | None  # the entry as given (before ${VAR} expansion), add/modify/test
    created_at: datetime
    updated_at: datetime
    origin: str = "api"
    priority: RequestPriority = RequestPriority.NORMAL
    state: RequestState = RequestState.QUEUED
    progress: int = 0
    message: str = "queued"
    tools: list[dict[str, str]] | None = None  # what a test connection found
    stderr_tail: list[str] | None = None  # the last lines of a failed test server's stderr
    # Run before the test: installs what the entry runs (a PyPI server's virtual environment)
    # and gives the program to run in its place; None: nothing to install.
    prepare: Callable[[], Awaitable[str]] | None = field(default=None, repr=False)
    cancellable: bool = True  # False once the file is being written
    cancel_requested: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def public(self) -> dict[str, Any]:
        """What may be shown or returned to the model: never the env or header values."""
        shown: dict[str, Any] = {
            "request_id": self.id,
            "kind": self.kind.value,
            "server": self.server,
            "priority": self.priority.value,
            "state": self.state.value,
            "progress": self.progress,
            "message": self.message,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "origin": self.origin,
        }
        if self.tools is not None:
            shown["tools"] = self.tools
        if self.stderr_tail:
            shown["stderr_tail"] = self.stderr_tail
        return shown
