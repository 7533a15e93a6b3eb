"""The Policy view: every rule of the approval policy in force, where it came from, and a key
to take one out. Opened with p from the Approvals pane."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diana.core.api.errors import ConfigError, UnknownRule
from diana.core.api.shown import shown_path
from diana.core.api.types import POLICY_FILE, PolicyEntry, Rule, Standing
from diana.core.api.types import RuleKind as Kind
from diana.core.events import ConfigChecked
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import DataTable, Static

from ..messages import ActionRequested, CoreEvent
from ..panes.base import EmptyState
from ..theme import ThemeAware, tone
from .dialogs import ConfirmDialog, Dialog

if TYPE_CHECKING:
    from diana.core.api import Core

RULE_TONE = {Rule.ALLOW: tone("good"), Rule.ASK: tone("caution"), Rule.DENY: tone("bad", bold=True)}
COLUMNS = ("Kind", "Name", "Rule", "Bound to", "From")


def bound_to(entry: PolicyEntry) -> str:
    """Whose tool (or what) a rule is for, in a few words; a rule whose server is gone
    (orphaned) or runs another program now (re-pointed: renamed, edited) says so."""
    if entry.kind == "server":
        return "all its tools"
    if entry.kind == "sampling":
        return "asking the model"
    if entry.server is not None and entry.standing is Standing.ORPHANED:
        return f"MCP server {entry.server} (orphaned)"
    if entry.server is not None and entry.standing is Standing.MOVED:
        return f"MCP server {entry.server} (re-pointed)"
    if entry.server is not None:
        return f"MCP server {entry.server}"
    if entry.agent is not None:
        return f"agent {entry.agent}"
    return "any of that name"


class PolicyScreen(ThemeAware, Dialog[None]):
    """Every rule in force (tool rules, server rules, sampling rules): its rule, the server
    or agent it is bound to, and the file it came from. d removes the selected rule, once
    the person says y, through the one config writer; the view follows the file as it
    changes, here or elsewhere."""

    @dataclass
    class RemoveRuleRequested(ActionRequested[str]):
        """Take a rule out of the user's policy.json; the outcome says it in words."""

        name: str
        kind: Kind

    BINDINGS = [
        Binding("d", "remove", "Remove rule", id="policy.remove"),
        Binding("delete", "remove", "Remove rule", id="policy.remove-delete", show=False),
    ]
    DIALOG_TITLE = "Approval policy"
    EVENTS = (ConfigChecked,)

    def __init__(self, core: Core) -> None:
        super().__init__()
        self.core = core
        self.entries: list[PolicyEntry] = []

    def compose_body(self) -> ComposeResult:
        yield Static(id="policy-source")
        yield EmptyState(
            "No rules: each call is judged by its risk.\n[dim]A and R in Approvals "
            "write one (always allow / always deny).[/]",
            id="policy-empty",
        )
        table: DataTable[Text] = DataTable(id="policy-table", cursor_type="row")
        for title in COLUMNS:
            table.add_column(title, key=title)
        yield table
        yield Static(id="policy-last")

    def on_mount(self) -> None:
        super().on_mount()
        self.show_rules()

    def on_core_event(self, message: CoreEvent) -> None:
        event = message.event
        if isinstance(event, ConfigChecked) and event.file == POLICY_FILE:
            self.show_rules()

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one("#policy-table", DataTable)

    def show_rules(self) -> None:
        """The rules as the file holds them now; the same rule stays selected."""
        policy = self.core.policy_rules()
        self.entries = policy.entries
        table = self.table
        selected = table.cursor_row
        table.clear()
        for entry in self.entries:
            table.add_row(*self._cells(entry), key=f"{entry.kind}\0{entry.name}")
        if self.entries:
            table.move_cursor(row=min(selected, len(self.entries) - 1))
        empty = not self.entries
        self.query_one("#policy-empty").display = empty
        table.display = not empty
        origin = (
            "the shipped default (there is no policy.json in the config dir)"
            if policy.shipped
            else "your policy.json (in the config dir)"
        )
        self.query_one("#policy-source", Static).update(
            Content.assemble(
                (f"{len(self.entries)} {'rule' if len(self.entries) == 1 else 'rules'}", "bold"),
                f", from {origin}. Deny always wins; an allow bound to a server allows only "
                "that server's tool, run by the program it ran when the rule was written.",
            )
        )
        if not empty:
            table.focus()

    def restyle(self) -> None:
        self.show_rules()

    def _cells(self, entry: PolicyEntry) -> tuple[Text, Text, Text, Text, Text]:
        return (
            Text(entry.kind),
            Text(entry.name, style="bold"),
            Text(entry.rule.value, style=self.ink(RULE_TONE[entry.rule])),
            Text(bound_to(entry)),
            Text("default" if entry.shipped else "yours"),
        )

    def selected(self) -> PolicyEntry | None:
        table = self.table
        if not self.entries or not table.display:
            return None
        return self.entries[min(table.cursor_row, len(self.entries) - 1)]

    def action_remove(self) -> None:
        """Asks first, as every removal does: y takes the rule out, n or Esc keeps it."""
        entry = self.selected()
        if entry is None:
            return
        question = Content.assemble(
            f"Remove the {entry.kind} rule ",
            (entry.name, "bold"),
            " (",
            (entry.rule.value, "bold"),
            f", {bound_to(entry)})?\n",
            (
                "Calls it covered are judged by their risk again. Written to policy.json.",
                "dim",
            ),
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.remove_rule(entry)

        self.app.push_screen(ConfirmDialog("Remove a rule", question), answered)

    @work(exclusive=True, group="policy", exit_on_error=False)
    async def remove_rule(self, entry: PolicyEntry) -> None:
        """Take the rule out of the user's policy.json (atomic, one writer at a time)."""
        policy = self.core.policy_rules()
        last = self.query_one("#policy-last", Static)
        try:
            request = self.RemoveRuleRequested(entry.name, entry.kind)
            self.post_message(request)
            removed = await request.outcome
        except (UnknownRule, ConfigError) as exc:
            last.update(Content.styled(f"Not removed: {exc}", tone("bad")))
        else:
            last.update(
                Content.assemble(
                    ("Removed ", "bold"),
                    f"{removed} — written to {shown_path(policy.user_file)}",
                )
            )
        self.show_rules()
