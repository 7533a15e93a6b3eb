"""Ports: what a front end lends the core when it opens it, so the core can reach a person.

The app answers with its dialogs and toasts, `diana` with its terminal; the core knows only
these signatures. Each port is optional: without one, the core says nobody can answer (the
model's question fails, a server's question is declined) or tells nobody (a sampling wait).
They are given once, to ``Runtime.open``, and wired into the parts that use them as those are
built; nothing plugs a callback in afterwards.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .mcp.elicitation_form import Answer, Elicitation


@dataclass(frozen=True)
class Ports:
    """How the core reaches the person in front of this front end."""

    # request_human_input: (question, choices) -> the answer, or None when declined.
    ask_person: Callable[[str, list[str]], Awaitable[str | None]] | None = None
    # A server's question (MCP elicitation) -> the person's answer; one at a time.
    answer_server: Callable[[Elicitation], Awaitable[Answer]] | None = None
    # The number of servers' questions waiting behind the one asked changed.
    server_requests_changed: Callable[[], None] | None = None
    # A server's request to the local model waits for a person: (proposal id, server).
    sampling_waits: Callable[[str, str], None] | None = None
