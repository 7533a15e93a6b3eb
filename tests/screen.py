"""What a running app shows: the terminal's rows as drawn, and the chat's transcript."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from diana.tui.app import DianaApp
from diana.tui.panes.chat import ChatPane

TEXT = re.compile(r'<text[^>]*?x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', re.S)


def screen_lines(app: DianaApp) -> list[str]:
    """What the terminal shows, row by row (the exported screenshot's text runs, joined)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, run in TEXT.findall(app.export_screenshot(simplify=True)):
        rows.setdefault(float(y), []).append((float(x), html.unescape(run).replace("\xa0", " ")))
    return ["".join(text for _, text in sorted(runs)) for _, runs in sorted(rows.items())]


def on_screen(app: DianaApp, words: str) -> bool:
    return any(words in line for line in screen_lines(app))


def transcript(app: DianaApp) -> str:
    return " ".join(app.query_one(ChatPane).plain_text().split())


def record_notifications(app: DianaApp, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every notice the app shows from now on, (severity, text), kept after its toast has
    timed out (a slow machine may take longer to check than a toast stays up)."""
    told: list[tuple[str, str]] = []
    notify = app.notify

    def recording(message: str, **options: Any) -> None:
        told.append((str(options.get("severity", "information")), str(message)))
        notify(message, **options)

    monkeypatch.setattr(app, "notify", recording)
    return told
