"""`diana policy` and `diana policy remove`: the approval policy's rules, where each came
from, and taking one out."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, get_args

from diana.core.api.errors import UnknownRule
from diana.core.api.types import RuleKind as Kind

from .common import EXIT_OK, BadInput, _dump, _table

if TYPE_CHECKING:
    from diana.core.api import Core


async def cmd_policy(core: Core, args: argparse.Namespace) -> int:
    """Every rule in force; `remove NAME` takes one out of the user's policy.json."""
    if args.action is not None:
        return await _remove(core, args)
    if args.name is not None:
        raise BadInput(f"give remove before {args.name}")
    policy = core.policy_rules()
    entries = policy.entries
    if args.json:
        print(_dump([entry.public() for entry in entries]))
        return EXIT_OK
    origin = "the shipped default" if policy.shipped else "yours"
    print(f"Rules from {policy.path} ({origin}):")
    if not entries:
        print("none: each call is judged by its risk.")
        return EXIT_OK
    print(
        _table(
            [(e.kind, e.name, e.rule.value, e.applies_to) for e in entries],
            ("KIND", "NAME", "RULE", "APPLIES TO"),
        )
    )
    return EXIT_OK


async def _remove(core: Core, args: argparse.Namespace) -> int:
    """Written through the one config writer; every running diana applies it at its next
    call (the app within a second)."""
    if args.name is None:
        raise BadInput("give the name of the rule to remove (a tool, or a server)")
    try:
        removed = await core.remove_rule(args.name, args.kind)
    except UnknownRule as exc:
        raise BadInput(str(exc)) from None
    print(f"removed {removed} from {core.policy_rules().user_file}")
    return EXIT_OK


def policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("remove",), help="take a rule out")
    parser.add_argument("name", nargs="?", help="the tool or server the rule is for")
    parser.add_argument(
        "--kind",
        choices=get_args(Kind),
        help="which rule, when a name has several (a server's rule and its sampling rule)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON array")
