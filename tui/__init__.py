"""Everything a person touches: the `diana-tui` Textual app and the `diana` command line.

Python imports this module first when `diana` or `diana-tui` starts, before the seconds of
importing the rest. Ctrl-C then must not print a traceback: until the command's imports are
done (``imports_done``), it exits 130 with one line; nothing has been started that would need
stopping. Afterwards each command's main() turns Ctrl-C into the same line, once what it
started is stopped. So this module imports nothing slow.
"""

from __future__ import annotations

# _signal, not signal: that imports enum, and every millisecond before the handler is in
# place is one where Ctrl-C prints a traceback.
import _signal
import gc
import os
import sys

EXIT_INTERRUPTED = 130
# --config-dir and --data-dir, the same for both commands
CONFIG_DIR_HELP = (
    "config directory (env DIANA_CONFIG_DIR, else $XDG_CONFIG_HOME/diana, else ~/.config/diana)"
)
DATA_DIR_HELP = (
    "data directory (env DIANA_DATA_DIR, else $XDG_DATA_HOME/diana, else ~/.local/share/diana)"
)
COMMANDS = {
    "diana": "diana",
    "diana-tui": "diana-tui",
    "diana.tui.cli": "diana",
    "diana.tui.app": "diana-tui",
}


def starting_command() -> str | None:
    """`diana` or `diana-tui` while this process starts as that command, else None."""
    if sys.argv and sys.argv[0] == "-m":  # python -m diana.tui.cli: runpy is finding the module
        argv = getattr(sys, "orig_argv", [])
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        return COMMANDS.get(module)
    return COMMANDS.get(os.path.basename(sys.argv[0])) if sys.argv else None


def _exit_interrupted(_signum: int, _frame: FrameType | None) -> None:
    os.write(2, f"{_PROGRAM}: interrupted\n".encode())
    os._exit(EXIT_INTERRUPTED)


def started() -> None:
    """Start-up is over: the cyclic garbage collector runs again. While a command starts it
    makes the objects it keeps (modules, classes, schemas) and almost no garbage, yet the
    collector would walk them again and again, a fifth of a short command's time; what
    start-up made is frozen (never walked again), and what the command does is collected as
    usual."""
    if not gc.isenabled() and _PROGRAM is not None:
        gc.freeze()
        gc.enable()


def imports_done() -> None:
    """Ctrl-C raises KeyboardInterrupt again, for main() to handle (if it was ours)."""
    if _signal.getsignal(_signal.SIGINT) is _exit_interrupted:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


_PROGRAM = starting_command()
# Not when SIGINT is ignored (started with nohup or `&`) or handled by someone else.
if _PROGRAM is not None and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _exit_interrupted)
if _PROGRAM is not None:
    gc.disable()  # until started()

TYPE_CHECKING = False  # typing itself takes milliseconds to import: not before it is needed

if TYPE_CHECKING:
    from pathlib import Path
    from types import FrameType


def styles_dir() -> Path:
    """The .tcss files: inside the wheel, or the source tree."""
    from pathlib import Path

    package = Path(__file__).resolve().parent
    installed = package / "_shipped" / "styles"
    return installed if installed.is_dir() else package.parent / "styles"
