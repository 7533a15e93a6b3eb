"""Tool arguments at the edge: JSON typed by a person (CLI --args, the chat's /call), and
the checks every call's arguments pass before anything else sees them; a prompt's
arguments as typed (`NAME=VALUE`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..content.jsontext import JSONProblem, parse_json
from ..content.text import first_surrogate, without_surrogates

# Arguments nested deeper than this are refused: no tool needs it, and deeper values would
# reach recursion limits in validation, redaction and storage.
MAX_DEPTH = 64


class ArgumentsError(ValueError):
    """Typed arguments that are not a JSON object; the message says why in one line."""


def parse_arguments(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = parse_json(text)
    except JSONProblem as exc:
        raise ArgumentsError(str(exc)) from None
    if not isinstance(value, dict):
        raise ArgumentsError('must be a JSON object, like {"timezone": "UTC"}')
    return value


def field_path(parts: Iterable[str | int]) -> str:
    """A place inside the arguments as a person reads it: ``items[2].name``."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{without_surrogates(part)}" if path else without_surrogates(part)
    return path


def argument_problem(arguments: Any) -> str | None:
    """Why these arguments cannot be taken: text that is not UTF-8 (it could be neither
    stored nor shown), or nesting deeper than MAX_DEPTH. Names the argument; None if fine.
    Iterative, so no depth of input can exhaust the stack."""
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(arguments, ())]
    while pending:
        value, path = pending.pop()
        if len(path) > MAX_DEPTH:
            return f'argument "{field_path(path[:1])}" is nested deeper than {MAX_DEPTH} levels'
        if isinstance(value, str):
            at = first_surrogate(value)
            if at is not None:
                return (
                    f'argument "{field_path(path)}": text that is not valid UTF-8 '
                    f"(character {at + 1})"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and first_surrogate(key) is not None:
                    where = f' in "{field_path(path)}"' if path else ""
                    return f"an argument name{where} is not valid UTF-8: {without_surrogates(key)}"
                pending.append((item, (*path, key)))
        elif isinstance(value, list | tuple):
            pending.extend((item, (*path, i)) for i, item in enumerate(value))
    return None


def prompt_arguments(items: list[str]) -> dict[str, str]:
    """`NAME=VALUE` items as a prompt's arguments; ValueError naming one that is not."""
    arguments: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r}: write it as NAME=VALUE")
        arguments[key] = value
    return arguments
