"""Text that is not UTF-8 inside Python strings, and text that is safe on a terminal.

Python keeps bytes it could not decode (in argv, environment, file names) as lone surrogate
code points, and JSON's ``\\udXXX`` escapes make them too. Such a string cannot be encoded as
UTF-8: SQLite refuses to store it and a terminal refuses to print it. Input is refused at the
edge (core/calls/arguments.py); what must still be shown or stored gets U+FFFD in their place.

Text from a server, a tool, a model or a file may also hold escape sequences and control
characters that a terminal obeys instead of showing (set the window title, clear the screen,
move the cursor, rewrite a line with a carriage return). ``printable`` is what may be shown.
"""

from __future__ import annotations

import re

SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"

# ECMA-48 sequences, matched whole so that no parameter is left behind as text:
# CSI (ESC [ parameters intermediates final), the string sequences OSC, DCS, SOS, PM and APC
# (ESC ] P X ^ _ ... up to BEL or ST, within one line), and the other ESC sequences
# (ESC 7, ESC c, ESC ( B). A string sequence without its terminator loses only its
# introducer: what follows is shown, not hidden.
ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
# What is left after the sequences: C0 controls, DEL, C1 controls (one by one: their 8-bit
# sequences are not removed whole, so a payload behind one stays in sight) and the bidi
# embedding, override and isolate controls, which reorder what is shown.
_INVISIBLE = "\x7f-\x9f\u202a-\u202e\u2066-\u2069"
CONTROLS_IN_BLOCK = re.compile(f"[\x00-\x08\x0b-\x1f{_INVISIBLE}]")  # keeps \t and \n
CONTROLS_IN_LINE = re.compile(f"[\x00-\x1f{_INVISIBLE}]")
# What a JSON document may still carry raw after json.dumps (which escapes only < 0x20).
UNESCAPED_IN_JSON = re.compile(f"[{_INVISIBLE}]")


def first_surrogate(text: str) -> int | None:
    """The index of the first code point that is not UTF-8, or None."""
    match = SURROGATES.search(text)
    return None if match is None else match.start()


def without_surrogates(text: str) -> str:
    return SURROGATES.sub(REPLACEMENT, text)


def printable(text: str, *, multiline: bool = True) -> str:
    """``text`` as a terminal may show it: escape sequences removed whole, other control
    characters removed; everything else (non-ASCII text included) kept. A multi-line block
    keeps its newlines and tabs; on one line (``multiline=False``) each becomes a space, so
    the text cannot start a line of its own."""
    if text.isprintable():  # the usual case: nothing to look for
        return text
    text = ESCAPE_SEQUENCE.sub("", text)
    if multiline:
        return CONTROLS_IN_BLOCK.sub("", text)
    return CONTROLS_IN_LINE.sub(_space_for_line_break, text)


def _space_for_line_break(match: re.Match[str]) -> str:
    return " " if match.group() in "\t\n" else ""


def json_printable(document: str) -> str:
    """A JSON document (from json.dumps) with every character that ``printable`` would
    remove written as a ``\\uXXXX`` escape: the same value, and nothing a terminal obeys."""
    return UNESCAPED_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", document)


def size_text(count: int) -> str:
    """A size in bytes as a person reads it: `312 bytes`, `64 KiB`, `5.2 MiB`."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            whole, part = divmod(count, 1 << shift)
            return f"{whole} {unit}" if part == 0 else f"{count / (1 << shift):.1f} {unit}"
    return f"{count} byte{'' if count == 1 else 's'}"


def utf8_size(text: str) -> int:
    """How many bytes ``text`` takes as UTF-8 (a code point that is not UTF-8 as three)."""
    return len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, limit: int) -> str:
    """``text`` whole if it fits in ``limit`` bytes of UTF-8; otherwise its first ``limit``
    bytes (never half a character) and where it was cut: `… [cut at 64 KiB of 5.0 MiB]`."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}… [cut at {size_text(limit)} of {size_text(len(data))}]"
