"""What a server offers besides tools: its resources (and resource templates) and prompts,
listed and fetched on its live connection, as plain records for the app and the CLI.

Every request is bounded: listing by the server's connect timeout (all pages together, no
cursor twice), reading a resource or getting a prompt by its tool timeout. Whatever goes
wrong is a ``CatalogError`` whose message names the server and what it sent.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import Client, MCPError

from ..content.attachments import Attached, attachment_block
from ..content.parts import size_text
from .connection import ServerConnection
from .failures import ServerDown

MAX_PAGES = 100
DEFAULT_READ_TIMEOUT = 30.0
# `@server:uri` in a message to the model: that resource's text goes with it, up to this much.
ATTACHMENT = re.compile(r"(?<!\S)@([A-Za-z0-9][A-Za-z0-9_.-]*):(\S+)")
ATTACH_LIMIT = 64 * 1024


class CatalogError(Exception):
    """A listing, read or prompt that did not work; the message is for a person."""


@dataclass(frozen=True)
class ResourceInfo:
    server: str
    uri: str  # for a template, the URI template (RFC 6570)
    name: str
    title: str | None
    description: str | None
    mime_type: str | None
    size: int | None = None
    template: bool = False

    def public(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "server": self.server,
            "uri": self.uri,
            "name": self.name,
            "mimeType": self.mime_type,
            "description": self.description,
        }
        if self.template:
            shown["template"] = True
        if self.size is not None:
            shown["size"] = self.size
        return shown


@dataclass(frozen=True)
class ResourceContent:
    """One part of a resource as read: text, or bytes (decoded from the server's base64)."""

    uri: str
    mime_type: str | None
    text: str | None = None
    data: bytes | None = None

    def describe(self) -> str:
        """One line for what is not shown as text: its type and size."""
        size = len(self.data) if self.data is not None else len((self.text or "").encode())
        return size_text(self.mime_type, size)

    def public(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"uri": self.uri, "mimeType": self.mime_type}
        if self.text is not None:
            shown["text"] = self.text
        if self.data is not None:
            shown["blob"] = base64.b64encode(self.data).decode()
            shown["size"] = len(self.data)
        return shown


@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str | None
    required: bool


@dataclass(frozen=True)
class PromptInfo:
    server: str
    name: str
    title: str | None
    description: str | None
    arguments: list[PromptArgument] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": [
                {"name": a.name, "description": a.description, "required": a.required}
                for a in self.arguments
            ],
        }

    def missing(self, given: dict[str, str]) -> list[str]:
        """The required arguments not given."""
        return [a.name for a in self.arguments if a.required and a.name not in given]

    def argument_problem(self, given: dict[str, str]) -> str | None:
        """Why these arguments cannot be sent: an unknown one, or a required one missing."""
        known = [a.name for a in self.arguments]
        for name in given:
            if name not in known:
                takes = ", ".join(known) or "no arguments"
                return f"prompt {self.name} has no argument {name!r} (it takes: {takes})"
        missing = self.missing(given)
        if missing:
            return f"prompt {self.name} needs {', '.join(missing)}"
        return None


@dataclass(frozen=True)
class PromptMessage:
    role: str
    text: str  # text as it is; other content as a placeholder naming it

    def public(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text}


async def list_resources(connection: ServerConnection) -> list[ResourceInfo]:
    """The server's resources, then its resource templates."""
    name = connection.name
    resources = await _all_pages(
        connection, "resources/list", "resources", lambda c, cursor: c.list_resources(cursor=cursor)
    )
    templates = await _all_pages(
        connection,
        "resources/templates/list",
        "resource_templates",
        lambda c, cursor: c.list_resource_templates(cursor=cursor),
    )
    found = [
        ResourceInfo(name, r.uri, r.name, r.title, r.description, r.mime_type, r.size)
        for r in resources
        if isinstance(r, types.Resource)
    ]
    found += [
        ResourceInfo(name, t.uri_template, t.name, t.title, t.description, t.mime_type, None, True)
        for t in templates
        if isinstance(t, types.ResourceTemplate)
    ]
    return found


async def read_resource(connection: ServerConnection, uri: str) -> list[ResourceContent]:
    result = await _request(
        connection,
        f"reading {uri}",
        lambda c: c.read_resource(uri),
        _read_timeout(connection),
        subject=f"resource {uri}",
    )
    contents = []
    for part in result.contents:
        if isinstance(part, types.TextResourceContents):
            contents.append(ResourceContent(part.uri, part.mime_type, text=part.text))
        elif isinstance(part, types.BlobResourceContents):
            try:
                data = base64.b64decode(part.blob, validate=True)
            except (binascii.Error, ValueError):
                raise CatalogError(
                    f"MCP server {connection.name} sent {part.uri} as base64 that is not"
                ) from None
            if (part.mime_type or "").startswith("text/"):  # text, sent as bytes
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    contents.append(ResourceContent(part.uri, part.mime_type, text=text))
                    continue
            contents.append(ResourceContent(part.uri, part.mime_type, data=data))
    if not contents:
        raise CatalogError(f"MCP server {connection.name} sent nothing for {uri}")
    return contents


async def list_prompts(connection: ServerConnection) -> list[PromptInfo]:
    prompts = await _all_pages(
        connection, "prompts/list", "prompts", lambda c, cursor: c.list_prompts(cursor=cursor)
    )
    return [
        PromptInfo(
            connection.name,
            p.name,
            p.title,
            p.description,
            [PromptArgument(a.name, a.description, bool(a.required)) for a in p.arguments or []],
        )
        for p in prompts
        if isinstance(p, types.Prompt)
    ]


async def get_prompt(
    connection: ServerConnection, prompt: PromptInfo, arguments: dict[str, str]
) -> tuple[str | None, list[PromptMessage]]:
    """The prompt's description and messages, for these arguments (checked first)."""
    problem = prompt.argument_problem(arguments)
    if problem is not None:
        raise CatalogError(problem)
    result = await _request(
        connection,
        f"getting prompt {prompt.name}",
        lambda c: c.get_prompt(prompt.name, arguments or None),
        _read_timeout(connection),
    )
    messages = [PromptMessage(m.role, content_text(m.content)) for m in result.messages]
    return result.description, messages


def prompt_text(messages: list[PromptMessage]) -> str:
    """A prompt's messages as one message to send: the text of a user-only prompt as it is,
    otherwise each message after its role."""
    if all(m.role == "user" for m in messages):
        return "\n\n".join(m.text for m in messages)
    return "\n\n".join(f"{m.role}: {m.text}" for m in messages)


def content_text(block: Any) -> str:
    """A content block as text: text as it is, anything else as a placeholder naming it."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} {block.mime_type}]"
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        if isinstance(inner, types.TextResourceContents):
            return inner.text
        return f"[resource {inner.uri}]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}]"
    return f"[{getattr(block, 'type', 'content')}]"


def _read_timeout(connection: ServerConnection) -> float:
    return connection.config.tool_timeout or DEFAULT_READ_TIMEOUT


async def _request(
    connection: ServerConnection,
    what: str,
    work: Callable[[Client], Awaitable[Any]],
    time_limit: float,
    *,
    subject: str | None = None,
) -> Any:
    """``what``: the request, as "reading URI"; ``subject``: what it answers with, named
    when that is too large to take ("resource URI"; by default the answer to ``what``)."""
    try:
        return await connection.use(work, time_limit)
    except ServerDown as exc:
        raise CatalogError(f"MCP server {connection.name} is not connected: {exc}") from None
    except TimeoutError:
        raise CatalogError(
            f"MCP server {connection.name} did not answer {what} within {time_limit:g} s"
        ) from None
    except MCPError as exc:
        too_large = _too_large(exc.error.data)
        if too_large is not None:
            limit, size = too_large
            sent = f" (the server sent {size})" if size else ""
            raise CatalogError(
                f"MCP server {connection.name}: {subject or f'the answer to {what}'} is larger "
                f"than the {limit} limit{sent}; it was not read, and the server is still "
                "connected"
            ) from None
        raise CatalogError(
            f"MCP server {connection.name} refused {what}: {exc.error.message}"
        ) from None


def _too_large(data: Any) -> tuple[str, str | None] | None:
    """(the limit, the size sent if known) of an answer the connection dropped as too large."""
    found = data.get("tooLarge") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not isinstance(found.get("limit"), int):
        return None
    size = found.get("size")
    return _mebibytes(found["limit"]), _mebibytes(size) if isinstance(size, int) else None


def _mebibytes(count: int) -> str:
    return f"{count / 2**20:.4g} MiB" if count >= 2**20 else f"{count:,} bytes"


async def _all_pages(
    connection: ServerConnection,
    method: str,
    field: str,
    page: Callable[[Client, str | None], Awaitable[Any]],
) -> list[Any]:
    """Every item of a paginated list, within the server's connect timeout for them all."""

    async def pages(client: Client) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            result = await page(client, cursor)
            items.extend(getattr(result, field))
            cursor = result.next_cursor
            if not cursor:
                return items
            if cursor in seen:
                raise CatalogError(
                    f"MCP server {connection.name} repeated the page cursor {cursor!r} in {method}"
                )
            seen.add(cursor)
        raise CatalogError(
            f"MCP server {connection.name}: {method} did not end after {MAX_PAGES} pages"
        )

    if not _offers(connection, method):
        return []
    return list(await _request(connection, method, pages, connection.config.timeout))


def _offers(connection: ServerConnection, method: str) -> bool:
    """Whether the server declared the capability the method belongs to."""
    capabilities = connection.server_capabilities()
    if capabilities is None:
        return True  # not known: ask, and report what it answers
    wanted = capabilities.resources if method.startswith("resources") else capabilities.prompts
    return wanted is not None


async def with_attachments(
    text: str,
    servers: Collection[str],
    connected: Callable[[str], Awaitable[ServerConnection]],
) -> tuple[str, list[Attached]]:
    """The message with each `@server:uri` it names (of a configured server) read and its
    text appended, each resource once; CatalogError if one cannot be read (the message is
    then not sent). A binary resource is named, not attached; a long one is cut."""
    named = [(m.group(1), m.group(2)) for m in ATTACHMENT.finditer(text) if m.group(1) in servers]
    parts, attached = [text], []
    for server, uri in dict.fromkeys(named):
        for part in await read_resource(await connected(server), uri):
            if part.text is None:
                shown = f"{part.describe()}: not text, not attached"
                body = f"[{shown}]"
            else:
                shown = part.describe()
                body = part.text[:ATTACH_LIMIT]
                if len(part.text) > ATTACH_LIMIT:
                    body += f"\n[cut at {ATTACH_LIMIT // 1024} KiB]"
            parts.append(attachment_block(server, part.uri, part.mime_type, body))
            attached.append(Attached(server, part.uri, shown))
    return "\n\n".join(parts), attached


def can_subscribe(connection: ServerConnection) -> bool:
    """Whether the server tells of changes to a resource it was asked to watch."""
    capabilities = connection.server_capabilities()
    resources = capabilities.resources if capabilities else None
    return bool(resources and resources.subscribe)


async def watch_resource(
    connection: ServerConnection, uri: str, changed: Callable[[str], None]
) -> None:
    """Ask the server to tell of changes to the resource: ``changed`` is told its URI at
    each. The first watcher asks the server; see ``unwatch_resource``."""
    listeners = connection.watches.listeners.setdefault(uri, set())
    listeners.add(changed)
    try:
        await _request(
            connection,
            f"watching {uri}",
            lambda _client: connection.watch(uri, connection.config.timeout),
            connection.config.timeout,
        )
    except CatalogError:
        listeners.discard(changed)
        raise


async def unwatch_resource(
    connection: ServerConnection, uri: str, changed: Callable[[str], None]
) -> None:
    """Stop telling ``changed``; the last watcher gone, the server is asked to stop."""
    listeners = connection.watches.listeners.get(uri, set())
    listeners.discard(changed)
    if listeners:
        return
    connection.watches.listeners.pop(uri, None)
    await connection.unwatch(uri, connection.config.timeout)


async def complete_argument(
    connection: ServerConnection,
    prompt: str,
    argument: str,
    typed: str,
    others: dict[str, str],
) -> list[str]:
    """What the server suggests for a prompt's argument, given what was typed so far (none
    from a server without completions, or that fails to answer)."""
    capabilities = connection.server_capabilities()
    if capabilities is None or capabilities.completions is None:
        return []
    ref = types.PromptReference(type="ref/prompt", name=prompt)
    try:
        result = await _request(
            connection,
            f"completing {prompt}'s {argument}",
            lambda c: c.complete(ref, {"name": argument, "value": typed}, others or None),
            connection.config.timeout,
        )
    except CatalogError:
        return []
    return [value for value in result.completion.values if isinstance(value, str)]
