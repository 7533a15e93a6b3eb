"""Colours by what they mean. A pane says that a thing failed, waits or is done; the theme
chosen in the command palette says which colour that is.

A tone is a Textual style naming a theme variable ("bold $error"). Two ways to draw one:

- in ``Content`` (what a Static shows), as it is: Textual resolves the variable each time it
  draws, so a new theme applies by itself;
- in a Rich renderable (DataTable cells, Rich tables), resolved with ``ThemeAware.ink``: the
  widget draws those again (``restyle``) when the theme changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.style import Style as RichStyle
from textual.theme import Theme
from textual.widget import Widget

# What a colour means -> the theme variable that shows it.
MEANINGS = {
    "bad": "error",  # failed, down, cannot be undone
    "caution": "warning",  # waits for someone, was stopped, undone only with delay
    "good": "success",  # done, ready, healthy
    "busy": "primary",  # running, connecting: not settled yet
    # What matters less. Not $text-muted ("auto 60%"): Textual 8.2 draws that at full
    # strength inside Content; $foreground-muted is the same idea as a plain colour.
    "muted": "foreground-muted",
    "person": "accent",  # what the person typed
}

Ink = Callable[[str], RichStyle]

if TYPE_CHECKING:
    _WidgetMixin = Widget
else:  # a mixin, not a Widget: Textual takes CSS from a widget's first base only
    _WidgetMixin = object


def tone(meaning: str, *, bold: bool = False) -> str:
    """The style for ``meaning``, with the theme variable left for Textual to resolve."""
    return f"{'bold ' if bold else ''}${MEANINGS[meaning]}"


def resolve(widget: Widget, style: str) -> RichStyle:
    """``style`` (a tone, or any Textual style) in the app's current theme, as a Rich style
    for ``widget``: a colour with transparency ("auto 60%") is mixed with its background."""
    visual = widget.app.stylesheet.parse_style(style)
    colour = visual.foreground
    if colour is not None and (colour.auto or colour.a < 1):
        _, background = widget.background_colors
        if colour.auto:
            colour = background.get_contrast_text(colour.a)
        colour = background + colour
    return replace(visual, foreground=colour, background=None).rich_style


class ThemeAware(_WidgetMixin):
    """A widget that draws Rich renderables in theme colours (``ink``). Textual cannot
    resolve those again, so ``restyle`` draws them again when the theme changes."""

    def on_mount(self) -> None:  # besides any subclass's on_mount: Textual calls each
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: Theme) -> None:
        self.restyle()

    def ink(self, style: str) -> RichStyle:
        return resolve(self, style)

    def restyle(self) -> None:
        """Draw again whatever was drawn with ``ink``."""
