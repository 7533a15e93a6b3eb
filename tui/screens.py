"""Modal screens opened from the panes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.json import JSON
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import Input, Static

from core.events import ServerStatusChanged

from .dialogs import Dialog
from .messages import CoreEvent
from .panes.approvals import risk_text
from .panes.servers import status_label
from .theme import Ink, ThemeAware, tone

MUTED = tone("muted")


def server_summary(info: dict[str, Any], ink: Ink) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    where = info.get("url") or " ".join([info.get("command") or "", *info.get("args", [])])
    badge, style = status_label(info)
    rows: list[tuple[str, Any]] = [
        ("status", Text(badge, style=ink(style))),
        ("transport", info["transport"]),
        ("runs" if info["transport"] == "stdio" else "url", where),
    ]
    if info.get("env"):
        rows.append(("env", ", ".join(f"{k}=***" for k in info["env"])))
    if info.get("headers"):
        rows.append(("headers", ", ".join(f"{k}: ***" for k in info["headers"])))
    rows += [
        ("pid", str(info["pid"]) if info["pid"] else "—"),
        (
            "exit",
            info["exit_signal"]
            or (f"code {info['exit_code']}" if info["exit_code"] is not None else "—"),
        ),
        (
            "last error",
            Text(info["last_error"] or "—", style=ink(tone("bad")) if info["last_error"] else ""),
        ),
        ("error at", _local_time(info["last_error_at"])),
        ("connect", f"{info['connect_latency_ms']} ms" if info["connect_latency_ms"] else "—"),
        ("protocol", info["protocol_version"] or "—"),
        ("calls", f"{info['calls']} ({info['errors']} failed)"),
        ("attempts", str(info["attempts"])),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def _local_time(iso: str | None) -> str:
    if not iso:
        return "—"
    return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def tool_table(info: dict[str, Any]) -> Table:
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, expand=True)
    for column in ("tool", "risk", "hints", "description"):
        table.add_column(column, style="bold" if column == "tool" else "")
    for tool in info["tools"]:
        hints = ", ".join(k for k, v in tool["annotations"].items() if v) or "none"
        table.add_row(
            tool["name"] or tool["server_tool"],
            tool["risk"] or "rejected",
            hints,
            tool["description"] or "",
        )
    return table


class DetailView(ThemeAware, Dialog[None]):
    """A view of one thing in full, scrolled inside its box; Esc closes it."""

    SCROLLS = True

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__()
        self.info = info


def heading(text: str) -> Static:
    return Static(Content.styled(text, "bold underline"), classes="detail-heading")


class ServerDetailScreen(DetailView):
    """Everything known about one server: status, process, errors, tools, stderr."""

    BINDINGS = [Binding("r", "reconnect", "Reconnect", id="detail.reconnect")]

    @dataclass
    class ReconnectRequested(Message):
        """Reconnect the server this view shows."""

        server: str

    EVENTS = (ServerStatusChanged,)  # kept up to date while open

    def __init__(
        self, info: dict[str, Any], diagnostics: Callable[[str], dict[str, Any]] | None = None
    ) -> None:
        super().__init__(info)
        self.diagnostics = diagnostics  # the server's info as it is now, by name

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if self.diagnostics is not None and isinstance(event, ServerStatusChanged):
            if event.server == self.info["name"]:
                try:
                    self.show(self.diagnostics(event.server))
                except KeyError:  # taken out of the config meanwhile: the last view stays
                    pass

    def compose_body(self) -> ComposeResult:
        yield Static(id="detail-summary")
        yield heading("Tools")
        yield Static(id="detail-tools")
        yield heading("stderr (last 200 lines)")
        yield Static(id="detail-stderr")

    def dialog_title(self) -> str:
        return f"MCP server {self.info['name']}"

    def on_mount(self) -> None:
        self.show(self.info)

    def show(self, info: dict[str, Any]) -> None:
        self.info = info
        self.query_one("#detail-summary", Static).update(server_summary(info, self.ink))
        self.query_one("#detail-tools", Static).update(
            tool_table(info) if info["tools"] else Content.styled("no tools listed", MUTED)
        )
        stderr = "\n".join(info["stderr_tail"])
        self.query_one("#detail-stderr", Static).update(
            Content(stderr) if stderr else Content.styled("nothing on stderr", MUTED)
        )

    def restyle(self) -> None:
        self.show(self.info)

    def action_reconnect(self) -> None:
        self.post_message(self.ReconnectRequested(self.info["name"]))


def proposal_summary(info: dict[str, Any], ink: Ink) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, Any]] = [
        ("status", info["status"]),
        ("tool", info["tool"]),
        ("agent", info["agent"] or "—"),
        ("risk", risk_text(info["risk"], ink)),
        ("reason", info["reason"]),
        ("confidence", "none given" if info["confidence"] is None else f"{info['confidence']}"),
        ("origin", info["origin"]),
        ("correlation", info["correlation_id"]),
        ("created", _local_time(info["created_at"])),
    ]
    if info["decided_at"]:
        rows.append(("decided", f"{_local_time(info['decided_at'])} by {info['decided_by']}"))
    if info["reject_reason"]:
        rows.append(("why rejected", info["reject_reason"]))
    if info["error"]:
        rows.append(("error", Text(info["error"], style=ink(tone("bad")))))
    if info.get("note"):
        rows.append(("stored", info["note"]))
    if info.get("damaged"):
        damaged = Text(f"{info['damaged']}: it cannot run", style=ink(tone("bad", bold=True)))
        rows.append(("damaged", damaged))
    for label, value in rows:
        grid.add_row(label, value)
    return grid


class ProposalDetailScreen(DetailView):
    """One proposal in full: arguments as pretty JSON (secrets hidden), reason, origin."""

    def compose_body(self) -> ComposeResult:
        yield Static(id="proposal-summary")
        yield heading("Arguments")
        yield Static(
            JSON(json.dumps(self.info["arguments"], ensure_ascii=False)), id="proposal-arguments"
        )
        if self.info["result"] is not None:
            yield heading("Result")
            yield Static(
                JSON(json.dumps(self.info["result"], ensure_ascii=False, default=str)),
                id="proposal-result",
            )

    def dialog_title(self) -> str:
        return f"Proposal {self.info['id']}"

    def on_mount(self) -> None:
        self.restyle()

    def restyle(self) -> None:
        self.query_one("#proposal-summary", Static).update(proposal_summary(self.info, self.ink))


class PromptDialog(Dialog[str | None]):
    """A question and a line for the answer: Enter answers, Esc leaves it unanswered."""

    BINDINGS = [Binding("escape", "close", "Cancel", id="prompt.cancel")]
    PLACEHOLDER = ""

    def compose_body(self) -> ComposeResult:
        yield Static(self.prompt())
        yield Input(placeholder=self.PLACEHOLDER)

    def prompt(self) -> Content:
        raise NotImplementedError

    def answer(self, typed: str) -> str | None:
        """What Enter on ``typed`` (stripped) answers; None: not an answer yet."""
        return typed

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        answer = self.answer(event.value.strip())
        if answer is not None:
            self.dismiss(answer)


class RejectReasonScreen(PromptDialog):
    """Ask for an optional reason; Enter rejects (a blank reason is fine), Esc cancels."""

    DIALOG_TITLE = "Reject proposal"
    PLACEHOLDER = "Reason (optional) — Enter rejects, Esc cancels"

    def __init__(self, proposal: str, tool: str) -> None:
        super().__init__()
        self.proposal = proposal
        self.tool = tool

    def prompt(self) -> Content:
        return Content.assemble("Reject ", (self.proposal, "bold"), f" ({self.tool})?")


class HumanInputScreen(PromptDialog):
    """The model asks the person something (request_human_input). Enter answers; a number
    picks one of the offered choices; Esc declines, and the model is told so."""

    BINDINGS = [Binding("escape", "close", "Decline to answer", id="human.decline")]
    DIALOG_TITLE = "DIANA asks"
    PLACEHOLDER = "Your answer — Enter sends, Esc declines"

    def __init__(self, question: str, choices: list[str]) -> None:
        super().__init__()
        self.question = question
        self.choices = choices

    def prompt(self) -> Content:
        choices = [f"\n{n}. {c}" for n, c in enumerate(self.choices, 1)]
        return Content.assemble((self.question, "bold"), *choices)

    def answer(self, typed: str) -> str | None:
        if typed.isdigit() and 1 <= int(typed) <= len(self.choices):
            return self.choices[int(typed) - 1]
        return typed or None
