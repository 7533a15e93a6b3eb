"""The form that adds a local tool to tools.json: the same validated write as `diana tools add`.
A rejected entry keeps the form open with everything typed, and says which field is wrong."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diana.core.api import parse_json
from diana.core.api.errors import ConfigError, JSONProblem, RegistryChangeError
from diana.core.models import RiskLevel
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Checkbox, Input, Label, Select, TextArea

from ..entry import Entry
from ..messages import ActionRequested
from .dialogs import FormDialog, FormError

EXAMPLE_SCHEMA = '{"type": "object", "properties": {"text": {"type": "string"}}}'


class ToolFormScreen(FormDialog[str | None]):
    """Returns the new tool's name once it is written, or None if the person cancelled."""

    @dataclass
    class AddRequested(ActionRequested[object]):
        """Add the tool to the user's tools.json, validated as `diana tools add` does."""

        entry: dict[str, Any]

    BINDINGS = [Binding("ctrl+s", "submit", "Add the tool", id="tool_form.save")]
    DIALOG_TITLE = "Add a local tool"
    ID_PREFIX = "tool"

    def __init__(self, tools_dir: Path) -> None:
        super().__init__()
        self.tools_dir = tools_dir

    def compose_fields(self) -> ComposeResult:
        yield from self.line("Name (lower_case)", "name", "word_count")
        yield from self.line("Description", "description", "Count the words in a text.")
        yield from self.line(
            "Script in the config dir's tools/ folder (defines run(arguments))",
            "script",
            "word_count.py",
        )
        yield Label("Parameters (JSON Schema)")
        yield TextArea(EXAMPLE_SCHEMA, id="tool-parameters", language="json")
        with Horizontal(id="tool-options", classes="form-row"):
            yield Select(
                [(r.value.replace("_", " "), r.value) for r in RiskLevel],
                value=RiskLevel.IRREVERSIBLE.value,
                allow_blank=False,
                id="tool-risk",
            )
            yield Entry(id="tool-timeout", placeholder="timeout s (default 30)")
            yield Checkbox("parallel", id="tool-parallel")

    def on_mount(self) -> None:
        self.query_one("#tool-script", Input).tooltip = f"in {self.tools_dir}"

    def entry(self) -> dict[str, Any]:
        """What was typed, as one tools.json entry; FormError names a field it cannot read."""
        entry: dict[str, Any] = {
            "name": self.value("name").strip(),
            "description": self.value("description").strip(),
            "script": self.value("script").strip(),
            "risk": self.query_one("#tool-risk", Select).value,
            "parallel_capable": self.query_one("#tool-parallel", Checkbox).value,
        }
        schema = self.value("parameters").strip()
        if schema:
            try:
                entry["parameters"] = parse_json(schema)
            except JSONProblem as exc:
                raise FormError(f"parameters: {exc}") from None
        timeout = self.value("timeout").strip()
        if timeout:
            try:
                entry["timeout"] = float(timeout)
            except ValueError:
                raise FormError(f"timeout: {timeout!r} is not a number of seconds") from None
        return entry

    def submit(self) -> None:
        self.save(self.entry())

    @work(exclusive=True, group="tool-form", exit_on_error=False)
    async def save(self, entry: dict[str, Any]) -> None:
        """The same validated write as `diana tools add`; what it refuses is shown."""
        try:
            request = self.AddRequested(entry)
            self.post_message(request)
            await request.outcome
        except (ValueError, RegistryChangeError) as exc:
            self.show_error(str(exc))
            return
        except ConfigError as exc:
            self.show_error(exc.message)
            return
        self.dismiss(entry["name"])
