"""The keys: F1 (or ? where it types nothing) lists what each key does in the pane or view in
use, then the keys that work everywhere. Made from the bindings in force when it was asked
for, as the footer is, so it says what the keys do now and never drifts from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widgets import Static

from ..panes.base import Pane
from .dialogs import Dialog

EVERYWHERE = "Everywhere"
NAMED = {
    "question_mark": "?",
    "escape": "Esc",
    "delete": "Del",
    "space": "Space",
    "enter": "Enter",
    "slash": "/",
}


@dataclass
class KeySection:
    """One heading of the help: the keys of a pane, a view, or of everywhere."""

    title: str
    keys: dict[str, list[str]] = field(default_factory=dict)  # what it does → its keys


def key_name(app: App[object], binding: Binding) -> str:
    """A key as a person reads it: F1, Ctrl+T, Esc, ?, d."""
    if binding.key_display:
        return binding.key_display
    *modifiers, key = binding.key.split("+")
    shown = NAMED.get(key) or app.get_key_display(Binding(key, binding.action))
    if modifiers or (len(shown) > 1 and shown[0].islower()):
        shown = shown[0].upper() + shown[1:]  # Ctrl+T, F1, Enter; d and D differ
    return "+".join([*(m.capitalize() for m in modifiers), shown])


def section_title(namespace: DOMNode, screen: Screen[object]) -> str:
    """Where a binding comes from: a pane (with its key), the view on top, or everywhere."""
    nodes = [namespace, *namespace.ancestors]
    pane = next((node for node in nodes if isinstance(node, Pane)), None)
    if pane is not None:
        return f"{pane.PANE_TITLE} ({pane.FOCUS_KEY})" if pane.FOCUS_KEY else pane.PANE_TITLE
    if isinstance(screen, Dialog) and screen in nodes:
        return screen.dialog_title() or "This view"
    return EVERYWHERE


def bindings_in_force(screen: Screen[object]) -> list[tuple[DOMNode, Binding]]:
    """Each key's binding that diana made (with an id; and Tab) as the focused widget's chain
    has it (the first from the focus up; a priority binding over any other; a widget's own
    Enter in a table gives way to the pane's Details, which it carries out), whether or not
    a text field has the focus now: the keys of a view are listed while its search field
    types them. Over a modal view only the app's priority keys reach past it, as Textual
    has them."""
    app = screen.app
    focused = screen.focused
    nodes: list[DOMNode] = list(focused.ancestors_with_self) if focused else [screen, app]
    if screen not in nodes:
        nodes = [screen, app]
    modal = screen.is_modal
    found: dict[str, tuple[DOMNode, Binding]] = {}
    for namespace in nodes:
        for key, bindings in namespace._bindings.key_to_bindings.items():
            for binding in bindings:
                if modal and namespace is app and not binding.priority:
                    continue
                if binding.id is None and binding.action != "app.focus_next":
                    continue  # a widget's own keys (arrows, pages, a table's Enter)
                if app._check_action_state(binding.action, namespace) is False:
                    continue  # not offered here (Textual's check_action said so)
                earlier = found.get(key)
                if earlier is None or (binding.priority and not earlier[1].priority):
                    found[key] = (namespace, binding)
    return list(found.values())


def keys_in_use(screen: Screen[object]) -> list[KeySection]:
    """The keys that act on ``screen``: the pane's or view's first, then everywhere's.
    Keys with one action share a line."""
    sections: dict[str, KeySection] = {}
    app = screen.app
    for namespace, binding in bindings_in_force(screen):
        title = section_title(namespace, screen)
        section = sections.setdefault(title, KeySection(title))
        what = binding.description or binding.action
        shown = section.keys.setdefault(what, [])
        name = key_name(app, binding)
        if name not in shown:
            shown.append(name)
    everywhere = sections.pop(EVERYWHERE, None)
    return [*sections.values(), *([everywhere] if everywhere else [])]


class HelpScreen(Dialog[None]):
    """The keys in force where F1 was pressed; Esc or F1 closes it."""

    DIALOG_TITLE = "Keys — Esc closes"
    SCROLLS = True

    def __init__(self, sections: list[KeySection]) -> None:
        super().__init__()
        self.sections = sections

    def compose_body(self) -> ComposeResult:
        for section in self.sections:
            yield Static(Content.styled(section.title, "bold underline"), classes="help-heading")
            width = max((len(" / ".join(keys)) for keys in section.keys.values()), default=0)
            lines = [
                Content.assemble((" / ".join(keys).ljust(width), "bold $accent"), "  ", what)
                for what, keys in section.keys.items()
            ]
            yield Static(Content("\n").join(lines), classes="help-keys")
        yield Static(
            Content.styled(
                "Ctrl+P opens the command palette: every command, searchable. In the chat, "
                "/help lists its commands.",
                "dim",
            ),
            classes="help-heading",
        )
