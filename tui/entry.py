"""The one text input the app uses: Textual's Input, with Enter taken in the order typed."""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class Entry(Input):
    """An Input whose Enter submits what was typed before it, and only that. Textual runs a
    widget's key bindings once the key has bubbled up to the app, after the characters typed
    behind it are already in (a script typing `/help` Enter `/tools` Enter would submit
    `/help/tools`); here Enter is handled as it arrives, like the characters."""

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls Input's own _on_key after this one, unless the default is prevented.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            await self.action_submit()
