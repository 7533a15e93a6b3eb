"""`diana models`: the models Ollama has — list them, show one, pull one, remove one."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from typing import TYPE_CHECKING

from diana.core.models import ErrorCode

from .common import EXIT_OK, BadInput, Failed, _dump, _err, _line, _table

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import ModelInfo, PullProgress

# The list's columns, and the order in which they give way on a narrow terminal.
COLUMNS = ("NAME", "SIZE", "PARAMS", "QUANT", "CONTEXT", "CAN", "FAMILY", "LOADED")
GIVE_WAY = ("FAMILY", "QUANT", "SIZE", "PARAMS", "CONTEXT")
BAR_WIDTH = 30


async def cmd_models(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.errors import LLMProblem

    models = core.chat.models
    try:
        if args.action in ("show", "pull", "rm"):
            if not args.name:
                raise BadInput(f"give the model's name: diana models {args.action} NAME")
            if args.action == "show":
                return _show(await models.show(args.name), args.json)
            if args.action == "pull":
                return await _pull(core, args.name)
            return await _remove(core, args.name, args.yes)
        installed = await models.installed()
    except LLMProblem as problem:
        if problem.code in (ErrorCode.MODEL_NOT_FOUND, ErrorCode.INVALID_ARGUMENTS):
            raise BadInput(problem.message) from None
        raise Failed(problem.message) from None
    if args.json:
        print(_dump([m.as_json() for m in installed]))
        return EXIT_OK
    if not installed:
        print("no model installed — diana models pull NAME")
        return EXIT_OK
    rows = [_row(m, core.chat.model) for m in installed]
    print(_fitted(rows, COLUMNS))
    return EXIT_OK


def _row(model: ModelInfo, current: str) -> tuple[str, ...]:
    from diana.core.api.shown import capabilities_text, context_text, size_text

    name = model.name + (" *" if model.name in (current, f"{current}:latest") else "")
    return (
        name,
        size_text(model.size),
        model.parameter_size or "?",
        model.quantization or "?",
        context_text(model.context_length),
        capabilities_text(model),
        model.family or "?",
        "loaded" if model.loaded else "",
    )


def _fitted(rows: list[tuple[str, ...]], headers: tuple[str, ...]) -> str:
    """The table; on a terminal, columns give way (GIVE_WAY's order) until it fits."""
    if not sys.stdout.isatty():
        return _table(rows, headers)
    width = shutil.get_terminal_size().columns
    shown = list(headers)
    table = _table(rows, headers)
    for dropped in GIVE_WAY:
        if max(len(line) for line in table.splitlines()) <= width:
            break
        shown.remove(dropped)
        keep = [headers.index(h) for h in shown]
        table = _table([tuple(r[i] for i in keep) for r in rows], tuple(shown))
    return table


def _show(model: ModelInfo, as_json: bool) -> int:
    from diana.core.api.shown import size_text

    if as_json:
        print(_dump(model.as_json()))
        return EXIT_OK
    print(f"model {_line(model.name)}{'  (loaded)' if model.loaded else ''}")
    caps = "?" if model.capabilities is None else ", ".join(model.capabilities) or "-"
    for label, value in (
        ("family", model.family or "?"),
        ("parameters", model.parameter_size or "?"),
        ("quantization", model.quantization or "?"),
        ("context", "?" if model.context_length is None else f"{model.context_length} tokens"),
        ("capabilities", caps),
        ("size", size_text(model.size)),
        ("digest", model.digest or "?"),
        ("modified", model.modified_at or "?"),
    ):
        print(f"  {label:<13}{_line(value)}")
    return EXIT_OK


async def _pull(core: Core, name: str) -> int:
    on_terminal = sys.stdout.isatty()
    last: PullProgress | None = None
    said: str | None = None
    try:
        async for step in core.chat.models.pull(name):
            last = step
            line = _progress_line(step, bar=on_terminal)
            if on_terminal:
                _redraw(line)
            elif line != said:  # piped: a line each time the percentage moves
                print(line, flush=True)
            said = line
    except asyncio.CancelledError:
        percent = None if last is None else last.percent
        at = "" if percent is None else f" at {percent:.0f}%"
        if on_terminal:
            sys.stdout.write("\n")
        _err(f"diana: pull of {name} stopped{at} — pull it again to continue where it stopped")
        raise
    finally:
        if on_terminal and said is not None:
            sys.stdout.write("\n")
            sys.stdout.flush()
    print(f"pulled {name}")
    return EXIT_OK


def _redraw(line: str) -> None:
    """The terminal's last line, drawn again: the carriage return and erase are diana's own,
    written past the filter that keeps them out of text from elsewhere (``line`` went
    through it); cut to the width, so it never wraps onto a line it cannot erase."""
    width = shutil.get_terminal_size().columns
    terminal = getattr(sys.stdout, "stream", sys.stdout)
    terminal.write(f"\r\x1b[2K{line[: max(1, width - 1)]}")
    terminal.flush()


def _progress_line(step: PullProgress, *, bar: bool) -> str:
    from diana.core.api.shown import size_text

    percent = step.percent
    if percent is None:
        return _line(step.status)
    if not bar:
        return _line(f"{step.status} {percent:.0f}%")
    filled = round(BAR_WIDTH * percent / 100)
    done = f"{size_text(step.completed or 0)}/{size_text(step.total or 0)}"
    return _line(
        f"{step.status} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {percent:3.0f}% {done}"
    )


async def _remove(core: Core, name: str, yes: bool) -> int:
    if not yes:
        if not sys.stdin.isatty():
            raise BadInput(f"removing {name} needs --yes when there is no terminal to ask on")
        _err(f"remove model {name} from Ollama? [y/N] ", end="")
        typed = await asyncio.to_thread(sys.stdin.readline)
        if typed.strip().lower() not in ("y", "yes"):
            print(f"kept {name}")
            return EXIT_OK
    await core.chat.models.remove(name)
    print(f"removed {name}")
    return EXIT_OK


def models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=("list", "show", "pull", "rm"))
    parser.add_argument("name", nargs="?", help="the model (show, pull, rm), e.g. qwen3:8b")
    parser.add_argument("--json", action="store_true", help="print JSON (list, show)")
    parser.add_argument("--yes", action="store_true", help="rm: remove without asking")
