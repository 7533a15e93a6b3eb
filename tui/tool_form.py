"""The form that adds a local tool to tools.json: the same validated write as `diana tools add`.
A rejected entry keeps the form open with everything typed, and says which field is wrong."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Static, TextArea

from core.config import ConfigError
from core.jsontext import JSONProblem, parse_json
from core.models import RiskLevel
from core.tools.local import LocalTools, RegistryChangeError, add_tool

from .theme import tone

EXAMPLE_SCHEMA = '{"type": "object", "properties": {"text": {"type": "string"}}}'


class ToolFormScreen(ModalScreen[str | None]):
    """Returns the new tool's name once it is written, or None if the person cancelled."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="tool_form.cancel"),
        Binding("ctrl+s", "save", "Add the tool", id="tool_form.save"),
    ]

    def __init__(self, local_tools: LocalTools) -> None:
        super().__init__()
        self.local_tools = local_tools

    def compose(self) -> ComposeResult:
        with Vertical(id="tool-form"):
            yield Label("Name (lower_case)")
            yield Input(id="tool-name", placeholder="word_count")
            yield Label("Description")
            yield Input(id="tool-description", placeholder="Count the words in a text.")
            yield Label("Script in the config dir's tools/ folder (defines run(arguments))")
            yield Input(id="tool-script", placeholder="word_count.py")
            yield Label("Parameters (JSON Schema)")
            yield TextArea(EXAMPLE_SCHEMA, id="tool-parameters", language="json")
            with Horizontal(id="tool-options"):
                yield Select(
                    [(r.value.replace("_", " "), r.value) for r in RiskLevel],
                    value=RiskLevel.IRREVERSIBLE.value,
                    allow_blank=False,
                    id="tool-risk",
                )
                yield Input(id="tool-timeout", placeholder="timeout s (default 30)")
                yield Checkbox("parallel", id="tool-parallel")
            yield Static(id="tool-error")
            with Horizontal(id="tool-buttons"):
                yield Button("Add", id="tool-add", variant="primary")
                yield Button("Cancel", id="tool-cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tool-form").border_title = "Add a local tool"
        self.query_one("#tool-script", Input).tooltip = f"in {self.local_tools.tools_dir}"
        self.query_one("#tool-name", Input).focus()

    def entry(self) -> dict[str, Any]:
        """What was typed, as one tools.json entry; ValueError names a field it cannot read."""
        entry: dict[str, Any] = {
            "name": self.query_one("#tool-name", Input).value.strip(),
            "description": self.query_one("#tool-description", Input).value.strip(),
            "script": self.query_one("#tool-script", Input).value.strip(),
            "risk": self.query_one("#tool-risk", Select).value,
            "parallel_capable": self.query_one("#tool-parallel", Checkbox).value,
        }
        schema = self.query_one("#tool-parameters", TextArea).text.strip()
        if schema:
            try:
                entry["parameters"] = parse_json(schema)
            except JSONProblem as exc:
                raise ValueError(f"parameters: {exc}") from None
        timeout = self.query_one("#tool-timeout", Input).value.strip()
        if timeout:
            try:
                entry["timeout"] = float(timeout)
            except ValueError:
                raise ValueError(f"timeout: {timeout!r} is not a number of seconds") from None
        return entry

    @on(Button.Pressed, "#tool-add")
    def action_save(self) -> None:
        self.save()

    @work(exclusive=True, group="tool-form", exit_on_error=False)
    async def save(self) -> None:
        error = self.query_one("#tool-error", Static)
        try:
            entry = self.entry()
            await self.local_tools.change(add_tool(entry))
        except (ValueError, RegistryChangeError) as exc:
            error.update(Content.styled(str(exc), tone("bad", bold=True)))
            return
        except ConfigError as exc:
            error.update(Content.styled(exc.message, tone("bad", bold=True)))
            return
        self.dismiss(entry["name"])

    @on(Button.Pressed, "#tool-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
