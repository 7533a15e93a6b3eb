"""MCPAgent: one MCP server seen by the orchestrator as an agent with `{server}_{tool}` tools.

The MCP SDK is imported by the first server that connects, not with this module: a `diana`
command that starts no server (its tools known from the tool cache) never pays for it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..calls.running_call import RUNNING_CALL, RunningCall
from ..config.mcp_servers import (
    UNANSWERED_AFTER,
    MCPServerConfig,
    agent_id_for,
    normalise_tool_name,
    tool_prefix,
)
from ..models import (
    AgentHealth,
    AgentManifest,
    AgentState,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    ToolResult,
)
from ..system.clock import Clock, SystemClock
from ..system.files import MediaFiles

ProgressReport = Callable[[RunningCall, float, float | None, str | None], None]

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.shared.dispatcher import ProgressFnT

    from .connection import ServerConnection
    from .pins import ToolPins
    from .tool_cache import CachedTools


def risk_from_annotations(annotations: types.ToolAnnotations | None) -> RiskLevel:
    """What a server says of its tool, read cautiously: no word means irreversible."""
    if annotations is None:
        return RiskLevel.IRREVERSIBLE
    if annotations.read_only_hint:
        return RiskLevel.REVERSIBLE
    if annotations.destructive_hint is False:
        return RiskLevel.REVERSIBLE_WITH_DELAY
    return RiskLevel.IRREVERSIBLE


def described(server: str, tool: types.Tool) -> str:
    """A tool's description naming its server: the model (and a person) can tell two
    servers' tools of one kind apart."""
    said = (tool.description or "").strip() or tool.name
    return f"{said} (MCP server {server})"


def definition_for(server: str, tool: types.Tool, timeout: float | None) -> ToolDefinition:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    hints = tool.annotations
    return ToolDefinition(
        name=f"{tool_prefix(server)}_{normalise_tool_name(tool.name)}",
        description=described(server, tool),
        parameters=schema,
        category=f"mcp:{server}",
        annotations=ToolAnnotations(
            readOnlyHint=hints.read_only_hint if hints else None,
            destructiveHint=hints.destructive_hint if hints else None,
            idempotentHint=hints.idempotent_hint if hints else None,
            openWorldHint=hints.open_world_hint if hints else None,
        ),
        risk=risk_from_annotations(hints),
        timeout=timeout,
    )


RESOURCE_TEXT_LIMIT = 64 * 1024  # characters of an embedded resource's text kept in a result


def map_result(result: types.CallToolResult, media: MediaFiles | None = None) -> ToolResult:
    """An MCP result as a ToolResult: text joined; an embedded text resource's text under a
    line naming it; images, audio and binary resources by type and size, kept as files a
    person can open (``media``) and named by their path; resource links by URI."""
    import mcp_types as types

    def kept(kind: str, data: str, mime: str | None) -> str:
        try:
            raw = base64.b64decode(data, validate=False) if data else b""
        except ValueError:
            return f"[{kind} {mime}, not valid base64]"
        where = ""
        if media is not None and raw:
            try:
                where = f": {media.keep(raw, mime)}"
            except OSError as exc:
                where = f" (not kept: {exc.strerror})"
        return f"[{kind} {mime or 'of unknown type'}, {len(raw):,} bytes{where}]"

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(kept(kind, block.data, block.mime_type))
        elif isinstance(block, types.ResourceLink):
            mime = f", {block.mime_type}" if block.mime_type else ""
            parts.append(f"[resource link {block.uri} ({block.name}{mime})]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                text = resource.text
                cut = len(text) - RESOURCE_TEXT_LIMIT
                if cut > 0:
                    text = text[:RESOURCE_TEXT_LIMIT] + f"… [cut: {cut:,} more characters]"
                mime = f" ({resource.mime_type})" if resource.mime_type else ""
                parts.append(f"[resource {resource.uri}{mime}]\n{text}")
            else:
                parts.append(kept(f"resource {resource.uri}", resource.blob, resource.mime_type))
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    text = "\n".join(parts)
    if result.is_error:
        return ToolResult.fail(
            ErrorCode.TOOL_EXECUTION_FAILED,
            text or "the server reported an error without a message",
        )
    structured = result.structured_content
    if isinstance(structured, dict) and set(structured) == {"result"}:
        return ToolResult.ok(structured["result"])  # the SDK's wrapping of a plain return
    return ToolResult.ok(structured if structured is not None else text)


class MCPAgent:
    """The orchestrator's view of one server. The MCP manager owns the connection.

    A server started on demand has no connection until a call needs it: until then its
    tools are the ones the tool cache holds (so a name is resolved, arguments checked and
    approval decided without starting anything), and the first call that runs connects it
    through ``connect``. The server's start counts toward that call's time limit."""

    def __init__(
        self,
        config: MCPServerConfig,
        *,
        connection: ServerConnection | None = None,
        cached: CachedTools | None = None,
        connect: Callable[[], ServerConnection] | None = None,
        clock: Clock | None = None,
        on_progress: ProgressReport | None = None,
        media: MediaFiles | None = None,
        pins: ToolPins | None = None,
    ) -> None:
        self.config = config
        self._pins = pins  # a tool whose definition changed since it was accepted is held
        self._media = media  # where images and binaries in results are kept
        self.connection = connection
        self.cached = cached
        self._connect = connect
        self._on_progress = on_progress  # told of the server's progress on a call
        self.agent_id = agent_id_for(config.name)
        self._clock = clock or SystemClock()
        self._originals: dict[str, str] = {}
        self.by_server_tool: dict[str, ToolDefinition] = {}
        self.rejected: list[str] = []
        self.state = AgentState.STOPPED

    async def initialize(self) -> None:
        self.state = AgentState.INITIALIZED

    async def shutdown(self) -> None:
        self.state = AgentState.STOPPED

    def get_manifest(self) -> AgentManifest:
        if self.connection is None and self.cached is not None:
            definitions = list(self.cached.definitions.values())
            self._originals = dict(self.cached.originals)
            self.by_server_tool = {self._originals[d.name]: d for d in definitions}
        else:
            definitions = self._live_definitions()
        return AgentManifest(
            id=self.agent_id,
            name=f"MCP server {self.config.name}",
            tools=definitions,
            capabilities=["mcp"],
            requires_approval=any(d.risk is not RiskLevel.REVERSIBLE for d in definitions),
            defer_schema_checks=self.connection is None and self.cached is not None,
        )

    def _live_definitions(self) -> list[ToolDefinition]:
        config = self.config
        tools = self.connection.state.tools if self.connection is not None else []
        by_name: dict[str, list[tuple[str, ToolDefinition]]] = {}
        rejected: list[str] = []
        for tool in tools:
            execution = getattr(tool, "execution", None)
            required = execution is not None and execution.task_support == "required"
            if required and not (self.connection and self.connection.runs_as_task(tool.name)):
                # Tasks are of protocol 2025-11-25 only: on another, the tool cannot be called.
                protocol = self.connection.state.protocol_version if self.connection else None
                rejected.append(
                    f"{tool.name}: it runs only as a task, which protocol {protocol} has not"
                )
                continue
            try:
                definition = definition_for(config.name, tool, config.tool_timeout)
            except ValidationError as exc:
                rejected.append(f"{tool.name}: {exc.errors()[0]['msg']}")
                continue
            by_name.setdefault(definition.name, []).append((tool.name, definition))
        definitions: list[ToolDefinition] = []
        originals: dict[str, str] = {}
        for name, named in by_name.items():
            if len(named) > 1:
                # Which one would run is not the one whose risk was judged: neither is kept.
                listed = " and ".join(repr(original) for original, _ in named)
                rejected.append(f"{listed} were both rejected: they are both named {name}")
                continue
            ((original, definition),) = named
            originals[name] = original
            definitions.append(definition)
        self._originals, self.rejected = originals, rejected
        self.by_server_tool = {originals[d.name]: d for d in definitions}
        return definitions

    @property
    def upstream_names(self) -> dict[str, str]:
        """Each tool's name as the server lists it, by the name diana exposes it under."""
        return dict(self._originals)

    async def _connected(self) -> ServerConnection:
        """The live connection, made now if the server was waiting for its first call."""
        if self.connection is None:
            assert self._connect is not None, "an agent without a connection connects on demand"
            self.connection = self._connect()
        connection = self.connection
        if self.cached is not None:  # the first attempt, then the server's own tool list
            await connection.wait_first_attempt()
            self.cached = None
            self._live_definitions()
        return connection

    @property
    def checks_definitions(self) -> bool:
        return self._pins is not None

    async def refusal(self, tool_name: str) -> ToolResult | None:
        """A call of a held tool is refused (core/mcp/pins.py), checked against the definition
        the server offers now (as last listed, or from the tool cache before it starts)."""
        original = self._originals.get(tool_name)
        definition = self.by_server_tool.get(original) if original is not None else None
        if self._pins is None or definition is None:
            return None
        from ..config.mcp_servers import launch_identity

        why = await self._pins.refusal(self.config.name, launch_identity(self.config), definition)
        return None if why is None else ToolResult.fail(ErrorCode.TOOL_HELD, why)

    async def withheld(self) -> set[str]:
        """Its tools held now (core/mcp/pins.py): the model is not offered them."""
        if self._pins is None:
            return set()
        from ..config.mcp_servers import launch_identity

        listed = list(self.by_server_tool.values())
        return await self._pins.held_names(launch_identity(self.config), listed)

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult:
        connection = await self._connected()
        # A change the server announced is listed (and its pins checked) before any call
        # reaches it: a call made right after the announcement could meet the new tool.
        if (stale := await connection.tools_current()) is not None:
            return ToolResult.fail(
                ErrorCode.TOOL_HELD, f"{tool_name} is held: server {self.config.name}: {stale}"
            )
        # Checked again on the definition just listed: the server may have started only now,
        # or changed its tools while a person decided.
        held = await self.refusal(tool_name)
        if held is not None:
            return held
        original = self._originals.get(tool_name)
        if original is None and not connection.ready:  # it listed no tools: it is not there
            return ToolResult.fail(ErrorCode.AGENT_UNAVAILABLE, connection.unavailable_reason())
        if original is None:
            return ToolResult.fail(
                ErrorCode.TOOL_NOT_FOUND, f"server {self.config.name} has no tool {tool_name}"
            )
        return await self._call(connection, tool_name, original, params, url_asked=False)

    async def _call(
        self,
        connection: ServerConnection,
        tool_name: str,
        original: str,
        params: dict[str, Any],
        *,
        url_asked: bool,
    ) -> ToolResult:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, URL_ELICITATION_REQUIRED

        from .failures import MoreAccessNeeded, ServerDown

        timeout = self.config.call_time
        try:
            result = await connection.call_tool(original, params, timeout, self._progress())
        except MoreAccessNeeded as exc:
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE, f"MCP server {self.config.name} {exc}"
            )
        except ServerDown as exc:
            return ToolResult.fail(
                ErrorCode.AGENT_UNAVAILABLE, f"MCP server {self.config.name} is down: {exc}"
            )
        except RuntimeError as exc:
            # The SDK checks structured content against the tool's output schema.
            from jsonschema.exceptions import ValidationError as SchemaBreach

            cause = exc.__cause__
            if not isinstance(cause, SchemaBreach):
                raise
            where = "/".join(str(part) for part in cause.absolute_path) or "the result"
            return ToolResult.fail(
                ErrorCode.INVALID_RESPONSE,
                f"{tool_name} returned structured content that does not fit its output schema: "
                f"{where}: {cause.message}",
            )
        except MCPError as exc:
            code = exc.error.code
            if code == REQUEST_TIMEOUT:
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_TIMEOUT,
                    f"{tool_name} got no answer within {timeout:g} s",
                )
            if code == CONNECTION_CLOSED:
                return ToolResult.fail(
                    ErrorCode.AGENT_UNAVAILABLE,
                    f"MCP server {self.config.name} went down during the call: "
                    f"{connection.unavailable_reason()}",
                )
            if code == URL_ELICITATION_REQUIRED and not url_asked:
                # The server needs the person to open a page first (a sign-in, a payment):
                # asked as a URL elicitation, then the call is made once more.
                refusal = await connection.requests.open_urls_first(exc.error)
                if refusal is not None:
                    return ToolResult.fail(ErrorCode.REJECTED, f"{tool_name}: {refusal}")
                return await self._call(connection, tool_name, original, params, url_asked=True)
            said = re.sub(r"^(MCP error -?\d+: )+", "", exc.error.message)
            return ToolResult.fail(ErrorCode.TOOL_EXECUTION_FAILED, f"MCP error {code}: {said}")
        self.state = AgentState.RUNNING
        return map_result(result, self._media)

    def _progress(self) -> ProgressFnT | None:
        """For the call being run: its progress notifications, as progress of that call."""
        call, report = RUNNING_CALL.get(), self._on_progress
        if call is None or report is None:
            return None

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            report(call, progress, total, message)

        return progress

    async def health(self) -> AgentHealth:
        connection = self.connection
        if connection is None:
            return AgentHealth(
                agent_id=self.agent_id,
                status="healthy",
                state=self.state,
                message="not started: its first call starts it (tools from the tool cache)",
                last_checked=self._clock.now(),
                tool_count=len(self.cached.definitions) if self.cached else 0,
            )
        ready = connection.ready
        message = None if ready else connection.unavailable_reason()
        if ready and connection.silence.unanswered_for() > UNANSWERED_AFTER:
            # Not given up yet, but not healthy either (the same words while it lasts: a
            # change of health is news).
            ready = False
            message = (
                f"not answering: a health check has waited over {UNANSWERED_AFTER:g} s "
                f"(the server is given up after {connection.probe_timeout:g} s of silence)"
            )
        return AgentHealth(
            agent_id=self.agent_id,
            status="healthy" if ready else "unhealthy",
            state=self.state,
            message=message,
            last_checked=self._clock.now(),
            tool_count=len(connection.state.tools),
        )
