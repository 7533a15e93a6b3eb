"""Keys reach what they were typed into, in the order typed, however fast they come.

Textual hands each key to the widget focused when the key arrives, and carries out a
widget's bindings only once the key has bubbled back up to the app; by then an F-key typed
behind it may have moved the focus, and the binding would be looked up in the wrong pane (an
`a` meant for the MCP Servers pane approving a proposal). Here a bubbled key is looked up
from the widget it was typed into, and the pane keys (F2 to F6, priority bindings) move the
focus at once, so the keys typed after one go to the pane it names."""

from __future__ import annotations

from textual import events
from textual._dispatch_key import dispatch_key
from textual.app import App
from textual.widget import Widget


class KeysInOrder(App[int]):
    """An app whose key bindings are looked up where each key was typed."""

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            event.typed_into = self.focused  # type: ignore[attr-defined]
        await super().on_event(event)

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls App's own _on_key after this one (which looks the key up from the
        # focus), unless the default is prevented.
        typed_into: Widget | None = getattr(event, "typed_into", None)
        if typed_into is None or typed_into is self.focused or not typed_into.is_attached:
            return
        # The focus moved after the key was typed: its bindings are those of where it was.
        event.prevent_default()
        for node in typed_into.ancestors_with_self:
            for binding in node._bindings.key_to_bindings.get(event.key, ()):
                if not binding.priority and await self.run_action(binding.action, node):
                    return
            if node.is_modal:
                break
        await dispatch_key(self, event)
