"""The colours a running app draws, read from its screen, for the tests of theme colours."""

from __future__ import annotations

from rich.style import Style
from textual.app import App
from textual.color import Color


def drawn_colours(app: App[object], text: str, row: str = "") -> set[str]:
    """The colours the screen draws ``text`` in (a run of one style) on lines holding ``row``."""
    found = set()
    for strip in app.screen._compositor.render_strips():
        if row not in strip.text:
            continue
        for segment in strip:
            style = segment.style or Style()
            if segment.text.strip() == text and style.color is not None:
                found.add(style.color.get_truecolor().hex.upper())
    return found


def theme_colour(app: App[object], variable: str, over: Color | None = None) -> str:
    """The colour of a theme variable (``error``) in the app's current theme; one with
    transparency as drawn ``over`` a background."""
    colour = Color.parse(app.theme_variables[variable])
    return (colour if over is None else over + colour).hex.upper()
