"""`diana ask`: the local model, its answer streamed to the terminal; and what servers and the
model ask a person there."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import os
import sys
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, cast

from diana.core.api.shown import brief_arguments, brief_result, without_surrogates
from diana.core.api.types import Action, Elicitation
from diana.core.api.types import FormAnswer as Answer

from .common import (
    EXIT_BAD_INPUT,
    EXIT_NEEDS_APPROVAL,
    EXIT_OK,
    EXIT_TOOL_GAP,
    BadInput,
    Failed,
    _dump,
    _err,
    _line,
    _problem,
)

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import Image, TurnEvent


class AskPrinter:
    """What `diana ask` shows while the answer streams: the answer on stdout, everything
    else (thinking, tool calls, approvals, retries) on stderr."""

    def __init__(self, *, quiet: bool, wait: bool) -> None:
        self.quiet = quiet  # --json: only the final JSON goes to stdout
        self.wait = wait
        self.thinking = False
        self.answered = False  # some of the answer is on stdout

    def __call__(self, event: TurnEvent) -> None:
        from diana.core.api.types import (
            ApprovalPending,
            Delta,
            GapFound,
            Progress,
            ToolCallFinished,
            ToolCallStarted,
        )

        if isinstance(event, Delta) and event.kind == "content":
            self._end_thinking()
            if not self.quiet:
                self.answered = True
                sys.stdout.write(event.text)
                sys.stdout.flush()
        elif isinstance(event, GapFound):  # the answer streamed while the tools were checked
            self._end_thinking()
            if self.answered:
                sys.stdout.write("\n")
                _err("diana: the answer above was stopped: no tool can do what it needs")
        elif isinstance(event, Delta):
            if not self.thinking:
                self.thinking = True
                _err("thinking: ", end="")
            _err(event.text, end="")
        elif isinstance(event, ToolCallStarted):
            self._end_thinking()
            _err(_line(f"⚙ {event.name} {brief_arguments(event.arguments)}"))
        elif isinstance(event, ApprovalPending):
            proposal = event.proposal
            reason = _line(proposal.reason)
            _err(f"⏸ {proposal.tool} needs approval: proposal {proposal.id} ({reason})")
            if self.wait:
                _err(f"  waiting for a decision — `diana approve {proposal.id}` or the app")
            else:
                _err(f"  left pending — approve with `diana approve {proposal.id}`")
        elif isinstance(event, ToolCallFinished):
            record = event.record
            mark = "✓" if record.succeeded else "✗"
            detail = f": {record.error}" if record.error and not record.succeeded else ""
            if record.succeeded and record.result is not None:
                detail = f" → {brief_result(record.result)}"
            took = f" in {record.timing}" if record.ran else f" · {record.timing}"
            _err(_line(f"  {mark} {record.status}{took}{detail}"))
        elif isinstance(event, Progress) and (event.retry or event.notice):
            _err(_line(f"… {event.text}"))

    def _end_thinking(self) -> None:
        if self.thinking:
            self.thinking = False
            _err("")


async def ask_on_terminal(question: str, choices: list[str]) -> str | None:
    """request_human_input for `diana ask`: the question on stderr, the answer from stdin."""
    async with terminal_turn("the model"):
        _err(f"? {question}")
        if choices:
            _err("  choices: " + " | ".join(choices))
        _err("> ", end="")  # not input("> "): that prompt would land in stdout, inside --json
        answer = await read_line()
    return (answer or "").strip() or None


async def elicit_on_terminal(request: Elicitation) -> Answer:
    """A server asks the person something (MCP elicitation): each field asked on stderr,
    read from the terminal, its description under its title. Enter takes the default; a
    value that does not fit is asked again; a secret-looking field is not echoed. One
    request is asked at a time, all its fields together: another server's waits its turn."""
    async with terminal_turn(f"MCP server {request.server}"):
        return await _elicit(request)


async def _elicit(request: Elicitation) -> Answer:
    _err(_line(f"? MCP server {request.server} asks: {request.message}"))
    if request.mode == "url":
        _err(_line(f"  open this URL: {request.url}"))
        return Answer(await _final_choice("  done? [y]es / [n]o (decline) / [c]ancel (Enter): "))
    content: dict[str, Any] = {}
    for field in request.fields:
        default = "" if field.default is None else f" [{_shown(field.titled(field.default))}]"
        optional = "" if field.required else ", optional"
        asked = f"  {field.title} ({field.describe()}{optional}){default}"
        if field.description:  # the title, what the server says of it, then where to type
            _err(_line(asked))
            _err(_line(f"    {field.description}"))
            prompt = "  > "
        else:
            prompt = f"{asked}: "
        while True:
            _err(_line(prompt), end="")
            typed = await read_line(echo=not field.secret)
            if typed is None:  # the terminal closed
                return Answer("cancel")
            if not typed.strip():
                if field.default is not None:
                    content[field.name] = field.default
                elif field.required:
                    _err("    required")
                    continue
                break
            try:
                content[field.name] = field.read(typed)
                break
            except ValueError as exc:
                _err(f"    {exc}")
    action = await _final_choice("  send it? [y]es / [n]o (decline) / [c]ancel (Enter): ")
    return Answer(action, content if action == "accept" else None)


async def _final_choice(prompt: str) -> Action:
    while True:
        _err(prompt, end="")
        typed = ((await read_line()) or "c").strip().lower()
        for action, keys in (("accept", ("y", "yes")), ("decline", ("n", "no"))):
            if typed in keys:
                return cast(Action, action)
        if typed in ("c", "cancel"):
            return "cancel"


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def sampling_waits(proposal_id: str, server: str) -> None:
    """A server's request to the local model waits for a person, who may be elsewhere."""
    _err(
        _line(
            f"? MCP server {server} asks the local model to write a reply: proposal "
            f"{proposal_id} waits for approval (`diana approve {proposal_id}`, or in diana-tui)"
        )
    )


async def decline_without_terminal(request: Elicitation) -> Answer:
    """No terminal to ask on (a pipe, a script): the request is declined, and said so."""
    _err(_line(f"diana: MCP server {request.server} asked: {request.message}"))
    _err("diana: declined: there is no terminal to ask on")
    return Answer("decline")


# Whose turn it is to ask on the terminal, per event loop (a process runs one at a time).
_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def terminal_turn(asking: str) -> AsyncIterator[None]:
    """The terminal for one request, every question of it: the others asking meanwhile wait
    in the order they came (an asyncio lock is first come, first served), so what a person
    types always answers the request shown. A request that ends before it is answered (its
    time ran out, the command is stopping) says so, and the next one is asked."""
    loop = asyncio.get_running_loop()
    turn = _turns.setdefault(loop, asyncio.Lock())
    async with turn:
        try:
            yield
        except asyncio.CancelledError:
            _err("")
            _err(_line(f"  ({asking} no longer waits for this answer)"))
            raise


async def read_line(*, echo: bool = True) -> str | None:
    """A line from the terminal on stdin, or None at its end. The loop reads it when the
    terminal has a whole line (a terminal hands over one line at a time), so a question
    that ends before it is answered (its time ran out, Ctrl-C, SIGTERM) stops reading at
    once: nothing is left reading that would take the line typed for the next question,
    and nothing keeps the command from exiting. Typing is hidden for a secret, and shown
    again on every way out."""
    loop = asyncio.get_running_loop()
    fd, encoding = sys.stdin.fileno(), sys.stdin.encoding or "utf-8"
    with _no_echo(fd, echo):
        data = await _line_from(loop, fd)
        if not echo:
            os.write(2, b"\n")  # the Enter that was not echoed
    if not data:
        return None
    return (data.decode(encoding, errors="replace").splitlines() or [""])[0]


async def _line_from(loop: asyncio.AbstractEventLoop, fd: int) -> bytes | None:
    """What one read of ``fd`` gives once it is ready (b"" at its end); None if the loop
    cannot watch it (not a terminal or a pipe)."""
    line: asyncio.Future[bytes] = loop.create_future()

    def ready() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return  # a terminal left non-blocking, its line taken by another reader
        except OSError:
            data = b""
        loop.remove_reader(fd)
        if not line.done():
            line.set_result(data)

    try:
        loop.add_reader(fd, ready)
    except (OSError, ValueError):
        return None
    try:
        return await line
    finally:
        loop.remove_reader(fd)


# The terminal's settings while typing is hidden, so they are put back even at an exit that
# skips every finally-block the question was in.
_hidden: dict[int, list[Any]] = {}


def _show_typing_again() -> None:
    import termios

    for fd, saved in list(_hidden.items()):
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
    _hidden.clear()


atexit.register(_show_typing_again)


@contextlib.contextmanager
def _no_echo(fd: int, echo: bool) -> Iterator[None]:
    """Typing is not shown while a secret is read from a terminal; it is shown again however
    the reading ends (an answer, its end, an error, a cancellation)."""
    if echo or not os.isatty(fd):
        yield
        return
    import termios

    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    _hidden[fd] = saved
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, saved)
        _hidden.pop(fd, None)


async def cmd_ask(core: Core, args: argparse.Namespace) -> int:
    chat = core.chat
    if args.model:
        chat.model = args.model
    if args.think is not None:
        chat.think = args.think == "on"
    if args.chat is not None and args.continue_:
        raise BadInput("--chat ID and --continue both say which conversation: give one")
    if args.chat is not None:
        from diana.core.api.errors import UnknownChat

        try:
            await chat.open(without_surrogates(args.chat.strip()))
        except UnknownChat as exc:
            raise BadInput(str(exc)) from None
        if args.model:  # the conversation's own model, unless --model says another
            chat.model = args.model
    elif args.continue_:
        await chat.open_latest()
    if args.system is not None:
        from diana.core.api.errors import BadChatInput

        try:
            await chat.set_system(args.system)
        except BadChatInput as exc:
            raise BadInput(f"--system: {exc}") from None
    images = _images(args.image or [])
    await core.wait_servers_ready()
    prompt = args.prompt
    if "@" in prompt:  # `@server:uri`: the resource's text goes with the prompt
        from diana.core.api import with_attachments
        from diana.core.api.errors import CatalogError

        try:
            prompt, attached = await with_attachments(prompt, core.server_configs, core.connected)
        except CatalogError as exc:
            raise Failed(f"not asked: {exc}") from None
        for item in attached:
            _err(_line(f"📎 {item.server}:{item.uri} ({item.shown})"))
    printer = AskPrinter(quiet=args.json, wait=args.wait)
    from diana.core.api.errors import BadImage

    try:
        if images:  # refused before anything is said of them, or asked
            await chat.check_takes_images()
        for image in images:
            _err(_line(image.shown))
        outcome = await chat.run_turn(prompt, printer, wait_for_decisions=args.wait, images=images)
    except BadImage as exc:
        raise BadInput(f"--image: {exc}") from None
    if (notice := chat.context_notice()) is not None:
        _err(_line(f"diana: {notice}"))
    if outcome.problem is not None:
        if args.json:  # scripts get JSON on stdout whatever happened
            print(_dump({"error": outcome.problem.message, "code": outcome.problem.code.value}))
        _problem(outcome.problem.message)
        return EXIT_BAD_INPUT
    if outcome.gap is not None:
        if args.json:
            print(_dump(outcome.gap.model_dump(mode="json")))
        else:
            print(outcome.gap.summary())
            print(f"missing: {', '.join(outcome.gap.missing_tools)}")
            print(f"checked: {', '.join(outcome.gap.existing_tools_checked) or 'no tools'}")
            for missing, entries in outcome.gap.candidates.items():
                for entry in entries:
                    print(_line(f"server for {missing}: {entry['name']} — {entry['description']}"))
            if outcome.gap.candidates:
                print("add one with: diana servers install NAME")
        return EXIT_TOOL_GAP
    assert outcome.response is not None
    if args.json:
        print(_dump(outcome.response.model_dump(mode="json")))
    else:
        print()
        sources = outcome.response.sources
        if sources:
            cited = all(source.cited for source in sources)
            print("\nSources:" if cited else "\nLooked up (not cited):")
            for source in sources:
                print(f"  [{source.n}] {source.title}  {source.url}")
    if outcome.pending:
        _err(f"diana: waiting for approval: {', '.join(outcome.pending)}")
        return EXIT_NEEDS_APPROVAL
    return EXIT_OK


def _images(paths: list[str]) -> list[Image]:
    """The pictures --image names, read before anything is asked; BadInput naming the
    first that cannot go."""
    from diana.core.api import read_images
    from diana.core.api.errors import BadImage

    try:
        return read_images(paths)
    except BadImage as exc:
        raise BadInput(f"--image: {exc}") from None


def ask_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="what to ask")
    parser.add_argument("--json", action="store_true", help="print one AgentResponse as JSON")
    parser.add_argument(
        "--wait", action="store_true", help="wait for decisions on calls that need approval"
    )
    parser.add_argument("--model", metavar="M", help="the Ollama model (default from settings)")
    parser.add_argument("--think", choices=("on", "off"), help="ask a thinking model to think")
    parser.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the last conversation instead of starting one",
    )
    parser.add_argument(
        "--chat", metavar="ID", help="go on with this conversation (diana chats lists them)"
    )
    parser.add_argument(
        "--image",
        metavar="PATH",
        action="append",
        help="a PNG, JPEG, GIF or WebP picture to go with the question (repeatable; for a "
        "model that takes images)",
    )
    parser.add_argument(
        "--system",
        metavar="TEXT",
        help="the conversation's own system prompt, added to diana's and kept with it",
    )


def asked_to_wait(args: argparse.Namespace) -> bool:
    """`diana ask --wait` hears decisions made in another process."""
    return bool(args.wait)
