"""A resource's parts as answered (``ResourceContent.public()``: a dict with ``text`` or a
base64 ``blob``): their text, their bytes and a one-line description of what is not shown.

A leaf: the MCP catalog that makes the parts and the commands that print them both read it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any


def size_text(mime_type: str | None, size: int) -> str:
    """What is not shown as text, in one line: its type and size."""
    return f"{mime_type or 'unknown type'}, {size:,} bytes"


def part_text(part: dict[str, Any]) -> str | None:
    """A part's text, or None for bytes."""
    text = part.get("text")
    return text if isinstance(text, str) else None


def part_bytes(part: dict[str, Any]) -> bytes:
    """A part's content as bytes (its text in UTF-8); ValueError for base64 that is not."""
    text = part_text(part)
    if text is not None:
        return text.encode("utf-8", "replace")
    blob = part.get("blob")
    if not isinstance(blob, str):
        raise ValueError(f"{part.get('uri')} has neither text nor bytes")
    try:
        return base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{part.get('uri')} is base64 that is not") from None


def part_describe(part: dict[str, Any]) -> str:
    mime_type = part.get("mimeType")
    mime = mime_type if isinstance(mime_type, str) else None
    text = part_text(part)
    if text is not None:
        return size_text(mime, len(text.encode("utf-8", "replace")))
    size = part.get("size")
    return size_text(mime, size if isinstance(size, int) else len(part_bytes(part)))
