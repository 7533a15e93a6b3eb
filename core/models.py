"""Core data types: tools, agents, results, health, errors."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOOL_NAME_PATTERN = r"^[a-z_][a-z0-9_]*$"
AGENT_ID_PATTERN = r"^[a-z][a-z0-9-]*$"

# Keywords first in this order, the rest after them. When one argument breaks two rules the
# validator reports the first rule it meets, so the order decides which error a person sees.
_KEYWORD_ORDER = (
    "type",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "additionalProperties",
)
_SUBSCHEMA = ("items", "additionalProperties", "not")
_SUBSCHEMAS = ("anyOf", "allOf", "oneOf", "prefixItems")


def parameters_of(model: type[BaseModel]) -> dict[str, Any]:
    """A tool's JSON Schema for its arguments, made from the model of its parameters: flat
    (nested models written out in place), without titles, and with ``"type": "object"``
    first. A field typed ``X | None`` that defaults to None is an argument that may be left
    out, so its schema is that of ``X``. The model's docstring is not part of it: the tool's
    description says what the tool does."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    schema.pop("description", None)
    flat: dict[str, Any] = _flat(schema, definitions)
    return flat


def _flat(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    schema = _omittable(schema)
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        schema = _omittable({**definitions[name], **rest})
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: _flat(sub, definitions) for name, sub in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = _flat(value, definitions)
        elif key in _SUBSCHEMAS:
            out[key] = [_flat(sub, definitions) for sub in value]
        else:
            out[key] = value
    first = {key: out.pop(key) for key in _KEYWORD_ORDER if key in out}
    return {**first, **out}


def _omittable(schema: dict[str, Any]) -> dict[str, Any]:
    """``X | None = None`` as the schema of ``X``: the argument may be left out, not null."""
    branches = schema.get("anyOf")
    if "default" not in schema or schema["default"] is not None or not branches:
        return schema
    kept = [branch for branch in branches if branch != {"type": "null"}]
    if len(kept) != 1 or len(branches) != 2:
        return schema
    rest = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
    return {**kept[0], **rest}


# The origin of every call a host makes through `diana serve`: "host:" and its client's name.
HOST_ORIGIN = "host:"


class ErrorCode(StrEnum):
    """Why a call or an agent operation failed (snake_case, as the model and scripts read it)."""

    OLLAMA_UNAVAILABLE = "ollama_unavailable"
    MODEL_NOT_FOUND = "model_not_found"
    SYSTEM_PROMPT_MISSING = "system_prompt_missing"
    TOOL_NOT_FOUND = "tool_not_found"
    TOOL_EXECUTION_FAILED = "tool_execution_failed"
    CONTEXT_OVERFLOW = "context_overflow"
    NETWORK_TIMEOUT = "network_timeout"
    INVALID_RESPONSE = "invalid_response"
    AGENT_INIT_FAILED = "agent_init_failed"
    AGENT_SHUTDOWN_FAILED = "agent_shutdown_failed"
    AGENT_NOT_FOUND = "agent_not_found"
    AGENT_UNAVAILABLE = "agent_unavailable"
    TOOL_EXECUTION_TIMEOUT = "tool_execution_timeout"
    MCP_CONNECTION_FAILED = "mcp_connection_failed"
    MCP_TOOL_DISCOVERY_FAILED = "mcp_tool_discovery_failed"
    # Ours: arguments that fail the tool's JSON Schema never reach the agent.
    INVALID_ARGUMENTS = "invalid_arguments"
    CANCELLED = "cancelled"
    # Approvals: the call waits for a person, or a policy rule forbids it.
    PENDING_APPROVAL = "pending_approval"
    DENIED_BY_POLICY = "denied_by_policy"
    REJECTED = "rejected"
    # Tool pins: the tool's definition changed since a person accepted it (core/mcp/pins.py).
    TOOL_HELD = "tool_held"


class RiskLevel(StrEnum):
    """How undoable a tool's effect is."""

    REVERSIBLE = "reversible"
    REVERSIBLE_WITH_DELAY = "reversible_with_delay"
    IRREVERSIBLE = "irreversible"


class AgentState(StrEnum):
    """Lifecycle of an agent; more states may be added."""

    INITIALIZED = "initialized"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"


class AgentError(Exception):
    """Raised by agents for lifecycle or execution failures with a specific code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ToolAnnotations(BaseModel):
    """MCP-style behaviour hints, kept for the approval policy."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    read_only: bool | None = Field(default=None, alias="readOnlyHint")
    destructive: bool | None = Field(default=None, alias="destructiveHint")
    idempotent: bool | None = Field(default=None, alias="idempotentHint")
    open_world: bool | None = Field(default=None, alias="openWorldHint")


class ToolDefinition(BaseModel):
    """A tool an agent exposes: name, description, JSON Schema for its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    examples: list[str] = Field(default_factory=list)
    category: str | None = None
    annotations: ToolAnnotations = Field(default_factory=ToolAnnotations)
    risk: RiskLevel = RiskLevel.IRREVERSIBLE
    timeout: float | None = Field(default=None, gt=0)
    # Every call waits for a person, whatever policy.json allows (code_execution).
    always_ask: bool = False
    # Called by diana itself (an MCP server's sampling request): never offered to the model,
    # and not callable by name from a command.
    internal: bool = False
    # Why the model is not offered this tool now (web_search with no web backend): it can
    # still be called by name, and answers with this.
    unavailable: str | None = None

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('parameters must be a JSON Schema with "type": "object"')
        return value


class AgentManifest(BaseModel):
    """What an agent offers: its id, name, tools and routing hints."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=AGENT_ID_PATTERN)
    name: str = Field(min_length=1)
    tools: list[ToolDefinition] = Field(default_factory=list)
    capabilities: list[str] = Field(default_factory=list)
    requires_approval: bool = False
    # The tools' parameter schemas were checked when a diana process listed them (the MCP
    # tool cache): each is checked again at its first call, not at registration.
    defer_schema_checks: bool = False
    # The tools' parameter schemas are part of diana (its own agents), checked by its test
    # suite (tests/test_tool_schemas.py): a command does not check them again at a call.
    fixed_schemas: bool = False


class ToolResult(BaseModel):
    """The outcome of one tool call."""

    success: bool
    data: Any = None
    error: str | None = None
    error_code: ErrorCode | None = None

    @classmethod
    def ok(cls, data: Any = None) -> ToolResult:
        return cls(success=True, data=data)

    @classmethod
    def fail(cls, code: ErrorCode, error: str, data: Any = None) -> ToolResult:
        return cls(success=False, error=error, error_code=code, data=data)


HealthStatus = Literal["healthy", "unhealthy", "unknown"]


class AgentHealth(BaseModel):
    """One agent's health as last checked."""

    agent_id: str
    status: HealthStatus
    state: AgentState
    message: str | None = None
    last_checked: datetime
    tool_count: int = 0
