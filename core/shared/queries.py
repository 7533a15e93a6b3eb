"""What `diana` asks of the agents and MCP servers without changing anything: the tools they
offer, their health, the servers' resources and prompts, one resource's content, one
prompt's messages. Each answer is a plain JSON value (``Answer``), worked out the same way
by a command on servers it started itself (``here``) or by a running diana-tui on its live
connections, for a command that asked it (core/shared/live.py); the command prints either alike.

``here``: the command's own servers, each given its first attempt to connect (started now
if it was not). Otherwise the app's: a server not ready at that moment is said to be so at
once, never waited for.

This module imports no MCP SDK: a command that prints the app's answer starts nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)

from ..config.mcp_servers import agent_id_for

if TYPE_CHECKING:
    from ..mcp.catalog import PromptInfo
    from ..mcp.connection import ServerConnection
    from ..mcp.manager import MCPManager

# The questions, by the name a request gives them (core/shared/live.py lets through these only).
TOOLS, HEALTH, RESOURCES, PROMPTS, READ, PROMPT = (
    "tools",
    "health",
    "resources",
    "prompts",
    "read",
    "prompt",
)
QUERIES = (TOOLS, HEALTH, RESOURCES, PROMPTS, READ, PROMPT)
Query = Literal["tools", "health", "resources", "prompts", "read", "prompt"]


class Answer(BaseModel):
    """What a question was answered with; read back from the app, each is checked here
    before it is printed (a person with the database file can write anything)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolSource(Answer):
    """Where a server's tools were listed from: its tool cache entry or its connection, and
    when; or why they were not (``reason``)."""

    server: StrictStr
    listed_at: datetime | None = None
    source: Literal["cache", "connection"] | None = None
    reason: StrictStr | None = None


class ToolsAnswer(Answer):
    tools: list[dict[str, Any]]  # {name, agent, description, parameters, risk, ...}
    servers: list[ToolSource]


class HealthAnswer(Answer):
    agents: list[dict[str, Any]]  # AgentHealth, as JSON


class Listing(Answer):
    """Resources or prompts, and one line for each server that could not list them."""

    items: list[dict[str, Any]]
    problems: list[StrictStr]


class ReadAnswer(Answer):
    """A resource's parts (ResourceContent.public()), or why it could not be read."""

    contents: Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None
    problem: StrictStr | None = None

    @model_validator(mode="after")
    def _one_or_the_other(self) -> ReadAnswer:
        if (self.contents is None) == (self.problem is None):
            raise ValueError("has not exactly one of contents and a problem")
        return self


class PromptAnswer(Answer):
    """A prompt's description and messages, or why it was not got (``bad_input``: the name
    or the arguments, not the server)."""

    description: StrictStr | None = None
    messages: list[dict[str, Any]] | None = None
    problem: StrictStr | None = None
    bad_input: StrictBool = False

    @model_validator(mode="after")
    def _one_or_the_other(self) -> PromptAnswer:
        if (self.messages is None) == (self.problem is None):
            raise ValueError("has not exactly one of messages and a problem")
        return self


ANSWERS: dict[str, type[Answer]] = {
    TOOLS: ToolsAnswer,
    HEALTH: HealthAnswer,
    RESOURCES: Listing,
    PROMPTS: Listing,
    READ: ReadAnswer,
    PROMPT: PromptAnswer,
}


def answer_of(kind: str, value: Any) -> Answer:
    """An answer as read back (JSON), checked; ValueError naming what is wrong."""
    try:
        return ANSWERS[kind].model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "answer"
        raise ValueError(f"{where}: {first['msg']}") from None


async def answer(
    kind: str,
    manager: MCPManager,
    server: str | None,
    params: dict[str, Any],
    *,
    now: Callable[[], datetime],
    here: bool,
) -> Answer:
    """The answer to one question. KeyError for a server name that is not configured."""
    if kind == TOOLS:
        return await tools(manager, now, refresh=bool(params.get("refresh")), here=here)
    if kind == HEALTH:
        return await health(manager, here=here)
    if kind in (RESOURCES, PROMPTS):
        return await listing(manager, kind, server, here=here)
    assert server is not None
    if kind == READ:
        return await read(manager, server, str(params["uri"]), here=here)
    if kind == PROMPT:
        return await prompt(
            manager, server, str(params["name"]), dict(params.get("arguments") or {}), here=here
        )
    raise ValueError(f"no such question: {kind}")


async def tools(
    manager: MCPManager, now: Callable[[], datetime], *, refresh: bool, here: bool
) -> ToolsAnswer:
    """Every tool, and where each server's were listed from. ``refresh`` here: the servers
    were started anew (the caller did); in the app, every ready server lists them again."""
    failed: dict[str, str] = {}
    if here:
        await manager.wait_ready()  # servers the tool cache does not hold fresh
    elif refresh:
        failed = await manager.relist_tools()
    orchestrator = manager.orchestrator
    orchestrator.check_schemas()  # a tool the app would refuse is not listed
    sources = _sources(manager, failed)
    listed = {agent_id_for(s.server): s.listed_at for s in sources}
    rows = [
        {
            "name": d.name,
            "agent": agent,
            "description": d.description,
            "parameters": d.parameters,
            "risk": d.risk.value,
            "category": d.category,
            "annotations": d.annotations.model_dump(by_alias=True, exclude_none=True),
            **({"listed_at": _iso(listed[agent])} if agent in listed else {}),
        }
        for d, agent in orchestrator.tool_definitions()
    ]
    return ToolsAnswer(tools=rows, servers=sources)


def _sources(manager: MCPManager, failed: dict[str, str]) -> list[ToolSource]:
    sources = []
    for name in manager.configs:
        connection = manager.connections.get(name)
        cached_at = manager.cached_at(name)
        if cached_at is not None:
            sources.append(ToolSource(server=name, listed_at=cached_at, source="cache"))
        elif connection is not None and connection.ready:
            at = connection.state.tools_listed_at
            why = failed.get(name)
            reason = None if why is None else f"listing them again failed: {why}"
            sources.append(
                ToolSource(server=name, listed_at=at, source="connection", reason=reason)
            )
        else:
            reason = connection.unavailable_reason() if connection else "not started"
            sources.append(ToolSource(server=name, reason=reason))
    return sources


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


async def health(manager: MCPManager, *, here: bool) -> HealthAnswer:
    """Every agent's health, each check bounded by the health timeout."""
    if here:
        await manager.wait_ready()
    reports = await manager.orchestrator.health()
    return HealthAnswer(agents=[r.model_dump(mode="json") for r in reports])


async def listing(manager: MCPManager, kind: str, server: str | None, *, here: bool) -> Listing:
    """The resources (and templates) or prompts of one server, or of every one."""
    from ..mcp.catalog import CatalogError, list_prompts, list_resources

    fetch: Callable[[ServerConnection], Awaitable[list[Any]]] = (
        list_resources if kind == RESOURCES else list_prompts
    )
    names = list(manager.configs) if server is None else [server]

    async def one(name: str) -> tuple[list[dict[str, Any]], str | None]:
        try:
            connection = await _connection(manager, name, here)
            return [item.public() for item in await fetch(connection)], None
        except CatalogError as exc:
            return [], str(exc)

    for name in names:
        if name not in manager.configs:
            raise KeyError(name)
    found = await asyncio.gather(*(one(name) for name in names))
    items = [item for listed, _problem in found for item in listed]
    return Listing(items=items, problems=[p for _listed, p in found if p is not None])


async def read(manager: MCPManager, server: str, uri: str, *, here: bool) -> ReadAnswer:
    from ..mcp.catalog import CatalogError, read_resource

    connection = await _connection_or_problem(manager, server, here)
    if isinstance(connection, str):
        return ReadAnswer(problem=connection)
    try:
        contents = await read_resource(connection, uri)
    except CatalogError as exc:
        return ReadAnswer(problem=str(exc))
    return ReadAnswer(contents=[part.public() for part in contents])


async def prompt(
    manager: MCPManager, server: str, name: str, arguments: dict[str, str], *, here: bool
) -> PromptAnswer:
    """One prompt's messages for these arguments, checked against what it takes first."""
    from ..mcp.catalog import CatalogError, get_prompt, list_prompts

    connection = await _connection_or_problem(manager, server, here)
    if isinstance(connection, str):
        return PromptAnswer(problem=connection)
    try:
        prompts: dict[str, PromptInfo] = {p.name: p for p in await list_prompts(connection)}
    except CatalogError as exc:
        return PromptAnswer(problem=str(exc))
    found = prompts.get(name)
    if found is None:
        offered = ", ".join(prompts) or "none"
        unknown = f"MCP server {server} has no prompt {name} (it has: {offered})"
        return PromptAnswer(problem=unknown, bad_input=True)
    problem = found.argument_problem(arguments)
    if problem is not None:
        return PromptAnswer(problem=f"{problem} (give each as --arg NAME=VALUE)", bad_input=True)
    try:
        description, messages = await get_prompt(connection, found, arguments)
    except CatalogError as exc:
        return PromptAnswer(problem=str(exc))
    return PromptAnswer(description=description, messages=[m.public() for m in messages])


async def _connection(manager: MCPManager, name: str, here: bool) -> ServerConnection:
    """The server's connection: here, after its first attempt (started now if need be); in
    the app, as it is. KeyError for a name not configured; CatalogError for no connection."""
    from ..mcp.catalog import CatalogError

    if here:
        return await manager.connected(name)
    if name not in manager.configs:
        raise KeyError(name)
    connection = manager.connections.get(name)
    if connection is None:
        raise CatalogError(f"MCP server {name} is not started")
    return connection


async def _connection_or_problem(
    manager: MCPManager, name: str, here: bool
) -> ServerConnection | str:
    from ..mcp.catalog import CatalogError

    try:
        return await _connection(manager, name, here)
    except CatalogError as exc:
        return str(exc)
