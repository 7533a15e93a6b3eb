"""The one text input the app uses: Textual's Input, with Enter taken in the order typed."""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.widgets import Input


class Entry(Input):
    """An Input whose Enter submits what was typed before it, and only that. Textual runs a
    widget's key bindings once the key has bubbled up to the app, after the characters typed
    behind it are already in (a script typing `/help` Enter `/tools` Enter would submit
    `/help/tools`); here Enter is handled as it arrives, like the characters."""

    # Set by the pane: given what is pasted (or dropped), True when it took it itself.
    take_paste: Callable[[str], bool] | None = None

    def _on_paste(self, event: events.Paste) -> None:
        # Textual calls Input's own _on_paste after this one, unless the default is prevented.
        if self.take_paste is not None and self.take_paste(event.text):
            event.stop()
            event.prevent_default()

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls Input's own _on_key after this one, unless the default is prevented.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            await self.action_submit()
