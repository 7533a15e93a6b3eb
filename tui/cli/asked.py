"""A command's question about the agents and MCP servers (core/shared/queries.py: tools, health,
resources, prompts, a resource, a prompt): answered by the diana-tui running on this data dir,
on its live connections, or by the command on servers of its own when none runs or it does
not answer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from diana.core.api.errors import UnknownServer
from diana.core.api.types import LiveApp

from .common import BadInput, _err, _warn

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import AppAnswer as Answer


async def answered(
    core: Core,
    args: argparse.Namespace,
    kind: str,
    server: str | None = None,
    params: dict[str, Any] | None = None,
    *,
    what: str,
    content: bool = False,
    start: bool = False,
) -> tuple[Answer, LiveApp | None]:
    """The answer, and the app that gave it (None: this command did). The app's answer is
    introduced by a line saying so (``what`` it is): the first line printed, on stderr when
    what follows is JSON or ``content`` (a resource, a prompt), so that stays as it is.
    ``start``: the command's own answer needs every server started first."""
    try:
        found, app = await core.answer(kind, server, params, warn=_warn, start=start)
    except UnknownServer as exc:
        raise BadInput(str(exc)) from None
    if app is not None:
        said = f"{app.describe()} runs on this data dir: {what}."
        if content or getattr(args, "json", False):
            _err(f"diana: {said}")
        else:
            print(said)
    return found, app


def field_text(item: dict[str, Any], key: str) -> str:
    """A field of an answer's item as text for a table cell: nothing for none."""
    value = item.get(key)
    return "" if value is None else value if isinstance(value, str) else str(value)
