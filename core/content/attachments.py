"""Resources that go with a message (`@server:uri`): how each is written into the message
the model reads, and how a stored message is told apart again into what the person typed
and what went with it, so a reopened conversation shows them as they were shown live."""

from __future__ import annotations

import re
from dataclasses import dataclass

_BLOCK = re.compile(
    r'\n\n<resource server="(?P<server>[^"]*)" uri="(?P<uri>[^"]*)"'
    r'(?: mimeType="(?P<mime>[^"]*)")?>\n(?P<body>.*?)\n</resource>(?=\n\n<resource |\Z)',
    re.S,
)
_CUT = re.compile(r"\n\[cut at (\d+) KiB\]\Z")
_NOT_ATTACHED = re.compile(r"\A\[(.*: not text, not attached)\]\Z", re.S)


@dataclass(frozen=True)
class Attached:
    """A resource that went with a message: where from, and what it was."""

    server: str
    uri: str
    shown: str  # `text/plain, 120 bytes`, or why it was not attached


def attachment_block(server: str, uri: str, mime_type: str | None, body: str) -> str:
    """One resource as the model reads it, after the message."""
    kind = f' mimeType="{mime_type}"' if mime_type else ""
    return f'<resource server="{server}" uri="{uri}"{kind}>\n{body}\n</resource>'


def split_attachments(content: str) -> tuple[str, list[Attached]]:
    """A stored message: what the person typed, and the resources that went with it."""
    found = list(_BLOCK.finditer(content))
    # Only blocks that follow one another to the very end are attachments: a person may
    # have typed something that looks like one.
    while found and (found[-1].end() != len(content)):
        found.pop()
    start = len(content)
    chain: list[re.Match[str]] = []
    for match in reversed(found):
        if match.end() != start:
            break
        chain.insert(0, match)
        start = match.start()
    return content[:start], [_described(match) for match in chain]


def _described(match: re.Match[str]) -> Attached:
    body, kind = match["body"], match["mime"] or "unknown type"
    if not_attached := _NOT_ATTACHED.match(body):
        return Attached(match["server"], match["uri"], not_attached.group(1))
    if cut := _CUT.search(body):
        return Attached(match["server"], match["uri"], f"{kind}, cut at {cut.group(1)} KiB")
    return Attached(match["server"], match["uri"], f"{kind}, {len(body.encode()):,} bytes")
