from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from core.events import CallFinished, CallStarted
from core.orchestrator import one_line

from .base import Pane

STATUS_STYLE = {
    "running": "cyan",
    "succeeded": "green",
    "failed": "bold red",
    "timed_out": "bold red",
    "refused": "yellow",
    "cancelled": "yellow",
}
MAX_ROWS = 500


def _clock(at: datetime | str) -> str:
    moment = datetime.fromisoformat(at) if isinstance(at, str) else at
    return moment.astimezone().strftime("%H:%M:%S")


class ExecutionLogPane(Pane):
    """Every call as it happens: time, correlation id, tool, agent, status, latency, result."""

    PANE_TITLE = "Execution Log"
    FOCUS_KEY = "F6"

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(
            id="log-table", classes="pane-body", cursor_type="row"
        )
        # Fixed widths: columns do not jump as calls arrive (the result takes the rest).
        table.add_column("Time", key="time", width=8)
        table.add_column("Correlation", key="cid", width=12)
        table.add_column("Tool", key="tool", width=28)
        table.add_column("Agent", key="agent", width=14)
        table.add_column("Status", key="status", width=16)
        table.add_column("Latency", key="latency", width=10)
        table.add_column("Result", key="result")
        yield table

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#log-table", DataTable)

    def load_history(self, calls: list[dict[str, Any]]) -> None:
        for call in calls:
            summary = one_line(call["error"] or call["result"])
            self._append(
                f"db-{call['id']}",
                call["started_at"],
                call["correlation_id"],
                call["tool"],
                call["agent"],
                call["status"],
                call["latency_ms"],
                summary,
            )

    def call_started(self, event: CallStarted) -> None:
        self._append(
            f"call-{event.call_id}",
            event.started_at,
            event.correlation_id,
            event.tool,
            event.agent,
            "running",
            None,
            "",
        )

    def call_finished(self, event: CallFinished) -> None:
        key = f"call-{event.call_id}"
        status = event.status
        if key not in self.table.rows:
            self._append(
                key,
                event.started_at,
                event.correlation_id,
                event.tool,
                event.agent,
                status,
                event.latency_ms,
                event.summary,
            )
            return
        self.table.update_cell(key, "status", _status(status))
        self.table.update_cell(key, "latency", Text(_latency(event.latency_ms)))
        self.table.update_cell(key, "result", Text(event.summary), update_width=True)

    def _append(
        self,
        key: str,
        at: datetime | str,
        cid: str,
        tool: str,
        agent: str | None,
        status: str,
        latency_ms: float | None,
        summary: str,
    ) -> None:
        table = self.table
        follow = table.cursor_row >= table.row_count - 1
        # Text cells: a plain str would be read as markup, and "[/]" in a result would crash.
        table.add_row(
            Text(_clock(at)),
            Text(cid),
            Text(tool),
            Text(agent or "—"),
            _status(status),
            Text(_latency(latency_ms)),
            Text(summary),
            key=key,
        )
        while table.row_count > MAX_ROWS:
            table.remove_row(next(iter(table.rows)))
        if follow:
            table.move_cursor(row=table.row_count - 1)


def _status(status: str) -> Text:
    return Text(status.replace("_", " "), style=STATUS_STYLE.get(status, ""))


def _latency(latency_ms: float | None) -> str:
    return "…" if latency_ms is None else f"{latency_ms:.1f} ms"
