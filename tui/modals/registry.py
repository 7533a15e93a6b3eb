"""Finding a server in the MCP Registry from the MCP Servers pane (`f`): a search, its
results, and the install form that asks for the settings the chosen entry needs.

The form hands back a name and an mcp-servers.json entry pinned to the registry version;
the pane queues it with the MCP sub-agent, which tests the server before writing the file,
as for the Add server form. A secret is typed into a field that does not show it."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from diana.core.api import Core, check_server
from diana.core.api.errors import ConfigError, RegistryEntryError, RegistryError
from diana.core.api.types import MCP_SERVERS_FILE, InstallPlan, RegistryServer
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ..entry import Entry
from ..theme import tone
from .dialogs import Dialog, FormDialog, FormError
from .server_form import ServerFormResult

SEARCH_LIMIT = 20
MUTED = tone("muted")


def result_line(server: RegistryServer) -> Content:
    """One result: name, version, status when not active, title and description."""
    status = (f" {server.status}", tone("caution", bold=True)) if server.deprecated else ""
    title = server.server.title or ""
    return Content.assemble(
        (server.name, "bold"),
        (f" {server.version}", MUTED),
        status,
        f"  {title}" if title else "",
        (f" — {server.server.description}", MUTED),
    )


def free_name(name: str, taken: Collection[str]) -> str:
    """``name``, or ``name-2``, ``name-3`` … : the first that no server has yet."""
    if name not in taken:
        return name
    return next(f"{name}-{n}" for n in range(2, len(taken) + 3) if f"{name}-{n}" not in taken)


class RegistrySearchScreen(Dialog[ServerFormResult | None]):
    """Returns the server to add (after its install form), or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="registry.close"),
    ]
    DIALOG_TITLE = "Find a server in the MCP Registry"

    def __init__(self, core: Core, taken: Collection[str] = ()) -> None:
        """``taken``: the server names in use, which the install form does not suggest."""
        super().__init__()
        self.core = core
        self.taken = frozenset(taken)
        self.found: list[RegistryServer] = []

    def compose_body(self) -> ComposeResult:
        yield Label("A word of the server's name, then Enter")
        yield Entry(id="registry-query", placeholder="calendar, filesystem, time …")
        yield Static(id="registry-status", classes="registry-status")
        yield OptionList(id="registry-results")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#registry-results").display = False
        self.query_one("#registry-query").focus()

    @on(Input.Submitted, "#registry-query")
    def query_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.search(event.value.strip())

    def say(self, text: str, meaning: str = "muted") -> None:
        self.query_one("#registry-status", Static).update(Content.styled(text, tone(meaning)))

    @work(exclusive=True, group="registry-search", exit_on_error=False)
    async def search(self, query: str) -> None:
        self.say(f"searching for {query!r} …")
        try:
            answer = await self.core.registry_search(query, limit=SEARCH_LIMIT)
        except RegistryError as exc:
            self.say(str(exc), "bad")
            return
        self.found = answer.servers
        results = self.query_one("#registry-results", OptionList)
        results.clear_options()
        results.add_options([Option(result_line(s)) for s in self.found])
        results.display = bool(self.found)
        count = len(self.found)
        said = f"{count} server{'s' if count != 1 else ''}; Enter on one to install it"
        if not self.found:
            said = f"no server in {self.core.registry_url} has {query!r} in its name"
        if answer.offline:
            said += f" (offline: {answer.offline})"
        self.say(said, "caution" if answer.offline else "muted")
        if self.found:
            results.highlighted = 0
            results.focus()

    @on(OptionList.OptionSelected, "#registry-results")
    def result_chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        chosen = self.found[event.option_index]
        if chosen.deprecated:
            self.say(f"{chosen.name} is {chosen.status} in the registry; choose another", "bad")
            return
        try:
            plan = self.core.install_plan(chosen)
        except RegistryEntryError as exc:
            self.say(f"{chosen.name} cannot run here: {exc}", "bad")
            return
        self.app.push_screen(RegistryInstallScreen(chosen, plan, self.taken), self.installed)

    def installed(self, result: ServerFormResult | None) -> None:
        if result is not None:
            self.dismiss(result)


class RegistryInstallScreen(FormDialog[ServerFormResult | None]):
    """The entry's name and each setting it takes (required ones marked *, secrets not
    shown as typed); returns the server to add, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel", id="registry_install.cancel"),
        Binding("ctrl+s", "submit", "Install", id="registry_install.submit"),
    ]
    ID_PREFIX = "registry-install"
    SCROLLS = True

    def __init__(
        self, server: RegistryServer, plan: InstallPlan, taken: Collection[str] = ()
    ) -> None:
        super().__init__()
        self.server = server
        self.plan = plan
        self.suggested = free_name(plan.server_name, taken)

    def dialog_title(self) -> str:
        return f"Install {self.server.name} {self.plan.version}"

    def on_mount(self) -> None:
        super().on_mount()
        # Typing starts where it is needed: the first required setting with no default.
        wanted = [
            index
            for index, setting in enumerate(self.plan.settings)
            if setting.required and setting.default is None
        ]
        field = f"setting-{wanted[0]}" if wanted else "name"
        self.query_one(f"#{self.ID_PREFIX}-{field}").focus()

    def compose_fields(self) -> ComposeResult:
        yield Static(
            Content.assemble(
                self.server.server.description,
                ("\nruns as ", MUTED),
                self.plan.how,
                ("\ntested for real before mcp-servers.json is written", MUTED),
            ),
            classes="registry-about",
        )
        yield Label("Name in mcp-servers.json")
        yield Entry(self.suggested, id="registry-install-name")
        for index, setting in enumerate(self.plan.settings):
            marks = (" *" if setting.required else "") + (" (secret)" if setting.secret else "")
            about = f" — {setting.description}" if setting.description else ""
            yield Label(f"{setting.name}{marks}{about}")
            yield Entry(
                "" if setting.secret else setting.default or "",
                id=f"registry-install-setting-{index}",
                password=setting.secret,
                placeholder="${VAR} takes one from DIANA's environment",
            )

    def submit(self) -> None:
        name = self.value("name").strip()
        if not name:
            raise FormError("name: give the server a name (letters, digits, - _ .)")
        values = {
            setting.name: typed
            for index, setting in enumerate(self.plan.settings)
            if (typed := self.value(f"setting-{index}"))
        }
        try:
            config = self.plan.entry(values)
        except RegistryEntryError as exc:
            raise FormError(str(exc)) from None
        try:
            check_server(name, config, MCP_SERVERS_FILE)
        except ConfigError as exc:
            raise FormError(exc.message.removeprefix(f'server "{name}": ')) from None
        self.dismiss(ServerFormResult(name, config, self.plan.prepare))
