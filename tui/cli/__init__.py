"""The `diana` command line: the same core as the app, without a screen.

Whatever it prints passes through ``printable`` (core/content/text.py) on its way to the terminal:
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

from diana.tui import EXIT_INTERRUPTED, starting_command

from .version import version_text


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:  # at once: the rest takes a third of a second to import
        print(version_text())
        return end(0, argv)
    # diana loads no pydantic plugin: looking for them reads every installed package's
    # metadata, a fifth of a built-in call (set PYDANTIC_DISABLE_PLUGINS to load them).
    own_variable("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from .commands import main as run

    return end(run(argv), argv)


def own_variable(name: str, value: str) -> None:
    """Set an environment variable for this process alone, unless it is set: processes it
    starts are given the environment without it (core/system/processes.py)."""
    if name not in os.environ:
        os.environ[name] = value
        from diana.core.api.types import NOT_INHERITED

        NOT_INHERITED.add(name)


def end(code: int, argv: Sequence[str] | None) -> int:
    """When this process is the `diana` command, it exits here, with ``code``: what it
    started is stopped and its files are closed by now, and what is left is the
    interpreter's teardown of every module, a tenth of a second once the MCP SDK is loaded,
    which an exiting process does not need. Exit handlers still run and output is written
    first. Called in-process (tests, scripts), it returns ``code``."""
    if argv is not None or starting_command() != "diana":
        return code
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader left, or the stream is closed
            pass
    os._exit(code)


__all__ = ["EXIT_INTERRUPTED", "main", "version_text"]
