"""Tool arguments typed by a person (CLI --args, the chat's /call): JSON text to an object."""

from __future__ import annotations

import json
from typing import Any


class ArgumentsError(ValueError):
    """Typed arguments that are not a JSON object; the message says why in one line."""


def parse_arguments(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentsError(f"not valid JSON (column {exc.colno}): {exc.msg}") from None
    except RecursionError:
        raise ArgumentsError("nested too deeply to read") from None
    if not isinstance(value, dict):
        raise ArgumentsError('must be a JSON object, like {"timezone": "UTC"}')
    return value
