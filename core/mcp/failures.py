"""Why an MCP server is down, in words a person can act on: the exceptions a connection
raises when it has none (``ServerDown``, ``MoreAccessNeeded``) and ``describe_failure``,
which turns whatever ended an attempt (a missing command, a refused sign-in, an HTTP error,
a timeout) into one line for the status, the log and the detail view."""

from __future__ import annotations

from collections.abc import Iterable

import httpx2
import mcp_types as types
from mcp import MCPError
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError

from ..config.mcp_servers import MCPServerConfig
from ..content.http_body import BodyTooLarge, BodyUnreadable
from .oauth import SignInFailed, SignInNeeded
from .stdio import ProcessExit


class ServerDown(Exception):
    """The live connection ended; the message says why, for a person."""


class MoreAccessNeeded(ServerDown):
    """The server ended a call asking for more access than it was granted (OAuth step-up);
    the message says how a person grants it."""


def describe_failure(exc: BaseException, config: MCPServerConfig) -> str:
    """What went wrong, in words a person can act on."""
    said = _describe(exc, config)
    if config.transport == "stdio" or isinstance(first_leaf(exc), TimeoutError):
        return said
    path = (config.url or "").split("?")[0].rstrip("/")
    if config.transport == "streamable-http" and path.endswith("/sse"):
        return said + ' (the URL ends in /sse: for an SSE server, add "transport": "sse")'
    if config.transport == "sse" and path.endswith("/mcp"):
        return said + ' (the URL ends in /mcp: for streamable HTTP, leave "transport" out)'
    return said


def _describe(exc: BaseException, config: MCPServerConfig) -> str:
    leaf = first_leaf(exc)
    if isinstance(leaf, ServerDown | SignInNeeded):
        return str(leaf)
    if isinstance(leaf, SignInFailed | OAuthFlowError | OAuthTokenError | OAuthRegistrationError):
        said = str(leaf).strip().splitlines()[0] if str(leaf).strip() else type(leaf).__name__
        if "validation error" in said:  # pydantic's account of a malformed answer
            said = said.split(":")[0] + ": the authorization server's answer is not valid OAuth"
        return f"sign-in failed: {said}"
    if isinstance(leaf, FileNotFoundError) and config.transport == "stdio":
        return (
            f'command not found: "{config.display_command}" — install it or fix "command" '
            f"in mcp-servers.json"
        )
    if isinstance(leaf, PermissionError) and config.transport == "stdio":
        return f'command "{config.display_command}" cannot be run: permission denied'
    if isinstance(leaf, MCPError):
        if leaf.error.code == types.CONNECTION_CLOSED:
            return "the server closed the connection during the handshake"
        if leaf.error.code == types.REQUEST_TIMEOUT:
            return f"no answer to the MCP handshake within {config.timeout:g} s"
        return f"MCP error {leaf.error.code}: {leaf.error.message}"
    if isinstance(leaf, httpx2.ConnectError):
        detail = str(leaf).replace(config.url or "", config.display_url) or type(leaf).__name__
        return f"cannot connect to {config.display_url}: {detail}"
    if isinstance(leaf, BodyTooLarge):
        return f"{config.display_url} answered {leaf}"
    if isinstance(leaf, BodyUnreadable):
        return f"{config.display_url} answered something unreadable: {leaf}"
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"{config.display_url} answered HTTP {leaf.response.status_code}"
    if isinstance(leaf, TimeoutError):
        return f"no answer within {config.timeout:g} s"
    return f"{type(leaf).__name__}: {leaf}"


def exit_reason(exit_: ProcessExit, stderr: Iterable[str], when: str = "") -> str:
    """A process that ended, with the last line it wrote to stderr (``when``: before what)."""
    reason = f"process {exit_.describe()}{when}"
    tail = next((line for line in reversed(list(stderr)) if line.strip()), None)
    return reason + (f"; last stderr line: {tail.strip()[:200]}" if tail else "")


def needs_sign_in(exc: BaseException) -> bool:
    return isinstance(first_leaf(exc), SignInNeeded)


def first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
