"""The `diana` command line: the same core as the app, without a screen.

Whatever it prints passes through ``printable`` (core/text.py) on its way to the terminal:
text from servers, tools, models and files cannot carry an escape sequence there.

Each command starts only what it needs (``servers`` in its entry in commands.py, and the
README's table): the MCP SDK and the ollama client are imported only by commands that
start a server or ask the model, and a command that can answer from the database answers
from it. The commands live in a module each by subject; commands.py is the table of them.
`diana --version` imports none of it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tui import EXIT_INTERRUPTED

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


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:  # at once: the rest takes a third of a second to import
        print(version_text())
        return 0
    from .commands import main as run

    return run(argv)


__all__ = ["EXIT_INTERRUPTED", "main", "version_text"]
