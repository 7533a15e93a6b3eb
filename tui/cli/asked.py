"""A command's question about the agents and MCP servers (core/shared/queries.py: tools, health,
resources, prompts, a resource, a prompt): answered by the diana-tui running on this data dir,
on its live connections, or by the command on servers of its own when none runs or it does
not answer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from diana.core.api.errors import AppGone, StorageError, UnknownServer
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
    app = await core.running_app(_warn)
    if app is not None:
        try:
            found = await core.ask_app_question(app, kind, server, params)
        except UnknownServer as exc:
            raise BadInput(str(exc)) from None
        except (AppGone, StorageError) as exc:
            _warn(f"{exc}; answering with this command's own servers")
        else:
            said = f"{app.describe()} runs on this data dir: {what}."
            if content or getattr(args, "json", False):
                _err(f"diana: {said}")
            else:
                print(said)
            return found, app
    return await answered_here(core, kind, server, params, start=start), None


async def answered_here(
    core: Core,
    kind: str,
    server: str | None,
    params: dict[str, Any] | None,
    *,
    start: bool,
) -> Answer:
    """The command's own answer, on servers it starts (or has started) for it."""
    if start:
        await core.start_servers()
    try:
        return await core.answer_here(kind, server, params)
    except KeyError:
        raise BadInput(core.not_configured(str(server))) from None


def field_text(item: dict[str, Any], key: str) -> str:
    """A field of an answer's item as text for a table cell: nothing for none."""
    value = item.get(key)
    return "" if value is None else value if isinstance(value, str) else str(value)
