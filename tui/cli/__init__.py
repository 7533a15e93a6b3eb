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

import sys
from collections.abc import Sequence

from tui import EXIT_INTERRUPTED


def version_text() -> str:
    """What `diana --version` prints: the installed version, looked up only when asked for."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("diana-tui")
    except PackageNotFoundError:
        number = "unknown (not installed)"
    return f"diana {number}"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:  # at once: the rest takes a third of a second to import
        print(version_text())
        return 0
    from .commands import main as run

    return run(argv)


__all__ = ["EXIT_INTERRUPTED", "main", "version_text"]
