"""`diana tools`, `diana call` and `diana health`: the tools agents offer, one call, every
agent's health."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from diana.core.api import add_tool, parse_arguments, read_json, remove_tool, update_tool
from diana.core.api.errors import ArgumentsError, RegistryChangeError
from diana.core.api.shown import age_text
from diana.core.models import ErrorCode, ToolResult

from .common import (
    BAD_INPUT_CODES,
    EXIT_BAD_INPUT,
    EXIT_NEEDS_APPROVAL,
    EXIT_OK,
    EXIT_TOOL_FAILED,
    NONE,
    ON_DEMAND,
    BadInput,
    _dump,
    _err,
    _line,
    _problem,
    _table,
    _warn,
)

if TYPE_CHECKING:
    from datetime import datetime

    from diana.core.api import Core
    from diana.core.api.types import LiveApp, ToolSource
    from diana.core.profiles import Profile


async def cmd_tools(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.types import TOOLS, ToolsAnswer

    from .asked import answered, field_text

    if args.action == "changes":
        return await show_tool_changes(core, args.json)
    if args.action == "accept":
        return await accept_tool(core, args.target)
    if args.action is not None:
        return await change_local_tools(core, args.action, args.target)
    what = "the tools it offers" + (", its servers' lists listed again" if args.refresh else "")
    found, app = await answered(
        core,
        args,
        TOOLS,
        params={"refresh": True} if args.refresh else None,
        what=what,
        start=args.refresh,  # --refresh connects to every server, the tool cache aside
    )
    assert isinstance(found, ToolsAnswer)
    tools = found.tools
    if args.json:
        print(_dump(tools))
        return EXIT_OK
    print(
        _table(
            [
                tuple(field_text(t, key) for key in ("name", "agent", "risk", "description"))
                for t in tools
            ],
            ("TOOL", "AGENT", "RISK", "DESCRIPTION"),
            {"AGENT": 6, "DESCRIPTION": 12},
        )
    )
    if found.servers:
        again = (
            "connects to each server" if app is None else f"has {app.describe()} list them again"
        )
        now = core.now()
        print()
        print(f"MCP servers' tools (`diana tools --refresh` {again}):")
        print(
            _table([(s.server, _listed(s, app, now)) for s in found.servers], ("SERVER", "LISTED"))
        )
    return EXIT_OK


def _listed(source: ToolSource, app: LiveApp | None, now: datetime) -> str:
    """When and how a server's tools were listed, for a person."""
    at = source.listed_at
    if source.source == "cache" and at is not None:
        return f"{age_text(now - at)}, from the tool cache"
    if source.source == "connection":
        if app is None:
            how = "just now, connected for this command"
        else:
            how = f"{age_text(now - at) if at else 'listed'}, by {app.describe()}"
        return how + (f"; {source.reason}" if source.reason else "")
    return f"not listed: {source.reason or 'not started'}"


async def show_tool_changes(core: Core, as_json: bool) -> int:
    """diana tools changes: each held tool, with what changed, old and new."""
    changes = await core.tool_changes()
    if as_json:
        print(_dump([change.public() for change in changes]))
        return EXIT_OK
    if not changes:
        print("no tool is held: every MCP tool offers the definition that was accepted")
        return EXIT_OK
    for change in changes:
        print(
            _line(
                f"{change.tool} (MCP server {change.server}): "
                f"{', '.join(change.changed_parts())} changed; "
                f"held until `diana tools accept {change.tool}`"
            )
        )
        for part, old, new in change.differences():
            print(f"  {part}")
            print(f"    - {_line(old)}")
            print(f"    + {_line(new)}")
    return EXIT_OK


async def accept_tool(core: Core, name: str | None) -> int:
    """diana tools accept NAME: the held tool's new definition is accepted."""
    from diana.core.api.errors import UnknownHeldTool

    if not name:
        raise BadInput("tools accept needs the NAME of a held tool (diana tools changes)")
    try:
        accepted = await core.accept_tool(name)
    except UnknownHeldTool as exc:
        raise BadInput(str(exc)) from None
    servers = ", ".join(sorted({change.server for change in accepted}))
    print(_line(f"{name} accepted as MCP server {servers} offers it now; it can be called again"))
    return EXIT_OK


async def change_local_tools(core: Core, action: str, target: str | None) -> int:
    """diana tools add|update FILE.json, diana tools remove NAME: one validated write."""
    if not target:
        raise BadInput(f"tools {action} needs {'a NAME' if action == 'remove' else 'FILE.json'}")
    if action == "remove":
        change, name = remove_tool(target), target
    else:
        entry = read_json(Path(target))
        if not isinstance(entry, dict):
            raise BadInput(f"{target}: must hold one tool as a JSON object")
        change = add_tool(entry) if action == "add" else update_tool(entry)
        name = str(entry.get("name"))
    try:
        specs = await core.change_local_tools(change)
    except RegistryChangeError as exc:
        raise BadInput(str(exc)) from None
    done = {"add": "added", "update": "updated", "remove": "removed"}[action]
    print(f"{name} {done}; tools.json now has {len(specs)} local tools")
    return EXIT_OK


async def cmd_call(core: Core, args: argparse.Namespace) -> int:
    try:
        params = parse_arguments(args.args)
    except ArgumentsError as exc:
        raise BadInput(f"--args: {exc}") from None
    with progress_on_stderr(core):
        result: ToolResult = await core.call_tool(args.tool, params, origin="cli", warn=_warn)
    if args.json:
        print(_dump(result.model_dump(mode="json")))
    elif result.success:
        print(result.data if isinstance(result.data, str) else _dump(result.data))
    else:
        _problem(result.error or "the call failed")
    if result.success:
        return EXIT_OK
    if result.error_code is ErrorCode.PENDING_APPROVAL:
        if not args.json:
            proposal_id = result.data["proposal_id"]
            print(proposal_id)
            print(f"diana: approve with `diana approve {proposal_id}`", file=sys.stderr)
        return EXIT_NEEDS_APPROVAL
    return EXIT_BAD_INPUT if result.error_code in BAD_INPUT_CODES else EXIT_TOOL_FAILED


@contextlib.contextmanager
def progress_on_stderr(core: Core) -> Iterator[None]:
    """How far a running call has got, as its server says, on stderr: one line redrawn on a
    terminal, else a line for each change, at most one a second."""
    from diana.core.events import CallProgress

    redraw = sys.stderr.isatty()
    shown_text, shown_at = "", 0.0

    async def follow() -> None:
        nonlocal shown_text, shown_at
        events = core.subscribe()
        try:
            while True:
                event = await events.get()
                if not isinstance(event, CallProgress):
                    continue
                text = _line(f"… {event.tool}: {event.describe()}")
                now = time.monotonic()
                if text == shown_text or (not redraw and now - shown_at < 1.0):
                    continue
                shown_text, shown_at = text, now
                if redraw:
                    sys.stderr.write("\r\x1b[2K" + text)
                    sys.stderr.flush()
                else:
                    _err(text)
        finally:
            core.unsubscribe(events)

    task = asyncio.get_running_loop().create_task(follow())
    try:
        yield
    finally:
        task.cancel()
        if redraw and shown_text:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


async def cmd_health(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.types import HEALTH, HealthAnswer

    from .asked import answered, field_text

    found, _app = await answered(
        core, args, HEALTH, what="its agents' health, checked now", start=True
    )
    assert isinstance(found, HealthAnswer)
    reports = found.agents
    if args.json:
        print(_dump(reports))
    else:
        print(
            _table(
                [
                    tuple(
                        field_text(r, key)
                        for key in ("agent_id", "status", "state", "tool_count", "message")
                    )
                    for r in reports
                ],
                ("AGENT", "HEALTH", "STATE", "TOOLS", "MESSAGE"),
            )
        )
    unhealthy = any(r.get("status") == "unhealthy" for r in reports)
    return EXIT_TOOL_FAILED if unhealthy else EXIT_OK


def tools_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("add", "update", "remove", "changes", "accept"),
        help="change tools.json; or list MCP tools held because their definition changed "
        "(changes), or accept one's new definition (accept NAME)",
    )
    parser.add_argument(
        "target", nargs="?", help="FILE.json for add/update, NAME for remove and accept"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="list every MCP server's tools anew, not from the tool cache (a running "
        "diana-tui has its servers list them again; otherwise each is connected)",
    )


def call_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tool", help="tool name, as `diana tools` lists it")
    parser.add_argument("--args", metavar="JSON", help="arguments as a JSON object")
    parser.add_argument("--json", action="store_true", help="print the ToolResult as JSON")


def health_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def tools_servers(args: argparse.Namespace) -> str:
    """`diana tools` lists from the tool cache (servers on demand), or with --refresh asks
    every server (started by the command, once it knows no diana-tui answers); changing
    tools.json starts none."""
    return NONE if args.action or args.refresh else ON_DEMAND


def tools_profile(args: argparse.Namespace) -> Profile | None:
    """Tool pins are read and accepted in the database alone: the reading profile."""
    from diana.core.profiles import Profile

    return Profile.READ if args.action in ("changes", "accept") else None
