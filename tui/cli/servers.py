"""`diana servers`, `reconnect`, `login`, `logout`, `resources`, `read`, `prompts` and
`prompt`: MCP servers, the running app's or started for the command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.db import StorageError
from core.files import UnreadableFile, check_save_target, save_to
from core.live import RECONNECT, AppGone, LiveApp, app_servers, ask_app
from core.mcp.config import MCP_SERVERS_FILE, load_servers
from core.mcp.subagent import RequestFailed
from core.mcp.tool_cache import age_text

from .common import (
    EXIT_OK,
    EXIT_TOOL_FAILED,
    BadInput,
    Failed,
    T,
    _dump,
    _err,
    _line,
    _problem,
    _table,
    _warn,
    unknown_server,
)

if TYPE_CHECKING:
    from core.mcp.connection import ServerConnection
    from core.runtime import Runtime


async def cmd_servers(runtime: Runtime, args: argparse.Namespace) -> int:
    """The running app's servers as it sees them; with no app, servers started for this.
    `enable NAME` / `disable NAME` switch one in mcp-servers.json."""
    if args.action is not None:
        return await _switch_server(runtime, args)
    if args.name is not None:
        raise BadInput(f"give enable or disable before {args.name}")
    app = await _running_app(runtime)
    if app is not None:
        servers = await app_servers(runtime.db, app, runtime.clock.now(), _warn)
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
    app = await _running_app(runtime)
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
    app = await _running_app(runtime)
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
    if outcome.unknown:
        raise BadInput(str(outcome.error))
    if outcome.servers is None:
        raise Failed(f"{app.describe()}: {outcome.error}")
    return [(s.name, s.tools, None if s.ok else s.error or "failed") for s in outcome.servers]


async def _running_app(runtime: Runtime) -> LiveApp | None:
    """The diana-tui running on this data dir and config dir, if one is; a row that does
    not hold up is passed over with a warning, and the command acts as if none runs."""
    return await runtime.running_app(_warn)


def _known_server(runtime: Runtime, name: str) -> None:
    if name not in runtime.mcp.configs:
        raise BadInput(runtime.mcp.not_configured(name))


async def cmd_login(runtime: Runtime, args: argparse.Namespace) -> int:
    """Sign in to an HTTP server that asks for OAuth: the browser opens (or the URL is
    printed), the tokens are kept under the data dir; a running app uses them at once."""
    _known_server(runtime, args.name)
    if runtime.mcp.configs[args.name].transport == "stdio":
        raise BadInput(f"{args.name} is a stdio server: it has no sign-in")
    from core.mcp.tokens import read_kept, token_file

    _err(f"Connecting to {args.name} (if it asks for a sign-in, a browser opens) …")
    asked: list[str] = []

    def show_url(url: str) -> None:
        asked.append(url)
        _err(f"Finish signing in in the browser; if none opened, open this URL:\n  {url}")

    connection = await runtime.mcp.sign_in(args.name, show_url)
    await connection.wait_attempt_after_reconnect()
    state = connection.state
    if not state.last_attempt_ok:
        raise Failed(f"{args.name}: {state.last_error}")
    tools = f"{len(state.tools)} tool{'s' if len(state.tools) != 1 else ''}"
    if asked or "tokens" in read_kept(token_file(runtime.paths.data_dir, args.name)):
        print(f"{args.name}: signed in, {tools}")
    else:
        print(f"{args.name}: asks for no sign-in; connected without one, {tools}")
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
    app = await _running_app(runtime)
    if app is None:
        return
    try:
        await _reconnect_in_app(runtime, app, name)
    except (AppGone, Failed, BadInput):
        return
    except StorageError as exc:  # what the app answered cannot be read: said, and done
        _warn(str(exc))
        return
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

    if args.out is not None:  # refused before the server is started
        try:
            check_save_target(Path(args.out))
        except UnreadableFile as exc:
            raise BadInput(f"--out {exc}") from None
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


def servers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", choices=("enable", "disable"), help="switch a server on or off"
    )
    parser.add_argument("name", nargs="?", help="server name, as `diana servers` lists it")
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def reconnect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="server name, as `diana servers` lists it")
    parser.add_argument("--all", action="store_true", help="every configured server")


def login_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="server name, as `diana servers` lists it")


def logout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="server name, as `diana servers` lists it")


def resources_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("server", nargs="?", help="one server (default: every server)")
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def read_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("server", help="server name, as `diana servers` lists it")
    parser.add_argument("uri", help="the resource's URI, as `diana resources` lists it")
    parser.add_argument("--out", metavar="FILE", help="write the content to FILE")
    parser.add_argument("--json", action="store_true", help="print the contents as JSON")


def prompts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("server", nargs="?", help="one server (default: every server)")
    parser.add_argument("--json", action="store_true", help="print one JSON array")


def prompt_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("server", help="server name")
    parser.add_argument("name", help="the prompt's name, as `diana prompts` lists it")
    parser.add_argument(
        "--arg", action="append", metavar="NAME=VALUE", help="a prompt argument (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print the messages as JSON")
