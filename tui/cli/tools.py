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
from typing import TYPE_CHECKING, Any

from core.arguments import ArgumentsError, parse_arguments
from core.config import read_json
from core.mcp.config import agent_id_for
from core.mcp.tool_cache import age_text
from core.models import ErrorCode, ToolResult
from core.tools.local import RegistryChangeError, add_tool, remove_tool, update_tool

from .common import (
    ALL,
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
)

if TYPE_CHECKING:
    from core.runtime import Runtime


async def cmd_tools(runtime: Runtime, args: argparse.Namespace) -> int:
    if args.action is not None:
        return await change_local_tools(runtime, args.action, args.target)
    await runtime.mcp.wait_ready()  # servers the tool cache does not hold fresh
    runtime.orchestrator.check_schemas()  # a tool the app would refuse is not listed
    listed = _listed_at(runtime)
    tools: list[dict[str, Any]] = [
        {
            "name": d.name,
            "agent": agent,
            "description": d.description,
            "parameters": d.parameters,
            "risk": d.risk.value,
            "category": d.category,
            "annotations": d.annotations.model_dump(by_alias=True, exclude_none=True),
            **({"listed_at": listed[agent][0]} if agent in listed else {}),
        }
        for d, agent in runtime.orchestrator.tool_definitions()
    ]
    if args.json:
        print(_dump(tools))
        return EXIT_OK
    print(
        _table(
            [(t["name"], t["agent"], t["risk"], t["description"]) for t in tools],
            ("TOOL", "AGENT", "RISK", "DESCRIPTION"),
        )
    )
    if runtime.mcp.configs:
        print()
        print("MCP servers' tools (`diana tools --refresh` connects to each server):")
        print(_table([(name, how) for name, (_at, how) in _sources(runtime)], ("SERVER", "LISTED")))
    return EXIT_OK


def _sources(runtime: Runtime) -> list[tuple[str, tuple[str | None, str]]]:
    """Each MCP server: when its tools were listed (ISO time or None) and how, for a person."""
    now = runtime.clock.now()
    sources: list[tuple[str, tuple[str | None, str]]] = []
    for name in runtime.mcp.configs:
        connection = runtime.mcp.connections.get(name)
        cached_at = runtime.mcp.cached_at(name)
        if cached_at is not None:
            how = f"{age_text(now - cached_at)}, from the tool cache"
            sources.append((name, (cached_at.isoformat(), how)))
        elif connection is not None and connection.ready:
            sources.append((name, (now.isoformat(), "just now, connected for this command")))
        else:
            reason = connection.unavailable_reason() if connection else "not started"
            sources.append((name, (None, f"not listed: {reason}")))
    return sources


def _listed_at(runtime: Runtime) -> dict[str, tuple[str | None, str]]:
    """_sources by the agent id of each server."""
    return {agent_id_for(name): source for name, source in _sources(runtime)}


async def change_local_tools(runtime: Runtime, action: str, target: str | None) -> int:
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
        specs = await runtime.local_tools.change(change)
    except RegistryChangeError as exc:
        raise BadInput(str(exc)) from None
    done = {"add": "added", "update": "updated", "remove": "removed"}[action]
    print(f"{name} {done}; tools.json now has {len(specs)} local tools")
    return EXIT_OK


async def cmd_call(runtime: Runtime, args: argparse.Namespace) -> int:
    try:
        params = parse_arguments(args.args)
    except ArgumentsError as exc:
        raise BadInput(f"--args: {exc}") from None
    with progress_on_stderr(runtime):
        result: ToolResult = await runtime.call_tool(args.tool, params, origin="cli")
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
def progress_on_stderr(runtime: Runtime) -> Iterator[None]:
    """How far a running call has got, as its server says, on stderr: one line redrawn on a
    terminal, else a line for each change, at most one a second."""
    from core.events import CallProgress

    redraw = sys.stderr.isatty()
    shown_text, shown_at = "", 0.0

    async def follow() -> None:
        nonlocal shown_text, shown_at
        events = runtime.bus.subscribe()
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
            runtime.bus.unsubscribe(events)

    task = asyncio.get_running_loop().create_task(follow())
    try:
        yield
    finally:
        task.cancel()
        if redraw and shown_text:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


async def cmd_health(runtime: Runtime, args: argparse.Namespace) -> int:
    await runtime.mcp.wait_ready()
    reports = await runtime.orchestrator.health()
    if args.json:
        print(_dump([r.model_dump(mode="json") for r in reports]))
    else:
        print(
            _table(
                [
                    (r.agent_id, r.status, r.state.value, str(r.tool_count), r.message or "")
                    for r in reports
                ],
                ("AGENT", "HEALTH", "STATE", "TOOLS", "MESSAGE"),
            )
        )
    unhealthy = any(r.status == "unhealthy" for r in reports)
    return EXIT_TOOL_FAILED if unhealthy else EXIT_OK


def tools_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", choices=("add", "update", "remove"), help="change tools.json"
    )
    parser.add_argument("target", nargs="?", help="FILE.json for add/update, NAME for remove")
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="connect to every MCP server for its tools, instead of the tool cache",
    )


def call_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tool", help="tool name, as `diana tools` lists it")
    parser.add_argument("--args", metavar="JSON", help="arguments as a JSON object")
    parser.add_argument("--json", action="store_true", help="print the ToolResult as JSON")


def health_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def tools_servers(args: argparse.Namespace) -> str:
    """`diana tools` lists from the tool cache (servers on demand), or with --refresh asks
    every server; changing tools.json starts none."""
    return NONE if args.action else ALL if args.refresh else ON_DEMAND
