"""Text that is not UTF-8 inside Python strings.

Python keeps bytes it could not decode (in argv, environment, file names) as lone surrogate
code points, and JSON's ``\\udXXX`` escapes make them too. Such a string cannot be encoded as
UTF-8: SQLite refuses to store it and a terminal refuses to print it. Input is refused at the
edge (core/arguments.py); what must still be shown or stored gets U+FFFD in their place.
"""

from __future__ import annotations

import re

SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def first_surrogate(text: str) -> int | None:
    """The index of the first code point that is not UTF-8, or None."""
    match = SURROGATES.search(text)
    return None if match is None else match.start()


def without_surrogates(text: str) -> str:
    return SURROGATES.sub(REPLACEMENT, text)
