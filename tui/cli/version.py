"""What `diana --version` prints, found without importing anything else of diana's."""

from __future__ import annotations

import os
import sys

DIST_INFO = ("diana_tui-", ".dist-info")  # as installers name the folder


def version_text() -> str:
    """What `diana --version` prints: the installed version, looked up only when asked for."""
    number = installed_version()
    if number is None:  # not installed as a wheel would be: ask importlib.metadata
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("diana-tui")
        except PackageNotFoundError:
            number = "unknown (not installed)"
    return f"diana {number}"


def installed_version() -> str | None:
    """The version in the name of the first `diana_tui-VERSION.dist-info` along sys.path, as
    an installer names it, where importlib.metadata would find it (which takes four times
    as long to import as the rest of `diana --version`); None if there is none, or the
    first folder with one holds more than one."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        start, end = DIST_INFO
        found = [
            name[len(start) : -len(end)]
            for name in names
            if name.lower().startswith(start) and name.endswith(end)
        ]
        if found:
            return found[0] if len(found) == 1 else None
    return None
