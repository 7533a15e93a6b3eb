"""`diana agents [stop|start] NAME`: diana's own agents, and a person's switch for each."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from diana.core.api.errors import AgentSwitchRefused, ConfigError
from diana.core.api.types import SETTINGS_FILE

from .common import EXIT_OK, BadInput, _dump, _table, _warn

if TYPE_CHECKING:
    from diana.core.api import Core


async def cmd_agents(core: Core, args: argparse.Namespace) -> int:
    """diana's own agents and whether each is stopped; `stop NAME` / `start NAME` switch one
    in settings.json, which a running diana-tui applies within a second."""
    if args.action is not None:
        return await _switch(core, args)
    if args.name is not None:
        raise BadInput(f"give stop or start before {args.name}")
    own = set(core.switchable_agents())
    slots = [slot for slot in core.agent_slots() if slot.name in own]
    rows = [
        {
            "agent": slot.name,
            "state": "stopped" if slot.stopped_note else slot.state.value,
            "stopped_by_person": slot.stopped_note is not None,
            "tools": len(slot.tools),
            "note": slot.stopped_note or slot.error,
        }
        for slot in sorted(slots, key=lambda s: s.name)
    ]
    if args.json:
        print(_dump(rows))
    else:
        print(
            _table(
                [
                    (str(r["agent"]), str(r["state"]), str(r["tools"]), str(r["note"] or ""))
                    for r in rows
                ],
                ("AGENT", "STATE", "TOOLS", "NOTE"),
            )
        )
        print("MCP servers' agents are switched with `diana servers disable NAME`.")
    return EXIT_OK


async def _switch(core: Core, args: argparse.Namespace) -> int:
    if args.name is None:
        raise BadInput(f"give the name of the agent to {args.action}")
    stop = args.action == "stop"
    try:
        changed = await core.switch_agent(args.name, stop=stop)
    except AgentSwitchRefused as exc:
        raise BadInput(str(exc)) from None
    except ConfigError as exc:
        raise BadInput(f"{SETTINGS_FILE} not changed: {exc}") from None
    state = "stopped" if stop else "started"
    if not changed:
        print(f"{args.name} is already {state}.")
        return EXIT_OK
    app = await core.running_app(_warn)
    if app is not None:
        what = (
            f"{app.describe()} stops it now; its tools are no longer offered"
            if stop
            else f"{app.describe()} starts it now and offers its tools"
        )
    else:
        what = (
            "it is not started, and its tools are not offered"
            if stop
            else "diana starts it, and offers its tools"
        )
    print(f"{args.name} {state} in {SETTINGS_FILE}: {what}.")
    return EXIT_OK


def agents_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", choices=("stop", "start"), help="stop or start one of diana's agents"
    )
    parser.add_argument("name", nargs="?", help="agent name, as `diana agents` lists it")
    parser.add_argument("--json", action="store_true", help="print one JSON array")
