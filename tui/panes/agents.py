from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from core.models import AgentHealth

from .base import Pane

HEALTH_STYLE = {"healthy": "green", "unhealthy": "bold red", "unknown": "yellow"}


class AgentsPane(Pane):
    """Every agent with its health, lifecycle state and tool count."""

    PANE_TITLE = "Agents"
    FOCUS_KEY = "F5"

    def compose(self) -> ComposeResult:
        table: DataTable[str | Text] = DataTable(
            id="agents-table", classes="pane-body", cursor_type="row", zebra_stripes=False
        )
        table.add_columns("Agent", "Health", "State", "Tools", "Message")
        yield table

    def show_health(self, reports: list[AgentHealth]) -> None:
        table = self.query_one("#agents-table", DataTable)
        cursor = table.cursor_row
        table.clear()
        for report in reports:
            health = Text("● " + report.status, style=HEALTH_STYLE[report.status])
            table.add_row(
                Text(report.agent_id),
                health,
                Text(report.state.value),
                Text(str(report.tool_count)),
                Text(report.message or ""),
                key=report.agent_id,
            )
        if reports:
            table.move_cursor(row=min(cursor, len(reports) - 1))
        healthy = sum(r.status == "healthy" for r in reports)
        self.border_title = f"Agents {healthy}/{len(reports)} healthy"
