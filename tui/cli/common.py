"""What every `diana` command shares: exit codes, the errors that end a command in one line,
and printing (tables, JSON, stderr) that no text can drive the terminal through."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

from diana.core.api.shown import json_printable, printable, unknown_server_text
from diana.core.api.types import SECRET_VALUES
from diana.core.models import ErrorCode
from diana.core.profiles import ALL_SERVERS, NO_SERVERS, Profile
from diana.core.profiles import ON_DEMAND as PROFILE_ON_DEMAND
from rich.cells import cell_len

from ..columns import FitColumn, cut, fit_widths

if TYPE_CHECKING:
    from diana.core.api import Core


T = TypeVar("T")

EXIT_OK = 0
EXIT_TOOL_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NEEDS_APPROVAL = 3
EXIT_TOOL_GAP = 4
EXIT_INTERRUPTED = 130

# Which MCP servers a command starts: none; only those a call runs on (their tools known
# from the tool cache, any other server when the command needs its tools); or every one.
NONE, ON_DEMAND, ALL = NO_SERVERS, PROFILE_ON_DEMAND, ALL_SERVERS

MAX_LOG_LIMIT = 100_000
TABLE_GAP = 2  # blank cells between a table's columns
LAST_WANTS = 24  # cells a table's last column has before the others give way (as the panes)
BAD_INPUT_CODES = {ErrorCode.TOOL_NOT_FOUND, ErrorCode.INVALID_ARGUMENTS}


class BadInput(Exception):
    """Input the command cannot act on; printed as one line, exit 2."""


class Failed(Exception):
    """What the command was to do could not be done; printed as one line, exit 1."""


def unknown_server(name: str, configured: Iterable[str]) -> BadInput:
    return BadInput(unknown_server_text(name, configured))


class PrintableStream:
    """sys.stdout or sys.stderr, passing on only what ``printable`` lets through, with
    configured secret values as ***: the one place every line the command prints goes,
    whoever wrote the text in it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(SECRET_VALUES.mask(text)))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def printable_output() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, PrintableStream(sys.stdout))
    sys.stderr = cast(TextIO, PrintableStream(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _dump(value: Any, indent: int | None = 2) -> str:
    """JSON for people and scripts alike: every control character escaped (json.dumps
    leaves DEL and C1 controls raw), so the value is whole and nothing reaches the terminal
    for it to obey."""
    try:
        text = json.dumps(value, indent=indent, default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:  # NaN or Infinity, which JSON has no words for: null instead
        text = json.dumps(_finite(value), indent=indent, default=str, ensure_ascii=False)
    return json_printable(text)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or Infinity as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _line(text: str) -> str:
    """Text shown within one line (a table cell, an error): it cannot start another."""
    return printable(text, multiline=False)


def _problem(message: str) -> None:
    """The one line a failure gets on stderr."""
    print(f"diana: {_line(message)}", file=sys.stderr)


def _warn(message: str) -> None:
    """Something the command passed over (a damaged row) and went on without."""
    print(f"diana: warning: {_line(message)}", file=sys.stderr)


def table_width() -> int | None:
    """The width a table is fitted to on a terminal: `COLUMNS` when set, else the
    terminal's; None when stdout is not a terminal (piped: every column whole, as scripts
    read it, whatever `COLUMNS` says)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _table(
    rows: Sequence[Sequence[str]],
    headers: Sequence[str],
    gives_way: Mapping[str, int] | None = None,
    *,
    drop: Collection[str] = (),
) -> str:
    """Rows under their headers, in columns. On a terminal the table fits its width
    (`COLUMNS` when set) as the panes' tables do (tui/columns.py): ``gives_way`` names the columns
    that may be cut, first to last, each to its least width (0: left out whole), and
    ``drop`` those then left out; the last column takes what is left (by default it is cut
    down to 8 cells). Any other column, an id or a name, is never cut. Piped, every cell is
    whole."""
    rows = [[_line(cell) for cell in row] for row in rows]
    width = table_width()
    if width is None:
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        return "\n".join(lines)
    last = headers[-1]
    least = {last: max(8, min(len(last), 12))} if gives_way is None else dict(gives_way)
    columns = tuple(
        FitColumn(h, h, least=least.get(h, 0 if h in drop else None), droppable=h in drop)
        for h in headers
    )
    if columns[-1].least is None:  # the last column is never cut: it keeps its widest
        widest_last = max((cell_len(r[-1]) for r in rows), default=0)
        columns = (*columns[:-1], FitColumn(last, last, least=max(cell_len(last), widest_last)))
    widest = {h: max((cell_len(row[i]) for row in rows), default=0) for i, h in enumerate(headers)}
    giving = tuple(h for h in least if h != last)
    # A last column that may be cut wants no more than a pane's does before others give way.
    wants = max(cell_len(last), widest[last])
    if last in least:
        wants = min(wants, LAST_WANTS)
    fitted = fit_widths(columns, width, widest, giving, wants, gap=TABLE_GAP)
    shown = [i for i, h in enumerate(headers) if fitted[h]]
    widths = [min(fitted[headers[i]], max(cell_len(headers[i]), widest[headers[i]])) for i in shown]
    table = _aligned(
        [cut(headers[i], w) for i, w in zip(shown, widths, strict=True)],
        [[cut(row[i], w) for i, w in zip(shown, widths, strict=True)] for row in rows],
        widths,
    )
    left_out = [h.lower() for h in headers if not fitted[h]]
    if left_out:
        note = f"(not shown at {width} columns: {', '.join(left_out)}; --json has all)"
        table += "\n" + cut(note, width)
    return table


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: list[int]) -> str:
    def line(cells: Sequence[str]) -> str:
        padded = (c + " " * (w - cell_len(c)) for c, w in zip(cells, widths, strict=True))
        return (" " * TABLE_GAP).join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _err(text: str, end: str = "\n") -> None:
    sys.stderr.write(text + end)
    sys.stderr.flush()


Command = Callable[["Core", argparse.Namespace], Awaitable[int]]


@dataclass(frozen=True)
class Entry:
    """One `diana` command: its name and help, the arguments it takes, what it runs, and
    the core it opens: a named ``profile`` (core/profiles.py), or else the call profile
    with which MCP servers (NONE, ON_DEMAND or ALL, or chosen by its arguments), the chat
    session, and whether it hears decisions made in other processes.
    ``starts``: on demand, which servers (by name) it connects unless the tool cache stands
    in for them, whatever else happens; those are started first (commands.py), unless
    ``app_answers`` (a running diana-tui answers the command) and an app runs on the dirs.
    ``asks_person``: the model's questions to the person are asked on the terminal, if any.
    ``without_core``: what the command answers from its arguments alone (an exit code), for
    arguments that need no core (`diana serve --print-config`)."""

    name: str
    run: Command
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    description: str | None = None
    servers: str | Callable[[argparse.Namespace], str] = NONE
    chat: bool = False
    watches: Callable[[argparse.Namespace], bool] | None = None
    starts: Callable[[argparse.Namespace, str], bool] | None = None
    app_answers: bool = False
    asks_person: bool = False
    profile: Profile | Callable[[argparse.Namespace], Profile | None] | None = None
    # Answered without opening the core when it returns an exit code (not None).
    without_core: Callable[[argparse.Namespace], int | None] | None = None

    def profile_for(self, args: argparse.Namespace) -> Profile:
        """The parts of the core this command opens, for these arguments."""
        named = self.profile(args) if callable(self.profile) else self.profile
        if named is not None:
            return named
        return Profile.CALL.but(
            servers=self.servers_for(args),
            chat=self.chat,
            watch=self.watches is not None and self.watches(args),
        )

    def servers_for(self, args: argparse.Namespace) -> str:
        return self.servers if isinstance(self.servers, str) else self.servers(args)
