"""The `diana` command line: the same core as the app, without a screen.

Whatever it prints passes through ``printable`` (core/text.py) on its way to the terminal:
text from servers, tools, models and files cannot carry an escape sequence there.

Each command starts only what it needs (``SERVERS`` below, and the README's table): the
MCP SDK and the ollama client are imported only by commands that start a server or ask
the model, and a command that can answer from the database answers from it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

from core.approvals.store import (
    OPEN,
    AlreadyDecided,
    DamagedProposal,
    Proposal,
    ProposalChanged,
    ProposalStatus,
    UnknownProposal,
)
from core.arguments import ArgumentsError, parse_arguments
from core.calls import CALL_STATUSES, CallRecord, one_line
from core.clock import parse_since
from core.config import ConfigError, read_json
from core.cost import units_text
from core.db import StorageError
from core.elicitation import Action, Answer, Elicitation
from core.execution_log import follow_calls, latest_call_id, query_calls
from core.files import UnreadableFile, save_to
from core.lifecycle import CloseError
from core.live import RECONNECT, AppGone, LiveApp, app_servers, ask_app
from core.mcp.config import MCP_SERVERS_FILE, agent_id_for, load_servers, unknown_server_text
from core.mcp.subagent import RequestFailed
from core.mcp.tool_cache import age_text
from core.models import ErrorCode, ToolResult
from core.stats import USAGE_COLUMNS, usage_cells
from core.telemetry import SECRET_VALUES
from core.text import json_printable, printable, without_surrogates
from core.tools.local import RegistryChangeError, add_tool, remove_tool, update_tool
from tui import imports_done

if TYPE_CHECKING:
    from core.llm.session import TurnEvent
    from core.mcp.connection import ServerConnection
    from core.runtime import Runtime

T = TypeVar("T")

EXIT_OK = 0
EXIT_TOOL_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NEEDS_APPROVAL = 3
EXIT_TOOL_GAP = 4
EXIT_INTERRUPTED = 130

# Which MCP servers a command starts: none; only those a call runs on (their tools known
# from the tool cache, any other server when the command needs its tools); or every one.
NONE, ON_DEMAND, ALL = "none", "on_demand", "all"

MAX_LOG_LIMIT = 100_000
BAD_INPUT_CODES = {ErrorCode.TOOL_NOT_FOUND, ErrorCode.INVALID_ARGUMENTS}


class BadInput(Exception):
    """Input the command cannot act on; printed as one line, exit 2."""


class Failed(Exception):
    """What the command was to do could not be done; printed as one line, exit 1."""


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
    return json_printable(json.dumps(value, indent=indent, default=str, ensure_ascii=False))


def _line(text: str) -> str:
    """Text shown within one line (a table cell, an error): it cannot start another."""
    return printable(text, multiline=False)


def _problem(message: str) -> None:
    """The one line a failure gets on stderr."""
    print(f"diana: {_line(message)}", file=sys.stderr)


def _table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    rows = [[_line(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


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


LOG_HEADERS = ("STARTED", "CORRELATION", "TOOL", "STATUS", "LATENCY", "RESULT")
# --follow prints rows as they come: columns at least this wide keep later rows in line.
FOLLOW_WIDTHS = (19, 12, 24, 16, 10, 0)


def _log_row(call: CallRecord) -> tuple[str, ...]:
    return (
        call.started_at.isoformat()[:19].replace("T", " "),
        call.correlation_id,
        call.tool,
        call.status,
        f"{call.latency_ms:.1f} ms",
        call.summary[:60],
    )


async def cmd_log(runtime: Runtime, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LOG_LIMIT:
        raise BadInput(f"--limit must be between 1 and {MAX_LOG_LIMIT:,}")
    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, runtime.clock.now())
        except ValueError as exc:
            raise BadInput(f"--since: {exc}") from None
    filters: dict[str, Any] = {"since": since, "tool": args.tool, "status": args.status}
    await runtime.execution_log.flush()
    newest = await latest_call_id(runtime.db)
    calls = await query_calls(runtime.db, through_id=newest, limit=args.limit, **filters)
    if not args.follow:
        if args.json:
            print(_dump([call.public() for call in calls]))
        else:
            print(_table([_log_row(call) for call in calls], LOG_HEADERS))
        return EXIT_OK
    # Until Ctrl-C or SIGTERM (exit 130): JSON lines, or table rows as calls are written.
    rows = [[_line(cell) for cell in _log_row(c)] for c in calls]
    widths = [
        max([minimum, len(header), *(len(row[i]) for row in rows)])
        for i, (minimum, header) in enumerate(zip(FOLLOW_WIDTHS, LOG_HEADERS, strict=True))
    ]

    def show(batch: list[CallRecord]) -> None:
        for call in batch:
            if args.json:
                print(_dump(call.public(), indent=None))
            else:
                cells = zip(_log_row(call), widths, strict=True)
                print("  ".join(_line(c).ljust(w) for c, w in cells).rstrip())
        sys.stdout.flush()

    if not args.json:
        print("  ".join(h.ljust(w) for h, w in zip(LOG_HEADERS, widths, strict=True)).rstrip())
    show(calls)
    async for batch in follow_calls(runtime.db, after_id=newest, **filters):
        show(batch)
    return EXIT_OK


async def cmd_stats(runtime: Runtime, args: argparse.Namespace) -> int:
    """How each tool is used, from the execution log (every process's calls)."""
    from core.stats import usage

    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, runtime.clock.now())
        except ValueError as exc:
            raise BadInput(f"--since: {exc}") from None
    configured = list(load_servers(runtime.paths.config_file(MCP_SERVERS_FILE)))
    servers = {s.name: agent_id_for(s.name) for s in configured}
    if args.server is not None and args.server not in servers:
        raise unknown_server(args.server, servers)
    await runtime.execution_log.flush()
    report = await usage(runtime.db, servers, since=since, tool=args.tool, server=args.server)
    if args.json:
        print(_dump(report.public()))
        return EXIT_OK
    if not report.tools:
        print("No calls" + (" in that time" if since else "") + ".")
        return EXIT_OK
    print(
        _table(
            [(u.name, u.agent or "—", *usage_cells(u)) for u in report.tools],
            ("TOOL", "AGENT", *USAGE_COLUMNS),
        )
    )
    print()
    print(_table([(u.name, *usage_cells(u)) for u in report.agents], ("AGENT", *USAGE_COLUMNS)))
    if report.servers:
        print()
        print(
            _table([(u.name, *usage_cells(u)) for u in report.servers], ("SERVER", *USAGE_COLUMNS))
        )
    return EXIT_OK


async def cmd_cost(runtime: Runtime, args: argparse.Namespace) -> int:
    """Today's cost units per agent and per MCP server (no server is started for this)."""
    for server in load_servers(runtime.paths.config_file(MCP_SERVERS_FILE)):
        runtime.cost.track_server(server.name, agent_id_for(server.name))
    cost = runtime.cost.snapshot()
    if args.json:
        shown = cost.as_json()
        today = {"day": shown["day"], "unit": shown["unit"], "budget": cost.budget}
        print(_dump({**today, **shown["today"]}))
        return EXIT_OK
    budget = f" of a {cost.budget:g}-unit budget" if cost.budget is not None else " (no budget)"
    print(f"{cost.day.isoformat()}: {units_text(cost.today_total)} units{budget}")
    print()
    print(_table([(a, units_text(u)) for a, u in cost.agents_today.items()], ("AGENT", "UNITS")))
    if cost.servers_today:
        print()
        rows = [
            (
                server,
                units_text(units),
                units_text(sum(cost.server_work_today.get(server, {}).values())),
            )
            for server, units in cost.servers_today.items()
        ]
        print(_table(rows, ("SERVER", "UNITS", "BACKGROUND")))
    return EXIT_OK


async def cmd_servers(runtime: Runtime, args: argparse.Namespace) -> int:
    """The running app's servers as it sees them; with no app, servers started for this.
    `enable NAME` / `disable NAME` switch one in mcp-servers.json."""
    if args.action is not None:
        return await _switch_server(runtime, args)
    if args.name is not None:
        raise BadInput(f"give enable or disable before {args.name}")
    app = await runtime.running_app()
    if app is not None:
        servers = await app_servers(runtime.db, app, runtime.clock.now())
        seen_by = app.describe()
        when = age_text(runtime.clock.now() - app.servers_at) if app.servers_at else "not yet"
        source = f"{seen_by} runs on this data dir: its servers, as it saw them {when}"
    else:
        await runtime.start_servers()
        await runtime.mcp.wait_ready()
        servers = runtime.mcp.all_diagnostics()
        seen_by = "this command"
        source = "No diana-tui runs on this data dir: the servers were started for this command."
    if args.json:
        print(_dump([{**server.public(), "seen_by": seen_by} for server in servers]))
    else:
        print(source)
        print(
            _table(
                [
                    (s.name, s.status, s.transport, str(s.tool_count), s.last_error or "")
                    for s in servers
                ],
                ("SERVER", "STATUS", "TRANSPORT", "TOOLS", "LAST ERROR"),
            )
            if servers
            else "No MCP servers are configured (mcp-servers.json)."
        )
    return (
        EXIT_OK if all(s.status == "ready" for s in servers if not s.disabled) else EXIT_TOOL_FAILED
    )


async def _switch_server(runtime: Runtime, args: argparse.Namespace) -> int:
    """Written through the one config writer; the running app applies it within a second."""
    if args.name is None:
        raise BadInput(f"give the name of the server to {args.action}")
    enable = args.action == "enable"
    configured = [s.name for s in load_servers(runtime.paths.config_file(MCP_SERVERS_FILE))]
    if args.name not in configured:
        raise unknown_server(args.name, configured)
    try:
        changed = await runtime.subagent.set_enabled(args.name, enable)
    except RequestFailed as exc:
        raise BadInput(str(exc)) from None
    state = "enabled" if enable else "disabled"
    if not changed:
        print(f"{args.name} is already {state}.")
        return EXIT_OK
    app = await runtime.running_app()
    if app is not None:
        what = (
            f"{app.describe()} starts it now and offers its tools"
            if enable
            else f"{app.describe()} stops it now; its tools are no longer offered"
        )
    else:
        what = (
            "diana-tui starts it, and offers its tools"
            if enable
            else "it is not started, and its tools are not offered"
        )
    print(f"{args.name} {state} in {MCP_SERVERS_FILE}: {what}.")
    return EXIT_OK


async def cmd_reconnect(runtime: Runtime, args: argparse.Namespace) -> int:
    """Asks the running app to reconnect its servers; with no app, connects them here."""
    if args.all == bool(args.name):
        raise BadInput("give one server name, or --all")
    server = None if args.all else args.name
    app = await runtime.running_app()
    if app is not None:
        print(f"{app.describe()} runs on this data dir: it reconnected its servers.")
        results = await _reconnect_in_app(runtime, app, server)
    else:
        print("No diana-tui runs on this data dir: connected for this command only.")
        results = await _reconnect_here(runtime, server)
    failed = 0
    for name, tools, error in results:
        # How the attempt after the reconnect ended: a failed server may be retrying already.
        if error is None:
            print(f"{name}: ready, {tools} tools")
        else:
            failed += 1
            print(f"{name}: failed: {_line(error)}", file=sys.stderr)
    return EXIT_TOOL_FAILED if failed else EXIT_OK


Reconnected = list[tuple[str, int, str | None]]  # each server: name, tools, error


async def _reconnect_here(runtime: Runtime, server: str | None) -> Reconnected:
    await runtime.start_servers()
    await runtime.mcp.wait_ready()
    try:
        names = await runtime.mcp.reconnect(server)
    except KeyError:
        raise BadInput(runtime.mcp.not_configured(str(server))) from None
    await runtime.mcp.wait_reconnected(names)
    states = [(name, runtime.mcp.connections[name].state) for name in names]
    return [
        (name, len(s.tools), None if s.last_attempt_ok else str(s.last_error)) for name, s in states
    ]


async def _reconnect_in_app(runtime: Runtime, app: LiveApp, server: str | None) -> Reconnected:
    try:
        outcome = await ask_app(runtime.db, runtime.paths, app, RECONNECT, server, runtime.clock)
    except AppGone as exc:
        raise Failed(str(exc)) from None
    if outcome.get("unknown"):
        raise BadInput(outcome["error"])
    if "error" in outcome:
        raise Failed(f"{app.describe()}: {outcome['error']}")
    return [(s["name"], s["tools"], s["error"]) for s in outcome["servers"]]


def unknown_server(name: str, configured: Iterable[str]) -> BadInput:
    return BadInput(unknown_server_text(name, configured))


def _known_server(runtime: Runtime, name: str) -> None:
    if name not in runtime.mcp.configs:
        raise BadInput(runtime.mcp.not_configured(name))


async def cmd_login(runtime: Runtime, args: argparse.Namespace) -> int:
    """Sign in to an HTTP server that asks for OAuth: the browser opens (or the URL is
    printed), the tokens are kept under the data dir; a running app uses them at once."""
    _known_server(runtime, args.name)
    if runtime.mcp.configs[args.name].transport == "stdio":
        raise BadInput(f"{args.name} is a stdio server: it has no sign-in")
    _err(f"Signing in to {args.name}: finish in the browser that opens …")

    def show_url(url: str) -> None:
        _err(f"If no browser opened, open this URL:\n  {url}")

    connection = await runtime.mcp.sign_in(args.name, show_url)
    await connection.wait_attempt_after_reconnect()
    state = connection.state
    if not state.last_attempt_ok:
        raise Failed(f"{args.name}: {state.last_error}")
    print(f"{args.name}: signed in, {len(state.tools)} tools")
    await _tell_app(runtime, args.name)
    return EXIT_OK


async def cmd_logout(runtime: Runtime, args: argparse.Namespace) -> int:
    """Forget a server's tokens and registration; a running app connects it again."""
    from core.mcp.oauth import forget

    _known_server(runtime, args.name)
    if forget(runtime.paths.data_dir, args.name):
        print(f"{args.name}: signed out")
    else:
        print(f"{args.name}: was not signed in")
    await _tell_app(runtime, args.name)
    return EXIT_OK


async def _tell_app(runtime: Runtime, name: str) -> None:
    """A running app connects the server again, with the tokens as they are now."""
    app = await runtime.running_app()
    if app is None:
        return
    with contextlib.suppress(AppGone, Failed, BadInput):
        await _reconnect_in_app(runtime, app, name)
        print(f"{app.describe()} connected {name} again.")


async def _connections(runtime: Runtime, server: str | None) -> list[ServerConnection]:
    """The named server's connection (or every server's), each after its first attempt."""
    names = list(runtime.mcp.configs) if server is None else [server]
    try:
        return [await runtime.mcp.connected(name) for name in names]
    except KeyError:
        raise BadInput(runtime.mcp.not_configured(str(server))) from None


async def _each_server(
    runtime: Runtime, server: str | None, fetch: Callable[[ServerConnection], Awaitable[list[T]]]
) -> tuple[list[T], int]:
    """What ``fetch`` gives for each server, and how many servers failed (each said on
    stderr, one line)."""
    from core.mcp.catalog import CatalogError

    found: list[T] = []
    failed = 0
    for connection in await _connections(runtime, server):
        try:
            found += await fetch(connection)
        except CatalogError as exc:
            failed += 1
            _problem(str(exc))
    return found, failed


async def cmd_resources(runtime: Runtime, args: argparse.Namespace) -> int:
    from core.mcp.catalog import ResourceInfo, list_resources

    def row(r: ResourceInfo) -> tuple[str, ...]:
        uri = r.uri + (" (template)" if r.template else "")
        return (r.server, uri, r.name, r.mime_type or "", r.description or "")

    headers = ("SERVER", "URI", "NAME", "TYPE", "DESCRIPTION")
    return _listing(args, await _each_server(runtime, args.server, list_resources), row, headers)


async def cmd_read(runtime: Runtime, args: argparse.Namespace) -> int:
    from core.mcp.catalog import CatalogError, read_resource

    (connection,) = await _connections(runtime, args.server)
    try:
        contents = await read_resource(connection, args.uri)
    except CatalogError as exc:
        raise Failed(str(exc)) from None
    if args.out is not None:
        if len(contents) > 1:
            raise BadInput(f"{args.uri} has {len(contents)} parts; --json shows them all")
        (part,) = contents
        data = part.data if part.data is not None else (part.text or "").encode()
        try:
            save_to(Path(args.out), data)
        except UnreadableFile as exc:
            raise BadInput(f"--out {exc}") from None
        print(f"{args.uri}: {part.describe()} written to {args.out}", file=sys.stderr)
        return EXIT_OK
    if args.json:
        print(_dump([part.public() for part in contents]))
        return EXIT_OK
    for part in contents:
        if part.text is None:
            print(f"{part.uri}: {part.describe()} (--out FILE saves it)")
        elif (part.mime_type or "").endswith("json"):
            print(_pretty_json(part.text))
        else:
            print(part.text)
    return EXIT_OK


def _pretty_json(text: str) -> str:
    try:
        return _dump(json.loads(text))
    except ValueError:
        return text


async def cmd_prompts(runtime: Runtime, args: argparse.Namespace) -> int:
    from core.mcp.catalog import PromptInfo, list_prompts

    def row(p: PromptInfo) -> tuple[str, ...]:
        takes = ", ".join(a.name + ("" if a.required else "?") for a in p.arguments)
        return (p.server, p.name, takes, p.description or "")

    headers = ("SERVER", "PROMPT", "ARGUMENTS (? optional)", "DESCRIPTION")
    return _listing(args, await _each_server(runtime, args.server, list_prompts), row, headers)


def _listing(
    args: argparse.Namespace,
    found: tuple[list[Any], int],
    row: Callable[[Any], tuple[str, ...]],
    headers: tuple[str, ...],
) -> int:
    """What servers listed: JSON, a table, or `None.`; exit 1 if any server failed."""
    items, failed = found
    if args.json:
        print(_dump([item.public() for item in items]))
    elif items:
        print(_table([row(item) for item in items], headers))
    elif not failed:
        print("None.")
    return EXIT_TOOL_FAILED if failed else EXIT_OK


async def cmd_prompt(runtime: Runtime, args: argparse.Namespace) -> int:
    from core.mcp.catalog import CatalogError, get_prompt, list_prompts, prompt_arguments

    try:
        arguments = prompt_arguments(args.arg or [])
    except ValueError as exc:
        raise BadInput(f"--arg {exc}") from None
    (connection,) = await _connections(runtime, args.server)
    try:
        prompts = {p.name: p for p in await list_prompts(connection)}
    except CatalogError as exc:
        raise Failed(str(exc)) from None
    prompt = prompts.get(args.name)
    if prompt is None:
        offered = ", ".join(prompts) or "none"
        raise BadInput(f"MCP server {args.server} has no prompt {args.name} (it has: {offered})")
    problem = prompt.argument_problem(arguments)
    if problem is not None:
        raise BadInput(f"{problem} (give each as --arg NAME=VALUE)")
    try:
        description, messages = await get_prompt(connection, prompt, arguments)
    except CatalogError as exc:
        raise Failed(str(exc)) from None
    if args.json:
        print(_dump({"description": description, "messages": [m.public() for m in messages]}))
        return EXIT_OK
    for message in messages:
        print(f"{message.role}: {message.text}")
    return EXIT_OK


def _proposal_line(p: Proposal) -> tuple[str, ...]:
    arguments = f"DAMAGED: {p.damaged}" if p.damaged else p.summary
    return (
        p.id,
        p.status.value,
        p.risk,
        p.tool,
        arguments[:50],
        p.created_at[:19].replace("T", " "),
    )


async def cmd_proposals(runtime: Runtime, args: argparse.Namespace) -> int:
    statuses = None if args.all else OPEN
    proposals = await runtime.approvals.store.select(statuses)
    if args.json:
        print(_dump([p.public() for p in proposals]))
    elif proposals:
        print(
            _table(
                [_proposal_line(p) for p in proposals],
                ("ID", "STATUS", "RISK", "TOOL", "ARGUMENTS", "CREATED"),
            )
        )
    else:
        print("No pending proposals." if not args.all else "No proposals.")
    return EXIT_OK


async def _find(runtime: Runtime, proposal_id: str) -> Proposal:
    try:
        return await runtime.approvals.store.get(proposal_id)
    except UnknownProposal:
        raise BadInput(f"no proposal {proposal_id} (`diana proposals --all` lists them)") from None


async def cmd_show(runtime: Runtime, args: argparse.Namespace) -> int:
    proposal = await _find(runtime, args.id)
    info = proposal.public()
    if args.json:
        print(_dump(info))
        return EXIT_OK
    for key in (
        "id",
        "status",
        "tool",
        "agent",
        "risk",
        "reason",
        "confidence",
        "origin",
        "correlation_id",
        "created_at",
        "decided_at",
        "decided_by",
        "reject_reason",
        "error",
        "note",
        "damaged",
    ):
        if info[key] is not None:
            print(f"{key:>15}  {_line(str(info[key]))}")
    print(f"{'arguments':>15}  {_dump(info['arguments'])}")
    if info["result"] is not None:
        print(f"{'result':>15}  {_dump(info['result'])}")
    return EXIT_OK


async def cmd_approve(runtime: Runtime, args: argparse.Namespace) -> int:
    proposal = await _find(runtime, args.id)
    await runtime.mcp.wait_ready(runtime.mcp.servers_for_tool(proposal.tool))
    try:
        decision = await runtime.approvals.approve(args.id, by="cli")
    except (AlreadyDecided, DamagedProposal, ProposalChanged) as exc:
        raise BadInput(str(exc)) from None
    result = decision.result
    assert result is not None
    if args.json:
        print(
            _dump(
                {"proposal": decision.proposal.public(), "result": result.model_dump(mode="json")}
            )
        )
    elif result.success:
        print(result.data if isinstance(result.data, str) else _dump(result.data))
    elif decision.proposal.status is ProposalStatus.REJECTED:
        print(f"diana: not run, {decision.proposal.id} rejected: {result.error}", file=sys.stderr)
    else:
        _problem(f"approved, but the call failed: {result.error}")
    return EXIT_OK if result.success else EXIT_TOOL_FAILED


async def cmd_reject(runtime: Runtime, args: argparse.Namespace) -> int:
    await _find(runtime, args.id)
    try:
        decision = await runtime.approvals.reject(args.id, by="cli", reason=args.reason)
    except AlreadyDecided as exc:
        raise BadInput(str(exc)) from None
    print(f"{decision.proposal.id} rejected")
    return EXIT_OK


class AskPrinter:
    """What `diana ask` shows while the answer streams: the answer on stdout, everything
    else (thinking, tool calls, approvals, retries) on stderr."""

    def __init__(self, *, quiet: bool, wait: bool) -> None:
        self.quiet = quiet  # --json: only the final JSON goes to stdout
        self.wait = wait
        self.thinking = False
        self.answered = False  # some of the answer is on stdout

    def __call__(self, event: TurnEvent) -> None:
        from core.llm.session import (
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
            _err(_line(f"⚙ {event.name} {one_line(event.arguments)}"))
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
            _err(_line(f"  {mark} {record.status} in {record.latency_ms:.0f} ms{detail}"))
        elif isinstance(event, Progress) and event.retry:
            _err(_line(f"… {event.text}"))

    def _end_thinking(self) -> None:
        if self.thinking:
            self.thinking = False
            _err("")


def _err(text: str, end: str = "\n") -> None:
    sys.stderr.write(text + end)
    sys.stderr.flush()


async def ask_on_terminal(question: str, choices: list[str]) -> str | None:
    """request_human_input for `diana ask`: the question on stderr, the answer from stdin."""
    _err(f"? {question}")
    if choices:
        _err("  choices: " + " | ".join(choices))
    _err("> ", end="")  # not input("> "): that prompt would land in stdout, inside --json
    answer = await read_line()
    return (answer or "").strip() or None


async def elicit_on_terminal(request: Elicitation) -> Answer:
    """A server asks the person something (MCP elicitation): each field asked on stderr,
    read from the terminal. Enter takes the default; a value that does not fit is asked
    again; a secret-looking field is not echoed."""
    _err(_line(f"? MCP server {request.server} asks: {request.message}"))
    if request.mode == "url":
        _err(_line(f"  open this URL: {request.url}"))
        return Answer(await _final_choice("  done? [y]es / [n]o (decline) / [c]ancel (Enter): "))
    content: dict[str, Any] = {}
    for field in request.fields:
        default = "" if field.default is None else f" [{_shown(field.titled(field.default))}]"
        optional = "" if field.required else ", optional"
        while True:
            _err(_line(f"  {field.title} ({field.describe()}{optional}){default}: "), end="")
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


async def read_line(*, echo: bool = True) -> str | None:
    """A line from the terminal on stdin, or None at its end. Read in a daemon thread, not
    the loop's executor, which asyncio.run waits for at exit: a `diana ask` stopped while
    asking (SIGTERM, Ctrl-C) must not hang until someone presses Enter. And read from the
    file descriptor, not sys.stdin, whose lock a daemon thread must not hold at exit."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str | None] = loop.create_future()
    fd, encoding = sys.stdin.fileno(), sys.stdin.encoding or "utf-8"

    def deliver(value: str | None) -> None:
        if not line.done():
            line.set_result(value)

    def read() -> None:
        try:  # a terminal hands over one line at a time
            with _no_echo(fd, echo):
                data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not echo:
            os.write(2, b"\n")  # the Enter that was not echoed
        text = data.decode(encoding, errors="replace")
        value = (text.splitlines() or [""])[0] if data else None
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(deliver, value)

    threading.Thread(target=read, name="ask-stdin", daemon=True).start()
    return await line


@contextlib.contextmanager
def _no_echo(fd: int, echo: bool) -> Iterator[None]:
    """Typing is not shown while a secret is read from a terminal."""
    if echo or not os.isatty(fd):
        yield
        return
    import termios

    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


async def cmd_ask(runtime: Runtime, args: argparse.Namespace) -> int:
    chat = runtime.chat
    if args.model:
        chat.model = args.model
    if args.think is not None:
        chat.think = args.think == "on"
    if args.continue_:
        await chat.open_latest()
    if sys.stdin.isatty():
        runtime.human.asker = ask_on_terminal
    await runtime.mcp.wait_ready()
    prompt = args.prompt
    if "@" in prompt:  # `@server:uri`: the resource's text goes with the prompt
        from core.mcp.catalog import CatalogError, with_attachments

        try:
            prompt, attached = await with_attachments(
                prompt, runtime.mcp.configs, runtime.mcp.connected
            )
        except CatalogError as exc:
            raise Failed(f"not asked: {exc}") from None
        for item in attached:
            _err(_line(f"📎 {item.server}:{item.uri} ({item.shown})"))
    printer = AskPrinter(quiet=args.json, wait=args.wait)
    outcome = await chat.run_turn(prompt, printer, wait_for_decisions=args.wait)
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
        return EXIT_TOOL_GAP
    assert outcome.response is not None
    if args.json:
        print(_dump(outcome.response.model_dump(mode="json")))
    else:
        print()
    if outcome.pending:
        _err(f"diana: waiting for approval: {', '.join(outcome.pending)}")
        return EXIT_NEEDS_APPROVAL
    return EXIT_OK


Command = Callable[["Runtime", argparse.Namespace], Awaitable[int]]


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="config directory (env DIANA_CONFIG_DIR, default ~/.config/diana)",
    )
    common.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="data directory (env DIANA_DATA_DIR, default ~/.local/share/diana)",
    )
    parser = argparse.ArgumentParser(
        prog="diana",
        parents=[common],
        description="DIANA's core from the command line: tools, calls, health, the log.",
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tools = sub.add_parser(
        "tools",
        parents=[common],
        help="list the tools agents provide; add, update or remove local tools",
        description="With no action, list every tool. `add FILE.json` and `update FILE.json` "
        "write one tools.json entry (validated first); `remove NAME` deletes one. A running "
        "diana-tui picks the change up without a restart.",
    )
    tools.add_argument(
        "action", nargs="?", choices=("add", "update", "remove"), help="change tools.json"
    )
    tools.add_argument("target", nargs="?", help="FILE.json for add/update, NAME for remove")
    tools.add_argument("--json", action="store_true", help="print one JSON array")
    tools.add_argument(
        "--refresh",
        action="store_true",
        help="connect to every MCP server for its tools, instead of the tool cache",
    )
    tools.set_defaults(run=cmd_tools)

    call = sub.add_parser("call", parents=[common], help="call one tool")
    call.add_argument("tool", help="tool name, as `diana tools` lists it")
    call.add_argument("--args", metavar="JSON", help="arguments as a JSON object")
    call.add_argument("--json", action="store_true", help="print the ToolResult as JSON")
    call.set_defaults(run=cmd_call, servers=ON_DEMAND)

    health = sub.add_parser("health", parents=[common], help="check every agent's health")
    health.add_argument("--json", action="store_true", help="print one JSON array")
    health.set_defaults(run=cmd_health, servers=ALL)

    servers = sub.add_parser(
        "servers",
        parents=[common],
        help="MCP servers and their state; enable or disable one",
        description="With no action, list every MCP server and its state. `enable NAME` and "
        "`disable NAME` switch one in mcp-servers.json: a disabled server is listed but not "
        "started, and its tools are not offered. A running diana-tui applies it at once.",
    )
    servers.add_argument(
        "action", nargs="?", choices=("enable", "disable"), help="switch a server on or off"
    )
    servers.add_argument("name", nargs="?", help="server name, as `diana servers` lists it")
    servers.add_argument("--json", action="store_true", help="print one JSON array")
    servers.set_defaults(run=cmd_servers)  # the app's, or started by the command

    reconnect = sub.add_parser(
        "reconnect", parents=[common], help="connect an MCP server (or all) now"
    )
    reconnect.add_argument("name", nargs="?", help="server name, as `diana servers` lists it")
    reconnect.add_argument("--all", action="store_true", help="every configured server")
    reconnect.set_defaults(run=cmd_reconnect)  # in the app, or started by the command

    login = sub.add_parser(
        "login", parents=[common], help="sign in to an HTTP MCP server that asks for OAuth"
    )
    login.add_argument("name", help="server name, as `diana servers` lists it")
    login.set_defaults(run=cmd_login, servers=ON_DEMAND)

    logout = sub.add_parser("logout", parents=[common], help="forget an MCP server's OAuth tokens")
    logout.add_argument("name", help="server name, as `diana servers` lists it")
    logout.set_defaults(run=cmd_logout, servers=ON_DEMAND)

    resources = sub.add_parser(
        "resources", parents=[common], help="MCP servers' resources and resource templates"
    )
    resources.add_argument("server", nargs="?", help="one server (default: every server)")
    resources.add_argument("--json", action="store_true", help="print one JSON array")
    resources.set_defaults(run=cmd_resources, servers=ON_DEMAND)

    read = sub.add_parser("read", parents=[common], help="read one resource of an MCP server")
    read.add_argument("server", help="server name, as `diana servers` lists it")
    read.add_argument("uri", help="the resource's URI, as `diana resources` lists it")
    read.add_argument("--out", metavar="FILE", help="write the content to FILE")
    read.add_argument("--json", action="store_true", help="print the contents as JSON")
    read.set_defaults(run=cmd_read, servers=ON_DEMAND)

    prompts = sub.add_parser("prompts", parents=[common], help="MCP servers' prompts")
    prompts.add_argument("server", nargs="?", help="one server (default: every server)")
    prompts.add_argument("--json", action="store_true", help="print one JSON array")
    prompts.set_defaults(run=cmd_prompts, servers=ON_DEMAND)

    prompt = sub.add_parser("prompt", parents=[common], help="get one prompt's messages")
    prompt.add_argument("server", help="server name")
    prompt.add_argument("name", help="the prompt's name, as `diana prompts` lists it")
    prompt.add_argument(
        "--arg", action="append", metavar="NAME=VALUE", help="a prompt argument (repeatable)"
    )
    prompt.add_argument("--json", action="store_true", help="print the messages as JSON")
    prompt.set_defaults(run=cmd_prompt, servers=ON_DEMAND)

    proposals = sub.add_parser(
        "proposals", parents=[common], help="calls waiting for a person's decision"
    )
    proposals.add_argument("--all", action="store_true", help="decided ones too")
    proposals.add_argument("--json", action="store_true", help="print one JSON array")
    proposals.set_defaults(run=cmd_proposals)

    show = sub.add_parser("show", parents=[common], help="one proposal in full")
    show.add_argument("id", help="proposal id")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=cmd_show)

    approve = sub.add_parser("approve", parents=[common], help="approve a proposal and run it")
    approve.add_argument("id", help="proposal id")
    approve.add_argument("--json", action="store_true", help="print the proposal and result")
    approve.set_defaults(run=cmd_approve, servers=ON_DEMAND)

    reject = sub.add_parser("reject", parents=[common], help="reject a proposal")
    reject.add_argument("id", help="proposal id")
    reject.add_argument("--reason", help="why, for the record")
    reject.set_defaults(run=cmd_reject)

    ask = sub.add_parser(
        "ask", parents=[common], help="ask the local model; tool calls go through approvals"
    )
    ask.add_argument("prompt", help="what to ask")
    ask.add_argument("--json", action="store_true", help="print one AgentResponse as JSON")
    ask.add_argument(
        "--wait", action="store_true", help="wait for decisions on calls that need approval"
    )
    ask.add_argument("--model", metavar="M", help="the Ollama model (default from settings)")
    ask.add_argument("--think", choices=("on", "off"), help="ask a thinking model to think")
    ask.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the last conversation instead of starting one",
    )
    ask.set_defaults(run=cmd_ask, servers=ON_DEMAND, chat=True)

    log = sub.add_parser(
        "log",
        parents=[common],
        help="show recent calls",
        description="The newest calls, oldest first; filters combine.",
    )
    log.add_argument("--limit", type=int, default=20, metavar="N", help="how many (default 20)")
    log.add_argument(
        "--since",
        metavar="WHEN",
        help="calls started since: 30m, 2h, 7d ago, or an ISO date or time (local)",
    )
    log.add_argument("--tool", metavar="NAME", help="calls of this tool only")
    log.add_argument("--status", choices=CALL_STATUSES, help="calls with this status only")
    log.add_argument(
        "--follow",
        action="store_true",
        help="then print new calls as any process makes them, until Ctrl-C",
    )
    log.add_argument(
        "--json", action="store_true", help="print one JSON array (with --follow: JSON lines)"
    )
    log.set_defaults(run=cmd_log)

    stats = sub.add_parser(
        "stats", parents=[common], help="how each tool is used: calls, outcomes, latency, cost"
    )
    stats.add_argument("--since", help="only calls started since: 30m, 2h, 7d, or an ISO date")
    stats.add_argument("--tool", help="one tool")
    stats.add_argument("--server", help="one MCP server's tools")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(run=cmd_stats)

    cost = sub.add_parser(
        "cost", parents=[common], help="today's cost units per agent and MCP server"
    )
    cost.add_argument("--json", action="store_true", help="print one JSON object")
    cost.set_defaults(run=cmd_cost)
    return parser


class VersionAction(argparse.Action):
    """--version: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("diana-tui")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        print(f"diana {number}")
        parser.exit()


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP cancel the command, so its finally-blocks stop every MCP server."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, task.cancel)


def servers_needed(args: argparse.Namespace) -> str:
    """Which MCP servers the command starts (NONE, ON_DEMAND or ALL; see the README)."""
    if args.command == "tools":
        return NONE if args.action else ALL if args.refresh else ON_DEMAND
    return str(getattr(args, "servers", NONE))


async def run(args: argparse.Namespace) -> int:
    stop_on_signals()
    from core.runtime import Runtime

    servers = servers_needed(args)
    runtime = await Runtime.open(
        getattr(args, "config_dir", None),
        getattr(args, "data_dir", None),
        mcp=servers != NONE,
        mcp_on_demand=servers == ON_DEMAND,
        chat=getattr(args, "chat", False),
        schemas_at_call=True,
        # `diana ask --wait` hears decisions made in another process
        watch_config=getattr(args, "wait", False),
    )
    # What a server asks a person (elicitation) is asked on the terminal, if there is one.
    is_terminal = sys.stdin.isatty()
    runtime.elicitations.asker = elicit_on_terminal if is_terminal else decline_without_terminal
    runtime.sampling.on_waiting = sampling_waits
    try:
        command: Command = args.run
        code = await command(runtime, args)
        # An approved server addition queued sub-agent work: closing now would cancel it.
        if runtime.subagent.busy:
            _err("diana: waiting for the MCP sub-agent to finish its requests")
            await runtime.subagent.wait_idle()
            for request in runtime.subagent.recent():
                message = _line(request.message)
                _err(f"  {request.id} {request.kind.value} {request.server}: {message}")
        return code
    finally:
        await runtime.close()


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C at any moment, SIGTERM or SIGHUP: what was started is stopped, then one line.
    try:
        imports_done()  # until here Ctrl-C exited at once (tui/__init__.py)
        with printable_output():
            return run_command(argv)
    except (KeyboardInterrupt, asyncio.CancelledError):
        _problem("interrupted")
        return EXIT_INTERRUPTED


# Arguments that are words (ids, names, a prompt), not paths or tool arguments.
TEXT_ARGUMENTS = ("id", "tool", "name", "reason", "model", "prompt")


def _names_as_text(args: argparse.Namespace) -> None:
    """Bytes on the command line that are not UTF-8 reach Python as lone surrogates, which
    can be neither stored nor looked up. In ids, names and words they become U+FFFD: such an
    id is simply unknown, and a tool name matches the calls logged under that name. Paths
    keep their bytes (a file may be named so); tool arguments (--args) are refused by the
    call, naming the argument."""
    for name in TEXT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, without_surrogates(value))


def run_command(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _names_as_text(args)
    # A tool may return text that is not UTF-8 (lone surrogates): print it escaped, not fail.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        return asyncio.run(run(args))
    except ConfigError as exc:
        _problem(f"config error in {exc}")
        return EXIT_BAD_INPUT
    except (StorageError, BadInput) as exc:
        _problem(str(exc))
        return EXIT_BAD_INPUT
    except CloseError as exc:
        _problem(f"while stopping: {exc}")
        return EXIT_TOOL_FAILED
    except Failed as exc:
        _problem(str(exc))
        return EXIT_TOOL_FAILED
    except BrokenPipeError:  # `diana ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # the last line of defence: one line, never a traceback
        _problem(f"unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_TOOL_FAILED


if __name__ == "__main__":
    sys.exit(main())
