"""What the chat asks of the MCP servers: their resources and prompts, for completion, and a
server's prompt made into a message (the arguments it lacks asked for in a form)."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import FormAnswer as Answer
    from diana.core.api.types import PromptInfo, ServerConnection
    from textual.app import App

T = TypeVar("T")


async def server_resources(core: Core | None) -> list[tuple[str, str]]:
    """Every ready server's resources, for `@server:uri`."""
    from diana.core.api import list_resources

    listed = await from_ready_servers(core, list_resources)
    return [(server, r.uri) for server, r in listed if not r.template]


async def server_prompts(core: Core | None) -> list[tuple[str, str]]:
    """Every ready server's prompts, for `/server:prompt`."""
    from diana.core.api import list_prompts

    return [(server, p.name) for server, p in await from_ready_servers(core, list_prompts)]


async def from_ready_servers(
    core: Core | None, listing: Callable[[ServerConnection], Awaitable[list[T]]]
) -> list[tuple[str, T]]:
    """What ``listing`` gives for each ready server (one that fails to list gives none)."""
    from diana.core.api.errors import CatalogError

    if core is None:
        return []
    found: list[tuple[str, T]] = []
    for name, connection in core.started_connections():
        if connection.ready:
            with contextlib.suppress(CatalogError):
                found += [(name, item) for item in await listing(connection)]
    return found


async def prompt_message(core: Core, app: App[Any], target: str, rest: str) -> str | None:
    """/SERVER:PROMPT NAME=VALUE …: the server's prompt as the message to send; None if the
    form for missing arguments was cancelled. An unknown prompt or argument, or a missing
    one, raises ValueError or CatalogError naming it."""
    from diana.core.api import get_prompt, list_prompts, prompt_arguments
    from diana.core.api.shown import prompt_text

    server, _, name = target.partition(":")
    arguments = prompt_arguments(shlex.split(rest))
    connection = await core.connected(server)
    prompts = {p.name: p for p in await list_prompts(connection)}
    prompt = prompts.get(name)
    if prompt is None:
        offered = ", ".join(prompts) or "none"
        raise ValueError(f"MCP server {server} has no prompt {name!r} (it has: {offered})")
    known = {a.name for a in prompt.arguments}
    if prompt.missing(arguments) and set(arguments) <= known:
        filled = await fill_in(core, app, prompt, arguments)  # a form for what is missing
        if filled is None:
            return None
        arguments = filled
    problem = prompt.argument_problem(arguments)
    if problem is not None:
        takes = " ".join(f"{a.name}=…" for a in prompt.arguments)
        raise ValueError(f"{problem}; e.g. /{server}:{name} {takes}".rstrip())
    _description, messages = await get_prompt(connection, prompt, arguments)
    return prompt_text(messages)


async def fill_in(
    core: Core, app: App[Any], prompt: PromptInfo, given: dict[str, str]
) -> dict[str, str] | None:
    """The prompt's arguments in a form (the ones given filled in); None if cancelled."""
    from diana.core.api.types import Elicitation, Field

    from ..modals.elicitation import ElicitationScreen

    fields = [
        Field(a.name, a.name, a.description, "string", a.required, given.get(a.name))
        for a in prompt.arguments
    ]
    request = Elicitation(prompt.server, prompt.description or "", "form", fields)
    answered: asyncio.Future[Answer | None] = asyncio.get_running_loop().create_future()
    title = f"Prompt {prompt.server}:{prompt.name}"

    async def complete(argument: str, typed: str, others: dict[str, str]) -> list[str]:
        from diana.core.api import complete_argument

        connection = core.connection_of(prompt.server)
        if connection is None:
            return []
        return await complete_argument(connection, prompt.name, argument, typed, others)

    form = ElicitationScreen(request, title, complete=complete)
    app.push_screen(form, answered.set_result)
    answer = await answered
    if answer is None or answer.action != "accept":
        return None
    return {k: str(v) for k, v in (answer.content or {}).items()}
