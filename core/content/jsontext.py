"""JSON that a person wrote (a config file, --args, a form field) or another program sent,
parsed into a value or refused with one line that says why. Besides malformed text this
refuses what ``json.loads`` raises other errors for: a number past Python's 4,300-digit
limit and nesting past the recursion limit; and, where a repeated key would make the value
ambiguous (config), an object that names a key twice."""

from __future__ import annotations

import json
import sys
from typing import Any


class JSONProblem(ValueError):
    """Why the text is not the JSON value wanted, in one line."""


def parse_json(text: str, *, unique_keys: bool = False) -> Any:
    hook = _refuse_repeated_keys if unique_keys else None
    try:
        return json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise JSONProblem(
            f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise JSONProblem("not valid JSON: nested too deeply to read") from None
    except JSONProblem:
        raise
    except ValueError:  # int(): Python's limit on the digits of a number
        limit = sys.get_int_max_str_digits()
        raise JSONProblem(f"a number has more than {limit:,} digits, too long to read") from None


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise JSONProblem(f'the key "{key}" is given twice in one object')
        value[key] = item
    return value
