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

from diana.tui import EXIT_INTERRUPTED, starting_command

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
        return end(0, argv)
    # diana loads no pydantic plugin: looking for them reads every installed package's
    # metadata, a fifth of a built-in call (set PYDANTIC_DISABLE_PLUGINS to load them).
    own_variable("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from .commands import main as run

    return end(run(argv), argv)


def own_variable(name: str, value: str) -> None:
    """Set an environment variable for this process alone, unless it is set: processes it
    starts are given the environment without it (core/processes.py)."""
    if name not in os.environ:
        os.environ[name] = value
        from diana.core.processes import NOT_INHERITED

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
