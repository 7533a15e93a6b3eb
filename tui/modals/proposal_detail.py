"""A proposal in full: its arguments (secrets hidden), reason, origin; a server's request to
the local model as a conversation."""

from __future__ import annotations

import json
from typing import Any

from diana.core.api import asks_sampling
from diana.core.api.shown import estimate_words, ran_words, redact
from diana.core.api.types import Proposal
from rich.json import JSON
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from ..panes.approvals import risk_text
from ..theme import Ink, tone
from .detail import DetailView, heading, local_time


def proposal_summary(proposal: Proposal, ink: Ink) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    confidence = proposal.confidence
    rows: list[tuple[str, Any]] = [
        ("status", proposal.status.value),
        ("tool", proposal.tool),
        ("agent", proposal.agent or "—"),
        ("risk", risk_text(proposal.risk, ink)),
        ("reason", proposal.reason),
        ("confidence", "none given" if confidence is None else f"{confidence}"),
        ("estimated cost", estimate_words(proposal.estimated_cost)),
        *(
            [("cost", ran_words(proposal.cost_units, proposal.ran_ms))]
            if proposal.cost_units is not None
            else []
        ),
        ("origin", proposal.origin),
        ("correlation", proposal.correlation_id),
        ("created", local_time(proposal.created_at)),
    ]
    if proposal.decided_at:
        rows.append(("decided", f"{local_time(proposal.decided_at)} by {proposal.decided_by}"))
    if proposal.reject_reason:
        rows.append(("why rejected", proposal.reject_reason))
    if proposal.error:
        rows.append(("error", Text(proposal.error, style=ink(tone("bad")))))
    if proposal.note:
        rows.append(("stored", proposal.note))
    if proposal.damaged:
        damaged = Text(f"{proposal.damaged}: it cannot run", style=ink(tone("bad", bold=True)))
        rows.append(("damaged", damaged))
    for label, value in rows:
        grid.add_row(label, value)
    return grid


class ProposalDetailScreen(DetailView[Proposal]):
    """One proposal in full: arguments as pretty JSON (secrets hidden), reason, origin."""

    def compose_body(self) -> ComposeResult:
        yield Static(id="proposal-summary")
        arguments = self.info.shown_arguments
        if asks_sampling(self.info.tool, arguments) is not None:
            yield from self.sampling_request(arguments)
            return
        yield heading("Arguments")
        yield Static(JSON(json.dumps(arguments, ensure_ascii=False)), id="proposal-arguments")
        if self.info.result is not None:
            yield heading("Result")
            yield Static(
                JSON(json.dumps(redact(self.info.result), ensure_ascii=False, default=str)),
                id="proposal-result",
            )

    def sampling_request(self, arguments: dict[str, Any]) -> ComposeResult:
        """What a server asks the model, as a person reads a conversation: the system prompt,
        each message under its role, the limits; then the reply once there is one."""
        hints = ", ".join(arguments.get("model_hints") or []) or "none"
        limits = f"up to {arguments['reply_limit']} tokens · model hints: {hints}"
        if arguments.get("temperature") is not None:
            limits += f" · temperature {arguments['temperature']}"
        yield heading(f"MCP server {arguments['server']} asks the local model")
        yield Static(limits, id="sampling-limits")
        if arguments.get("system_prompt"):
            yield heading("System prompt")
            yield Static(Content(arguments["system_prompt"]), classes="sampling-text")
        for message in arguments["messages"]:
            images = len(message.get("images") or [])
            extra = f" · {images} image{'' if images == 1 else 's'}" if images else ""
            yield heading(f"{message['role'].capitalize()}{extra}")
            yield Static(Content(message["text"]), classes="sampling-text")
        result = redact(self.info.result)
        if isinstance(result, dict) and "text" in result:
            tokens = result.get("counted") or {}
            yield heading(f"Reply · {result.get('model')} · {tokens.get('reply', '?')} tokens")
            yield Static(Content(str(result["text"])), classes="sampling-text")

    def dialog_title(self) -> str:
        return f"Proposal {self.info.id}"

    def on_mount(self) -> None:
        self.restyle()

    def restyle(self) -> None:
        self.query_one("#proposal-summary", Static).update(proposal_summary(self.info, self.ink))
