"""The built-in tools' argument schemas, generated from their parameter models: valid, flat,
and accepting and refusing the same arguments, with the same errors, as the hand-written
schemas they replaced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest
from diana.core.calls.tool_names import AgentSlot, ToolNames
from diana.core.calls.tool_schemas import (
    RegisteredTool,
    accepts_no_arguments,
    describe_validation_error,
)
from diana.core.config.mcp_servers import SERVER_NAME_PATTERN
from diana.core.events import EventBus
from diana.core.llm.sampling import SAMPLING
from diana.core.models import ToolDefinition, parameters_of
from diana.core.tools.builtin import GET_CURRENT_TIME, OBSIDIAN_LOG, SAVE_FACT, SEARCH_MEMORY
from diana.core.tools.code import CODE_EXECUTION
from diana.core.tools.human import REQUEST_HUMAN_INPUT
from diana.core.tools.mcp_admin import (
    CANCEL_SUBAGENT_WORK,
    CHECK_SUBAGENT_STATUS,
    LIST_AVAILABLE_TOOLS,
    REQUEST_SERVER_ADDITION,
)
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, Field

TOOLS: dict[str, ToolDefinition] = {
    tool.name: tool
    for tool in (
        SAVE_FACT,
        SEARCH_MEMORY,
        OBSIDIAN_LOG,
        GET_CURRENT_TIME,
        CODE_EXECUTION,
        REQUEST_HUMAN_INPUT,
        REQUEST_SERVER_ADDITION,
        CHECK_SUBAGENT_STATUS,
        CANCEL_SUBAGENT_WORK,
        LIST_AVAILABLE_TOOLS,
        SAMPLING,
    )
}

# (property names in order, required, additionalProperties) of each tool's arguments.
SHAPES: dict[str, tuple[list[str], list[str], bool | None]] = {
    "save_fact": (["content", "tags", "metadata"], ["content"], False),
    "search_memory": (["query", "limit", "tag"], ["query"], False),
    "obsidian_log": (["entry"], ["entry"], False),
    "get_current_time": (["timezone"], [], False),
    "code_execution": (["language", "code"], ["language", "code"], False),
    "request_human_input": (["question", "choices"], ["question"], False),
    "mcp_request_server_addition": (
        ["name", "config", "registry_name", "version", "settings", "purpose", "priority", "plan"],
        [],
        False,
    ),
    "mcp_check_subagent_status": (["request_id"], [], False),
    "mcp_cancel_subagent_work": (["request_id", "reason"], ["request_id"], False),
    "mcp_list_available_tools": (["server"], [], False),
    "mcp_sampling": (
        [
            "server",
            "messages",
            "system_prompt",
            "reply_limit",
            "model_hints",
            "temperature",
            "stop_sequences",
        ],
        ["server", "messages", "reply_limit"],
        False,
    ),
}

# The hand-written schemas the models replaced, as they were: the reference for validation.
_SERVER_CONFIG = {
    "type": "object",
    "description": (
        'How to reach the server: "command" (with "args", "env") for a local program, or '
        '"url" (with "transport", "headers") for a remote one.'
    ),
    "properties": {
        "command": {"type": "string", "minLength": 1, "description": "Program to run."},
        "args": {"type": "array", "items": {"type": "string"}, "description": "Its arguments."},
        "env": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Environment variables; ${VAR} takes one from DIANA's environment.",
        },
        "cwd": {"type": "string", "description": "Working directory."},
        "url": {"type": "string", "pattern": "^https?://", "description": "A remote server."},
        "transport": {"type": "string", "enum": ["stdio", "streamable-http", "sse"]},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 30,
            "description": "Seconds to connect and to list tools (default 10).",
        },
    },
    "additionalProperties": False,
}
_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"enum": ["user", "assistant"]},
        "text": {"type": "string"},
        "images": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"mimeType": {"type": "string"}, "data": {"type": "string"}},
                "required": ["data"],
            },
        },
    },
    "required": ["role", "text"],
    "additionalProperties": False,
}
OLD: dict[str, dict[str, Any]] = {
    "save_fact": {
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": 10000,
                "description": "The fact, in one or two sentences.",
            },
            "tags": {
                "type": "array",
                "items": {"type": "string", "pattern": r"^[\w-]+$"},
                "maxItems": 20,
                "description": "Optional keywords.",
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    "search_memory": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "Words to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "obsidian_log": {
        "type": "object",
        "properties": {
            "entry": {
                "type": "string",
                "minLength": 1,
                "maxLength": 20000,
                "description": "Markdown text: one entry, its later lines indented under it.",
            },
        },
        "required": ["entry"],
        "additionalProperties": False,
    },
    "get_current_time": {
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "minLength": 1,
                "default": "UTC",
                "description": "IANA time zone name.",
            },
        },
        "additionalProperties": False,
    },
    "code_execution": {
        "type": "object",
        "properties": {
            "language": {"type": "string", "enum": ["python", "shell"]},
            "code": {"type": "string", "minLength": 1, "maxLength": 100_000},
        },
        "required": ["language", "code"],
        "additionalProperties": False,
    },
    "request_human_input": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 2000},
            "choices": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": 10,
                "description": "Optional answers to pick from.",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    "mcp_request_server_addition": {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "pattern": SERVER_NAME_PATTERN,
                "maxLength": 64,
                "description": "The server's name; its tools are called {name}_{tool}.",
            },
            "config": _SERVER_CONFIG,
            "registry_name": {
                "type": "string",
                "pattern": r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$",
                "maxLength": 200,
            },
            "version": {"type": "string", "minLength": 1, "maxLength": 100},
            "settings": {"type": "object", "additionalProperties": {"type": "string"}},
            "purpose": {"type": "string", "maxLength": 500, "description": "Why it is needed."},
            "priority": {"type": "string", "enum": ["high", "normal", "low"]},
        },
        # A server by its config or by its registry name (then its name may be left out).
        "oneOf": [{"required": ["config"]}, {"required": ["registry_name"]}],
        "additionalProperties": False,
    },
    "mcp_check_subagent_status": {
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "minLength": 1, "description": "e.g. req-1"},
        },
        "additionalProperties": False,
    },
    "mcp_cancel_subagent_work": {
        "type": "object",
        "properties": {
            "request_id": {"type": "string", "minLength": 1},
            "reason": {"type": "string", "maxLength": 500},
        },
        "required": ["request_id"],
        "additionalProperties": False,
    },
    "mcp_list_available_tools": {
        "type": "object",
        "properties": {
            "server": {"type": "string", "minLength": 1, "description": "One server's name."},
        },
        "additionalProperties": False,
    },
    "mcp_sampling": {
        "type": "object",
        "properties": {
            "server": {"type": "string", "minLength": 1, "description": "The server asking."},
            "messages": {"type": "array", "items": _MESSAGE, "minItems": 1},
            "system_prompt": {"type": ["string", "null"]},
            "reply_limit": {"type": "integer", "minimum": 1},
            "model_hints": {"type": "array", "items": {"type": "string"}},
            "temperature": {"type": ["number", "null"]},
            "stop_sequences": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["server", "messages", "reply_limit"],
        "additionalProperties": False,
    },
}

_HI = [{"role": "user", "text": "hi"}]

# Arguments, valid and not, for each tool.
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "save_fact": [
        {"content": "x"},
        {"content": "x", "tags": ["a-b", "c_d", "é"]},
        {"content": "x", "tags": ["tag\n"]},
        {},
        {"bogus": 1},
        {"content": ""},
        {"content": 5},
        {"content": "x" * 10_001},
        {"content": "x", "tags": ["a b"]},
        {"content": "x", "tags": ["a"] * 21},
        {"content": "x", "tags": "a"},
        {"content": "x", "extra": 1},
    ],
    "search_memory": [
        {"query": "q"},
        {"query": "q", "limit": 50},
        {"query": "q", "limit": 5.0},
        {"query": ""},
        {"query": "q", "limit": 0},
        {"query": "q", "limit": 51},
        {"query": "q", "limit": True},
        {"query": "q", "limit": "5"},
        {"limit": 5},
    ],
    "obsidian_log": [
        {"entry": "a\nb"},
        {"entry": ""},
        {"entry": "x" * 20_001},
        {"entry": None},
        {},
    ],
    "get_current_time": [
        {},
        {"timezone": "Europe/Paris"},
        {"timezone": 5},
        {"timezone": ""},
        {"zone": "UTC"},
    ],
    "code_execution": [
        {"language": "python", "code": "print(1)"},
        {"language": "shell", "code": "echo hi"},
        {"language": "ruby", "code": "puts 1"},
        {"language": 5, "code": "x"},
        {"language": "python", "code": ""},
        {"language": "python"},
        {},
    ],
    "request_human_input": [
        {"question": "Which?"},
        {"question": "Which?", "choices": ["a", "b"]},
        {"question": "Which?", "choices": [""]},
        {"question": "Which?", "choices": ["a"] * 11},
        {"question": "x" * 2001},
        {"question": "Which?", "choices": None},
        {"choices": ["a"]},
    ],
    "mcp_request_server_addition": [
        {"name": "time", "config": {"command": "uvx", "args": ["mcp-server-time"]}},
        {
            "name": "web",
            "config": {
                "url": "https://example.org/mcp",
                "transport": "sse",
                "headers": {"X-Key": "v"},
                "timeout": 30,
            },
            "purpose": "search",
        },
        {"name": "t", "config": {"command": "x", "env": {"A": "1"}, "cwd": "/tmp"}},
        {"name": "-bad", "config": {"command": "x"}},
        {"name": "a" * 65, "config": {"command": "x"}},
        {"name": "t", "config": {"url": "ftp://example.org"}},
        {"name": "t", "config": {"url": "https://x", "transport": "ws"}},
        {"name": "t", "config": {"command": "x", "timeout": 0}},
        {"name": "t", "config": {"command": "x", "timeout": 31}},
        {"name": "t", "config": {"command": ""}},
        {"name": "t", "config": {"command": "x", "env": {"A": 1}}},
        {"name": "t", "config": {"command": "x", "shell": True}},
        {"name": "t", "config": None},
        {"name": "t", "config": {"command": "x"}, "purpose": "x" * 501},
        {"name": "t"},
        {"registry_name": "io.github.modelcontextprotocol/time"},
        {"registry_name": "io.example/x", "version": "1.0", "settings": {"KEY": "${KEY}"}},
        {"registry_name": "no-slash"},
        {"registry_name": "io.example/x", "config": {"command": "x"}},
        {"registry_name": "io.example/x", "settings": {"KEY": 1}},
        {"registry_name": "io.example/x", "priority": "high"},
        {"registry_name": "io.example/x", "priority": "urgent"},
    ],
    "mcp_check_subagent_status": [
        {},
        {"request_id": "req-1"},
        {"request_id": ""},
        {"request_id": None},
        {"id": "req-1"},
    ],
    "mcp_cancel_subagent_work": [
        {"request_id": "req-1"},
        {"request_id": "req-1", "reason": "not needed"},
        {"request_id": "req-1", "reason": "x" * 501},
        {"reason": "x"},
        {},
    ],
    "mcp_list_available_tools": [
        {},
        {"server": "time"},
        {"server": ""},
        {"server": 3},
    ],
    "mcp_sampling": [
        {"server": "s", "messages": _HI, "reply_limit": 10},
        {
            "server": "s",
            "messages": [
                {"role": "user", "text": "look", "images": [{"data": "AA==", "mimeType": "x"}]},
                {"role": "assistant", "text": "ok"},
            ],
            "system_prompt": None,
            "temperature": None,
            "model_hints": ["llama"],
            "stop_sequences": ["END"],
            "reply_limit": 1,
        },
        {
            "server": "s",
            "messages": [{"role": "user", "text": "x", "images": [{"data": "AA==", "more": 1}]}],
            "system_prompt": "Be brief.",
            "temperature": 0.5,
            "reply_limit": 5,
        },
        {"server": "s", "messages": [], "reply_limit": 10},
        {"server": "s", "messages": [{"role": "system", "text": "x"}], "reply_limit": 10},
        {"server": "s", "messages": [{"role": "user"}], "reply_limit": 10},
        {"server": "s", "messages": [{"role": "user", "text": "x", "at": 1}], "reply_limit": 1},
        {
            "server": "s",
            "messages": [{"role": "user", "text": "x", "images": [{"mimeType": "x"}]}],
            "reply_limit": 1,
        },
        {"server": "s", "messages": _HI, "reply_limit": 0},
        {"server": "s", "messages": _HI, "reply_limit": 1, "system_prompt": 5},
        {"server": "s", "messages": _HI, "reply_limit": 1, "temperature": "hot"},
        {"server": "", "messages": _HI, "reply_limit": 1},
        {"server": "s", "messages": _HI},
    ],
}


def subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema inside this one, itself included (property names are not schemas)."""
    if isinstance(schema, list):
        for item in schema:
            yield from subschemas(item)
        return
    if not isinstance(schema, dict):
        return
    yield schema
    for key, value in schema.items():
        if key == "properties":
            yield from subschemas(list(value.values()))
        elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
            yield from subschemas(value)


def problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What the orchestrator would say of these arguments, or None if they are valid."""
    error = best_match(Draft202012Validator(schema).iter_errors(arguments))
    return None if error is None else describe_validation_error(error)


def test_every_built_in_tool_is_covered() -> None:
    assert set(TOOLS) == set(SHAPES) == set(OLD) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_schema_is_a_valid_flat_json_schema(name: str) -> None:
    schema = TOOLS[name].parameters
    Draft202012Validator.check_schema(schema)
    assert next(iter(schema.items())) == ("type", "object")
    assert "description" not in schema  # the tool's own description says what it does
    for sub in subschemas(schema):
        assert not {"title", "$defs", "$ref"} & set(sub), sub
        # An argument may be left out; it is null only where the old schema said so.
        assert "anyOf" not in sub and sub.get("default", "unset") is not None, sub


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_schema_has_the_same_arguments(name: str) -> None:
    schema = TOOLS[name].parameters
    properties, required, additional = SHAPES[name]
    assert list(schema["properties"]) == properties
    assert schema.get("required", []) == required
    assert schema.get("additionalProperties") is additional


@pytest.mark.parametrize(
    ("name", "arguments"),
    [(name, arguments) for name, examples in EXAMPLES.items() for arguments in examples],
)
def test_arguments_validate_as_with_the_old_schema(name: str, arguments: dict[str, Any]) -> None:
    assert problem(TOOLS[name].parameters, arguments) == problem(OLD[name], arguments)


def test_examples_hold_both_valid_and_invalid_arguments() -> None:
    for name, examples in EXAMPLES.items():
        outcomes = {problem(OLD[name], arguments) is None for arguments in examples}
        assert outcomes == {True, False}, name


def test_each_tool_s_own_examples_are_valid() -> None:
    import json

    for tool in TOOLS.values():
        for example in tool.examples:
            assert problem(tool.parameters, json.loads(example)) is None, (tool.name, example)


def test_error_messages_name_the_argument() -> None:
    assert problem(GET_CURRENT_TIME.parameters, {"timezone": 5}) == (
        "argument \"timezone\": 5 is not of type 'string'"
    )
    # Both rules broken: the missing argument is reported, as before.
    assert problem(SAVE_FACT.parameters, {"bogus": 1}) == 'missing required argument "content"'
    assert problem(REQUEST_SERVER_ADDITION.parameters, {"name": "t", "config": {"x": 1}}) == (
        'unexpected argument "config.x"'
    )


class _Inner(BaseModel):
    """Shown where the field has no description of its own."""

    model_config = ConfigDict(extra="forbid")

    level: int = Field(ge=0)


class _Example(BaseModel):
    """Not part of the schema."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(max_length=3, pattern="^[a-z]+$", description="A property named title.")
    inner: _Inner = Field(description="Nested.")
    maybe: _Inner | None = None
    mode: Literal["a", "b"] | None = None
    count: int = 2


def test_parameters_of_flattens_and_cleans_a_model() -> None:
    assert parameters_of(_Example) == {
        "type": "object",
        "properties": {
            "title": {
                "type": "string",
                "pattern": "^[a-z]+$",
                "maxLength": 3,
                "description": "A property named title.",
            },
            "inner": {
                "type": "object",
                "properties": {"level": {"type": "integer", "minimum": 0}},
                "required": ["level"],
                "additionalProperties": False,
                "description": "Nested.",
            },
            "maybe": {
                "type": "object",
                "properties": {"level": {"type": "integer", "minimum": 0}},
                "required": ["level"],
                "additionalProperties": False,
                "description": "Shown where the field has no description of its own.",
            },
            "mode": {"type": "string", "enum": ["a", "b"]},
            "count": {"type": "integer", "default": 2},
        },
        "required": ["title", "inner"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "properties": {"timezone": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
        {"type": "object", "minProperties": 1},
        {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"type": "array"},
        {"not": {"type": "object"}},
    ],
)
def test_a_call_with_no_arguments_skips_the_validator_only_where_it_could_refuse_nothing(
    schema: dict[str, Any],
) -> None:
    """The shortcut a call with no arguments takes never lets through what JSON Schema's own
    validator would refuse."""
    if accepts_no_arguments(schema):
        assert Draft202012Validator(schema).is_valid({})
    if schema.get("type") != "object":
        assert not accepts_no_arguments(schema)
        return  # a tool's parameters are an object's schema
    tool = RegisteredTool(ToolDefinition(name="t", description="d", parameters=schema), "a", 1.0)
    assert (tool.first_error({}) is None) == Draft202012Validator(schema).is_valid({})


def test_diana_s_own_tools_are_not_checked_again_at_a_call_and_others_are() -> None:
    slots = {
        "mine": AgentSlot("mine", lambda: None),  # type: ignore[arg-type,return-value]
        "server": AgentSlot("server", lambda: None),  # type: ignore[arg-type,return-value]
    }
    names = ToolNames(
        slots,
        bus=EventBus(),
        emit=lambda *a, **k: None,
        default_timeout=1.0,
        tool_timeouts={},
        defer_schema_checks=True,
    )
    own = ToolDefinition(name="own", description="d", parameters={"type": "object"})
    theirs = ToolDefinition(name="theirs", description="d", parameters={"type": "object"})
    names.register("mine", [own], fixed=True)
    names.register("server", [theirs])
    assert names.tools["own"].schema_checked
    assert not names.tools["theirs"].schema_checked


def test_a_schema_is_checked_once_per_process_with_the_same_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same tools are registered at every start, reconnect and reload: a schema met
    before is not checked against JSON Schema's own again, and is refused the same way."""
    checks: list[object] = []
    iter_errors = Draft202012Validator.iter_errors

    def counted(self: Draft202012Validator, instance: Any, *rest: Any) -> Any:
        if self.schema is Draft202012Validator.META_SCHEMA:
            checks.append(instance)
        return iter_errors(self, instance, *rest)

    monkeypatch.setattr(Draft202012Validator, "iter_errors", counted)
    good = {"type": "object", "description": "checked once", "properties": {"a": {}}}
    bad = {"type": "object", "description": "refused once", "properties": {"a": {"type": 5}}}
    warned: list[str] = []
    for _start in range(3):
        names = ToolNames(
            {"server": AgentSlot("server", lambda: None)},  # type: ignore[arg-type,return-value]
            bus=EventBus(),
            emit=lambda *a, **k: warned.append(k.get("error", "")),
            default_timeout=1.0,
            tool_timeouts={},
            defer_schema_checks=False,
        )
        names.register(
            "server",
            [
                ToolDefinition(name="good", description="d", parameters=dict(good)),
                ToolDefinition(name="bad", description="d", parameters=dict(bad)),
            ],
        )
        assert set(names.tools) == {"good"}
    assert checks == [good, bad]
    with pytest.raises(Exception) as refused:
        Draft202012Validator.check_schema(bad)
    assert warned == [refused.value.message] * 3  # type: ignore[attr-defined]
