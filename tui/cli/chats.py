"""`diana chats`: the conversations kept — list them, search them, show, rename, remove or
export one."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from diana.core.api import check_save_target, save_to
from diana.core.api.errors import BadChatInput, UnknownChat, UnreadableFile
from diana.core.api.shown import without_surrogates
from diana.core.api.types import FORMATS

from .common import EXIT_OK, BadInput, _dump, _err, _line, _table

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import ChatSummary

ACTIONS = ("list", "search", "show", "rename", "rm", "export")
HEADERS = ("ID", "LAST USED", "MODEL", "MSGS", "FROM", "TITLE")
# On a narrow terminal the model and the origin give way (to their least width, then out).
GIVES_WAY = {"MODEL": 8, "FROM": 0, "TITLE": 12}
SHOWN = 50  # list, search: how many, unless --limit says
MAX_SHOWN = 100_000  # --limit


async def cmd_chats(core: Core, args: argparse.Namespace) -> int:
    try:
        return await _run(core, args)
    except (UnknownChat, BadChatInput) as exc:
        raise BadInput(str(exc)) from None


async def _run(core: Core, args: argparse.Namespace) -> int:
    chats = core.chats
    # Bytes that are not UTF-8 become U+FFFD: such an id is simply unknown.
    words = [without_surrogates(word) for word in args.words]
    if not 1 <= args.limit <= MAX_SHOWN:
        raise BadInput(f"--limit must be between 1 and {MAX_SHOWN:,}, not {args.limit}")
    if args.action in ("list", "search"):
        text = " ".join(words) if args.action == "search" else args.search or ""
        if args.action == "search" and not text:
            raise BadInput("give what to search for: diana chats search WORDS")
        found = await (chats.search(text, args.limit) if text else chats.recent(args.limit))
        if args.json:
            print(_dump([c.as_json() for c in found]))
        elif found:
            print(_table([_row(c) for c in found], HEADERS, GIVES_WAY, drop=("FROM",)))
        else:
            print("no conversation matches" if text else "no conversation yet — diana ask TEXT")
        return EXIT_OK
    chat_id = _id(words, args.action)
    if args.action == "show":
        if args.json:
            print(await chats.export(chat_id, "json"))
        else:
            print(await chats.export(chat_id, "md"), end="")
        return EXIT_OK
    if args.action == "rename":
        if len(words) < 2:
            raise BadInput("give the new title: diana chats rename ID TITLE")
        renamed = await chats.rename(chat_id, " ".join(words[1:]))
        print(f"renamed {chat_id}: {_line(renamed.title)}")
        return EXIT_OK
    if args.action == "rm":
        return await _remove(core, chat_id, args.yes)
    return await _export(core, chat_id, args)


def _id(words: list[str], action: str) -> str:
    if not words or not words[0].strip():
        raise BadInput(f"give the conversation's id: diana chats {action} ID")
    return words[0].strip()


def _row(chat: ChatSummary) -> tuple[str, ...]:
    return (
        chat.id,
        chat.updated_at[:16].replace("T", " "),
        chat.model,
        str(chat.messages),
        chat.origin,
        chat.title or "(untitled)",
    )


async def _remove(core: Core, chat_id: str, yes: bool) -> int:
    chat = await core.chats.get(chat_id)
    if not yes:
        if not sys.stdin.isatty():
            raise BadInput(f"removing conversation {chat_id} needs --yes when there is no terminal")
        title = _line(chat.title or "(untitled)")
        _err(f"remove conversation {chat_id} ({title}, {chat.messages} messages)? [y/N] ", end="")
        typed = await asyncio.to_thread(sys.stdin.readline)
        if typed.strip().lower() not in ("y", "yes"):
            print(f"kept {chat_id}")
            return EXIT_OK
    gone = await core.chats.delete(chat_id)
    print(f"removed conversation {chat_id} ({gone.messages} messages; its calls stay in the log)")
    return EXIT_OK


async def _export(core: Core, chat_id: str, args: argparse.Namespace) -> int:
    form = args.format or ("json" if args.out and args.out.endswith(".json") else "md")
    if args.out is None:
        print(await core.chats.export(chat_id, form), end="" if form == "md" else "\n")
        return EXIT_OK
    target = Path(args.out)
    try:
        check_save_target(target)  # refused before anything is read
        text = await core.chats.export(chat_id, form)
        save_to(target, text.encode("utf-8"))
    except UnreadableFile as exc:
        raise BadInput(f"--out {exc}") from None
    print(f"exported conversation {chat_id} to {_line(str(target))}")
    return EXIT_OK


def chats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=ACTIONS)
    parser.add_argument(
        "words", nargs="*", help="the words to search for, or the conversation's id (and title)"
    )
    parser.add_argument("--search", metavar="WORDS", help="list: only those holding these words")
    parser.add_argument(
        "--limit", type=int, default=SHOWN, help=f"list, search: how many ({SHOWN})"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (list, search, show)")
    parser.add_argument("--format", choices=FORMATS, help="export: md (default) or json")
    parser.add_argument("--out", metavar="FILE", help="export: write to FILE, not stdout")
    parser.add_argument("--yes", action="store_true", help="rm: remove without asking")
