"""A tool as registered, and the checks of JSON Schema it passes: its parameter schema, once,
and each call's arguments, with the one line a person is shown when they fail."""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..models import ErrorCode, ToolDefinition, ToolResult
from ..system.telemetry import is_secret_name
from .arguments import argument_problem, field_path

if TYPE_CHECKING:  # jsonschema is imported by the first schema checked or call validated
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@dataclass
class RegisteredTool:
    """A tool an agent offers that passed its checks, and how long a call of it may run."""

    definition: ToolDefinition
    agent_id: str
    timeout: float
    schema_checked: bool = True  # else checked at the first call (AgentManifest)
    _validator: Draft202012Validator | None = None

    def first_error(self, params: dict[str, Any]) -> ValidationError | None:
        """The argument error a person most needs to see, or None if the call is valid."""
        if not params and accepts_no_arguments(self.definition.parameters):
            return None  # nothing any keyword of the schema could refuse: none to check
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match

        if self._validator is None:  # made for the first call
            self._validator = Draft202012Validator(self.definition.parameters)
        error: ValidationError | None = best_match(self._validator.iter_errors(params))
        return error

    def invalid_call(self, params: dict[str, Any]) -> ToolResult | None:
        """Why a call with ``params`` cannot run: a parameter schema left for the first call
        that is invalid, or arguments that fail their checks; None if it can."""
        tool_name = self.definition.name
        if not self.schema_checked:
            invalid = schema_problem(self.definition.parameters)
            if invalid is not None:
                return ToolResult.fail(
                    ErrorCode.TOOL_EXECUTION_FAILED,
                    f"{tool_name} cannot be called: its parameter schema is invalid: {invalid}",
                )
            self.schema_checked = True
        problem = argument_problem(params)
        if problem is not None:
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS, f"invalid arguments for {tool_name}: {problem}"
            )
        error = self.first_error(params)
        if error is not None:
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS,
                f"invalid arguments for {tool_name}: {describe_validation_error(error)}",
            )
        return None


# The keywords of an object's schema none of which can refuse an object with no members.
_EMPTY_NEVER_REFUSED = {"type", "properties", "additionalProperties", "title", "description"}


def accepts_no_arguments(schema: dict[str, Any]) -> bool:
    """Whether ``{}`` is valid against the schema, seen without JSON Schema's validator: an
    object's schema that requires nothing and says nothing else of the object as a whole
    (what it says of members binds only members that are given)."""
    return (
        schema.get("type") == "object"
        and set(schema) <= _EMPTY_NEVER_REFUSED
        and isinstance(schema.get("properties", {}), dict)
    )


def schema_problem(schema: dict[str, Any]) -> str | None:
    """What makes a tool's parameter schema invalid, or None. Checking a schema against
    JSON Schema's own takes milliseconds: a `diana` command checks only what it calls, and
    a schema met before in this process (the same tools at each start, reconnect, reload)
    is not checked again."""
    try:
        text = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):  # not JSON: no text to know it by
        return _checked_problem(schema)
    if text in _SCHEMA_PROBLEMS:
        _SCHEMA_PROBLEMS.move_to_end(text)
        return _SCHEMA_PROBLEMS[text]
    problem = _checked_problem(schema)
    _SCHEMA_PROBLEMS[text] = problem
    if len(_SCHEMA_PROBLEMS) > _SCHEMAS_KEPT:
        _SCHEMA_PROBLEMS.popitem(last=False)
    return problem


# The verdicts on the schemas checked last, by their JSON text (key order kept: the first
# error found, the one named, can depend on it).
_SCHEMA_PROBLEMS: OrderedDict[str, str | None] = OrderedDict()
_SCHEMAS_KEPT = 512


def _checked_problem(schema: dict[str, Any]) -> str | None:
    """The first error JSON Schema's own schema finds in ``schema`` (what
    ``Draft202012Validator.check_schema`` raises), or None."""
    error = next(iter(_meta_validator().iter_errors(schema)), None)
    return None if error is None else error.message


@functools.cache
def _meta_validator() -> Draft202012Validator:
    """A validator of schemas, made once: making it costs as much as one check."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(
        Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def describe_validation_error(error: ValidationError) -> str:
    """One line naming the argument that failed and why."""
    path = field_path(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        prefix = f"{path}." if path else ""
        return f'missing required argument "{prefix}{missing[0]}"'
    alternatives = _required_alternatives(error)
    if alternatives:
        prefix = f"{path}." if path else ""
        names = " or ".join(f'"{prefix}{name}"' for name in alternatives)
        return f"give exactly one of the arguments {names}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        prefix = f"{path}." if path else ""
        return f'unexpected argument "{prefix}{extra[0]}"' if extra else error.message
    if any(isinstance(part, str) and is_secret_name(part) for part in error.absolute_path):
        # The message would quote the value: say which rule failed, never what was given.
        return f'argument "{path}" does not satisfy "{error.validator}" (value hidden)'
    if path:
        return f'argument "{path}": {error.message}'
    return f"arguments: {error.message}"


def _required_alternatives(error: ValidationError) -> list[str]:
    """The arguments of a ``oneOf`` whose branches each require one of them (``{"oneOf":
    [{"required": ["a"]}, {"required": ["b"]}]}``); [] for any other failure."""
    branches = error.validator_value if error.validator == "oneOf" else None
    if not isinstance(branches, list) or not branches:
        return []
    names = []
    for branch in branches:
        required = branch.get("required") if isinstance(branch, dict) else None
        if set(branch) != {"required"} or not isinstance(required, list) or len(required) != 1:
            return []
        names.append(str(required[0]))
    return names
