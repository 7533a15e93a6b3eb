"""A command's question about the agents and MCP servers (core/shared/queries.py: tools, health,
resources, prompts, a resource, a prompt): answered by the diana-tui running on this data dir,
on its live connections, or by the command on servers of its own when none runs or it does
not answer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from diana.core.shared.app_requests import AppGone, UnknownServer, ask_app_question
from diana.core.shared.live import LiveApp
from diana.core.storage.db import StorageError

from .common import BadInput, _err, _warn

if TYPE_CHECKING:
    from diana.core.runtime import Runtime
    from diana.core.shared.queries import Answer


async def answered(
    runtime: Runtime,
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
    app = await runtime.running_app(_warn)
    if app is not None:
        try:
            found = await ask_app_question(
                runtime.db, runtime.paths, app, kind, server, runtime.clock, params
            )
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
    return await answered_here(runtime, kind, server, params, start=start), None


async def answered_here(
    runtime: Runtime,
    kind: str,
    server: str | None,
    params: dict[str, Any] | None,
    *,
    start: bool,
) -> Answer:
    """The command's own answer, on servers it starts (or has started) for it."""
    from diana.core.shared.queries import answer

    if start:
        await runtime.start_servers()
    try:
        return await answer(
            kind, runtime.mcp, server, params or {}, now=runtime.clock.now, here=True
        )
    except KeyError:
        raise BadInput(runtime.mcp.not_configured(str(server))) from None


def field_text(item: dict[str, Any], key: str) -> str:
    """A field of an answer's item as text for a table cell: nothing for none."""
    value = item.get(key)
    return "" if value is None else value if isinstance(value, str) else str(value)
