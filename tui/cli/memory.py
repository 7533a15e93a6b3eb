"""`diana memory`: the facts DIANA remembers — list, search, show one, forget one."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import EXIT_OK, BadInput, _dump, _line, _table

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import Fact


MAX_FACTS_SHOWN = 100_000  # --limit
ROW_ID_MAX = 2**63 - 1  # the largest id SQLite can hold


async def cmd_memory(core: Core, args: argparse.Namespace) -> int:
    memory = core.memory
    if not 1 <= args.limit <= MAX_FACTS_SHOWN:
        raise BadInput(f"--limit must be between 1 and {MAX_FACTS_SHOWN:,}, not {args.limit}")
    if args.action == "search":
        if not args.value:
            raise BadInput("give what to search for: diana memory search QUERY")
        # One batch of the facts not embedded yet, no more: the answer does not wait for
        # them all (the others are found by their words, and embedded by the app).
        await memory.backfill(batches=1)
        found = await memory.search(args.value, args.limit, tag=args.tag, embed_missing=False)
        if args.json:
            print(_dump(found.as_json()))
            return EXIT_OK
        if found.why:
            print(f"({found.mode}: {_line(found.why)})")
        rows = [
            (str(h.fact.id), f"{h.score:.4f}", _line(h.fact.content), " ".join(h.fact.tags))
            for h in found.hits
        ]
        print(_table(rows, ("ID", "SCORE", "FACT", "TAGS")) if rows else "no fact matches")
        return EXIT_OK
    if args.action in ("show", "forget"):
        fact_id = _fact_id(args.value)
        fact = await (memory.get(fact_id) if args.action == "show" else memory.forget(fact_id))
        if fact is None:
            raise BadInput(f"no fact {fact_id} in memory (diana memory list shows them)")
        if args.json:
            print(_dump(fact.as_json()))
        elif args.action == "forget":
            print(f"forgot fact {fact.id}: {_line(fact.content)}")
        else:
            _show(fact)
        return EXIT_OK
    facts = await memory.recent(limit=args.limit, tag=args.tag)
    if args.json:
        print(_dump([f.as_json() for f in facts]))
        return EXIT_OK
    status = await memory.status()
    print(f"{status.facts} facts, {status.embedded} embedded with {status.model}")
    rows = [(str(f.id), f.created_at[:16], _line(f.content), " ".join(f.tags)) for f in facts]
    if rows:
        print(_table(rows, ("ID", "SAVED", "FACT", "TAGS")))
    return EXIT_OK


def _fact_id(value: str | None) -> int:
    try:
        fact_id = int(value or "")
    except ValueError:
        raise BadInput(f"a fact id is a number, not {_shown(value)}") from None
    if not 1 <= fact_id <= ROW_ID_MAX:
        raise BadInput(f"a fact id is a number from 1 to {ROW_ID_MAX}, not {_shown(value)}")
    return fact_id


def _shown(value: str | None) -> str:
    """A value a person gave, quoted, and cut short if it is long."""
    text = value or ""
    return repr(text if len(text) <= 40 else text[:40] + "…")


def _show(fact: Fact) -> None:
    print(f"fact {fact.id}: {_line(fact.content)}")
    print(f"  saved    {fact.created_at} by {fact.source or 'unknown'}")
    print(f"  tags     {' '.join(fact.tags) or '-'}")
    print(f"  metadata {_dump(fact.metadata, indent=None)}")
    print(f"  embedded {'yes' if fact.embedded else 'not yet'}")


def memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="list", choices=("list", "search", "show", "forget")
    )
    parser.add_argument("value", nargs="?", help="the query (search) or the fact id")
    parser.add_argument("--tag", help="only facts with this tag (list, search)")
    parser.add_argument("--limit", type=int, default=20, help="how many facts (default 20)")
    parser.add_argument("--json", action="store_true", help="print JSON")
