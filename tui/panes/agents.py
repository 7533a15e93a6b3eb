from __future__ import annotations

from dataclasses import dataclass

from diana.core.api import Core
from diana.core.api.errors import AgentSwitchRefused, ConfigError
from diana.core.api.shown import budget_bar, units_text
from diana.core.api.types import CostSnapshot
from diana.core.events import AgentStateChanged, CallFinished, ServerStatusChanged, ToolsChanged
from diana.core.models import AgentHealth
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import DataTable, Static

from ..fitted import Cell, FitColumn, FittedTable, cell
from ..messages import ActionRequested, CoreEvent
from ..modals.dialogs import ConfirmDialog
from ..theme import ThemeAware, tone
from .base import Pane

HEALTH_INTERVAL = 5.0  # seconds between health checks when nothing changes

HEALTH_STYLE = {
    "healthy": tone("good"),
    "unhealthy": tone("bad", bold=True),
    "unknown": tone("caution"),
}
COST_COLUMN = "cost"


class AgentTable(FittedTable):
    """The agents, a row each, fitted to the pane: the message takes what is left (cut at the
    edge), the state and then the agent's name give way first; nothing scrolls sideways."""

    COLUMNS = (
        FitColumn("agent", "Agent", least=8, most=28),
        FitColumn("health", "Health"),
        FitColumn("state", "State", least=5),
        FitColumn("tools", "Tools"),
        FitColumn(COST_COLUMN, "Cost"),
        FitColumn("message", "Message", least=7),
    )
    GIVES_WAY = ("state", "agent")
    LAST_WANTS = 12


COLUMNS = tuple(column.key for column in AgentTable.COLUMNS)


class AgentsPane(ThemeAware, Pane):
    """Every agent with its health, lifecycle state, tool count and cost today; with a daily
    budget, a gauge of today's units above them. u opens how each tool is used, m the
    facts the memory agent keeps."""

    @dataclass
    class SwitchRequested(ActionRequested[bool]):
        """Stop one of diana's own agents, or start it again (written to settings.json)."""

        agent: str
        stopping: bool

    PANE_TITLE = "Agents"
    FOCUS_KEY = "F5"
    BINDINGS = [
        Binding("u", "usage", "Usage", id="agents.usage"),
        Binding("m", "app.open_memory", "Memory", id="agents.memory"),
        # One key, named for what it does to the selected agent (the footer says which).
        Binding("s", "switch_agent(True)", "Stop agent", id="agents.stop"),
        Binding("s", "switch_agent(False)", "Start agent", id="agents.start"),
    ]
    EVENTS = (AgentStateChanged, ToolsChanged, ServerStatusChanged, CallFinished)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._cost: CostSnapshot | None = None
        self._reports: list[AgentHealth] = []

    def compose(self) -> ComposeResult:
        # A text bar rather than a ProgressBar: nothing animates, so snapshots hold still.
        gauge = Static(id="agents-budget")
        gauge.display = False
        yield gauge
        yield AgentTable(id="agents-table", classes="pane-body")

    def watch_core(self, core: Core | None) -> None:
        if core is not None:
            self.refresh_health()
            self.set_interval(HEALTH_INTERVAL, self.refresh_health)

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, CallFinished):
            if event.cost_units > 0 and self.core is not None:
                self.show_cost(self.core.cost())
        else:  # an agent or server changed: a health check, bursts coalesced into one
            self.refresh_health()
            self.refresh_bindings()  # s may now start what it stopped, or the other way

    @work(exclusive=True, group="health", exit_on_error=False)
    async def refresh_health(self) -> None:
        if self.core is not None:
            reports = await self.core.health()
            self.show_health(reports, self.core.cost())

    def show_health(self, reports: list[AgentHealth], cost: CostSnapshot | None = None) -> None:
        if cost is not None:
            self._cost = cost
        self._reports = reports
        table = self.query_one("#agents-table", AgentTable)
        rows = {report.agent_id: self._cells(report) for report in reports}
        if [key.value for key in table.rows] == list(rows):
            # The same agents: only the cells that changed, the view and the cursor left as
            # they are (a refresh every few seconds must not move or redraw anything else).
            for agent, cells in rows.items():
                for column, cell_, before in zip(COLUMNS, cells, table.get_row(agent), strict=True):
                    if (cell_.plain, cell_.style, cell_.spans) != (
                        before.plain,
                        before.style,
                        before.spans,
                    ):
                        table.update_cell(agent, column, cell_)
                table.track(agent, [c.plain for c in cells], fit=False)
        else:
            cursor = table.cursor_row
            table.clear()
            table.untrack_all()
            for agent, cells in rows.items():
                table.add_row(*cells, key=agent)
                table.track(agent, [c.plain for c in cells], fit=False)
            if reports:
                # Kept where it was without scrolling: a refresh must not move the view.
                table.move_cursor(row=min(cursor, len(reports) - 1), scroll=False)
        table.fit_tracked()
        healthy = sum(r.status == "healthy" for r in reports)
        self.border_title = f"Agents {healthy}/{len(reports)} healthy"
        self.badge = f"{healthy}/{len(reports)}"
        self._show_budget()

    def _cells(self, report: AgentHealth) -> tuple[Cell, ...]:
        """An agent's row, in COLUMNS' order."""
        return (
            cell(report.agent_id),
            cell("● " + report.status, self.ink(HEALTH_STYLE[report.status])),
            cell(report.state.value),
            cell(str(report.tool_count), right=True),
            self._cost_cell(report.agent_id),
            cell(report.message or ""),
        )

    def restyle(self) -> None:
        self.show_health(self._reports)

    def selected_agent(self) -> str | None:
        table = self.query_one("#agents-table", AgentTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return None if row_key.value is None else str(row_key.value)

    def _switchable(self) -> tuple[str, bool] | None:
        """The selected agent, if a person may switch it, and whether it is running (one of
        diana's own agents: an MCP server's is switched in the MCP Servers pane)."""
        agent = self.selected_agent()
        if self.core is None or agent is None:
            return None
        slot = next((s for s in self.core.agent_slots() if s.name == agent), None)
        if slot is None or slot.server is not None:
            return None
        if slot.stopped_note is not None:
            return agent, False
        return (agent, True) if slot.callable else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """s says Stop agent on one of diana's own agents that runs, Start agent on one a
        person stopped; it is not offered on an MCP server's agent."""
        if action != "switch_agent":
            return True
        switchable = self._switchable()
        return switchable is not None and parameters == (switchable[1],)

    @on(DataTable.RowHighlighted, "#agents-table")
    def agent_highlighted(self) -> None:
        self.refresh_bindings()

    def action_switch_agent(self, stop: bool) -> None:
        switchable = self._switchable()
        if switchable is None or switchable[1] != stop:
            return
        agent = switchable[0]
        question = Content.assemble(
            "Stop " if stop else "Start ",
            (agent, "bold"),
            "?\n",
            (
                "Its tools are no longer offered, and a call of one is refused until it is "
                "started again. Written to settings.json: it stays stopped after a restart."
                if stop
                else "Its tools are offered again. Written to settings.json.",
                "dim",
            ),
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.switch_agent(agent, stop)

        heading = "Stop an agent" if stop else "Start an agent"
        self.app.push_screen(ConfirmDialog(heading, question), answered)

    @work(group="agents-switch", exit_on_error=False)
    async def switch_agent(self, agent: str, stop: bool) -> None:
        request = self.SwitchRequested(agent, stop)
        self.post_message(request)
        try:
            await request.outcome
        except (AgentSwitchRefused, ConfigError) as exc:
            self.notify(f"{agent} not {'stopped' if stop else 'started'}: {exc}", severity="error")
        self.refresh_bindings()
        self.refresh_health()

    def action_usage(self) -> None:
        from ..modals.usage import UsageScreen

        if self.core is not None:
            self.app.push_screen(UsageScreen(self.core))

    def show_cost(self, cost: CostSnapshot) -> None:
        """New totals (a call finished): the cost cells and the gauge, nothing else."""
        self._cost = cost
        table = self.query_one("#agents-table", AgentTable)
        for row_key in list(table.rows):
            if row_key.value is None:
                continue
            units = self._cost_cell(row_key.value)
            # Each update redraws the whole table: only a figure that changed.
            if units.plain != table.get_cell(row_key, COST_COLUMN).plain:
                table.update_cell(row_key, COST_COLUMN, units)
                table.track(row_key.value, [c.plain for c in table.get_row(row_key)], fit=False)
        table.fit_tracked()
        self._show_budget()

    def _cost_cell(self, agent: str) -> Cell:
        units = self._cost.agents_today.get(agent, 0.0) if self._cost else 0.0
        return cell(units_text(units), right=True)

    def _show_budget(self) -> None:
        gauge = self.query_one("#agents-budget", Static)
        cost = self._cost
        if cost is None or cost.budget is None:
            gauge.display = False
            return
        used, budget = cost.today_total, cost.budget
        over = used >= budget
        gauge.update(
            Content.assemble(
                ("Budget ", "bold"),
                (budget_bar(used, budget), tone("bad") if over else tone("good")),
                f" {units_text(used)} / {budget:g} units today",
                (" — over budget", tone("bad", bold=True)) if over else "",
            )
        )
        gauge.display = True
