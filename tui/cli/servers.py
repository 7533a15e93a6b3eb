"""`diana servers`, `reconnect`, `login`, `logout`, `resources`, `read`, `prompts` and
`prompt`: MCP servers, the running app's or started for the command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diana.core.api import check_save_target, load_servers, save_to
from diana.core.api.errors import AppGone, RequestFailed, StorageError, UnreadableFile
from diana.core.api.shown import age_text
from diana.core.api.types import MCP_SERVERS_FILE, RECONNECT, LiveApp, ServerStatus

from .asked import answered, field_text
from .common import (
    EXIT_OK,
    EXIT_TOOL_FAILED,
    BadInput,
    Failed,
    _dump,
    _err,
    _line,
    _problem,
    _table,
    _warn,
    unknown_server,
)

if TYPE_CHECKING:
    from diana.core.api import Core
    from diana.core.api.types import AppAnswer as Answer


# Actions carried out by the MCP sub-agent (tui/cli/install.py), and what they start.
SUBAGENT_ACTIONS = ("search", "install", "remove", "test", "edit")


async def cmd_servers(core: Core, args: argparse.Namespace) -> int:
    """The running app's servers as it sees them; with no app, servers started for this.
    `enable NAME` / `disable NAME` switch one in mcp-servers.json; `search`, `install`,
    `remove` and `test` go through the registry and the MCP sub-agent."""
    if args.action in SUBAGENT_ACTIONS:
        from . import install

        command = getattr(install, f"cmd_{args.action}")
        code: int = await command(core, args)
        return code
    if args.action is not None:
        return await _switch_server(core, args)
    if args.name is not None:
        raise BadInput(f"give enable or disable before {args.name}")
    app = await _running_app(core)
    if app is not None:
        servers = await core.app_servers(app, _warn)
        seen_by = app.describe()
        when = age_text(core.now() - app.servers_at) if app.servers_at else "not yet"
        source = f"{seen_by} runs on this data dir: its servers, as it saw them {when}"
    else:
        await core.start_servers()
        await core.wait_servers_ready()
        servers = core.server_diagnostics()
        seen_by = "this command"
        source = "No diana-tui runs on this data dir: the servers were started for this command."
    if args.json:
        print(_dump([{**server.model_dump(mode="json"), "seen_by": seen_by} for server in servers]))
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
        EXIT_OK
        if all(s.status is ServerStatus.READY for s in servers if not s.disabled)
        else EXIT_TOOL_FAILED
    )


async def _switch_server(core: Core, args: argparse.Namespace) -> int:
    """Written through the one config writer; the running app applies it within a second."""
    if args.name is None:
        raise BadInput(f"give the name of the server to {args.action}")
    enable = args.action == "enable"
    configured = [s.name for s in load_servers(core.paths.config_file(MCP_SERVERS_FILE))]
    if args.name not in configured:
        raise unknown_server(args.name, configured)
    try:
        changed = await core.server_requests.set_enabled(args.name, enable)
    except RequestFailed as exc:
        raise BadInput(str(exc)) from None
    state = "enabled" if enable else "disabled"
    if not changed:
        print(f"{args.name} is already {state}.")
        return EXIT_OK
    app = await _running_app(core)
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


async def cmd_reconnect(core: Core, args: argparse.Namespace) -> int:
    """Asks the running app to reconnect its servers; with no app, connects them here."""
    if args.all == bool(args.name):
        raise BadInput("give one server name, or --all")
    server = None if args.all else args.name
    app = await _running_app(core)
    if app is not None:
        print(f"{app.describe()} runs on this data dir: it reconnected its servers.")
        results = await _reconnect_in_app(core, app, server)
    else:
        print("No diana-tui runs on this data dir: connected for this command only.")
        results = await _reconnect_here(core, server)
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


async def _reconnect_here(core: Core, server: str | None) -> Reconnected:
    await core.start_servers()
    await core.wait_servers_ready()
    try:
        names = await core.reconnect(server)
    except KeyError:
        raise BadInput(core.not_configured(str(server))) from None
    await core.wait_reconnected(names)
    states = [(name, core.server_state(name)) for name in names]
    return [
        (name, len(s.tools), None if s.last_attempt_ok else str(s.last_error)) for name, s in states
    ]


async def _reconnect_in_app(core: Core, app: LiveApp, server: str | None) -> Reconnected:
    try:
        outcome = await core.ask_app(app, RECONNECT, server)
    except AppGone as exc:
        raise Failed(str(exc)) from None
    if outcome.unknown:
        raise BadInput(str(outcome.error))
    if outcome.servers is None:
        raise Failed(f"{app.describe()}: {outcome.error}")
    return [(s.name, s.tools, None if s.ok else s.error or "failed") for s in outcome.servers]


async def _running_app(core: Core) -> LiveApp | None:
    """The diana-tui running on this data dir and config dir, if one is; a row that does
    not hold up is passed over with a warning, and the command acts as if none runs."""
    return await core.running_app(_warn)


def _known_server(core: Core, name: str) -> None:
    if name not in core.server_configs:
        raise BadInput(core.not_configured(name))


async def cmd_login(core: Core, args: argparse.Namespace) -> int:
    """Sign in to an HTTP server that asks for OAuth: the browser opens (or the URL is
    printed), the tokens are kept under the data dir; a running app uses them at once."""
    _known_server(core, args.name)
    if core.server_configs[args.name].transport == "stdio":
        raise BadInput(f"{args.name} is a stdio server: it has no sign-in")
    _err(f"Connecting to {args.name} (if it asks for a sign-in, a browser opens) …")
    asked: list[str] = []

    def show_url(url: str) -> None:
        asked.append(url)
        _err(f"Finish signing in in the browser; if none opened, open this URL:\n  {url}")

    connection = await core.sign_in(args.name, show_url)
    await connection.wait_attempt_after_reconnect()
    state = connection.state
    if not state.last_attempt_ok:
        raise Failed(f"{args.name}: {state.last_error}")
    tools = f"{len(state.tools)} tool{'s' if len(state.tools) != 1 else ''}"
    if asked or core.signed_in(args.name):
        print(f"{args.name}: signed in, {tools}")
    else:
        print(f"{args.name}: asks for no sign-in; connected without one, {tools}")
    await _tell_app(core, args.name)
    return EXIT_OK


async def cmd_logout(core: Core, args: argparse.Namespace) -> int:
    """Forget a server's tokens and registration; a running app connects it again."""
    _known_server(core, args.name)
    if core.sign_out(args.name):
        print(f"{args.name}: signed out")
    else:
        print(f"{args.name}: was not signed in")
    await _tell_app(core, args.name)
    return EXIT_OK


async def _tell_app(core: Core, name: str) -> None:
    """A running app connects the server again, with the tokens as they are now."""
    app = await _running_app(core)
    if app is None:
        return
    try:
        await _reconnect_in_app(core, app, name)
    except (AppGone, Failed, BadInput):
        return
    except StorageError as exc:  # what the app answered cannot be read: said, and done
        _warn(str(exc))
        return
    print(f"{app.describe()} connected {name} again.")


async def cmd_resources(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.types import RESOURCES

    def row(r: dict[str, Any]) -> tuple[str, ...]:
        uri = field_text(r, "uri") + (" (template)" if r.get("template") is True else "")
        return (
            field_text(r, "server"),
            uri,
            field_text(r, "name"),
            field_text(r, "mimeType"),
            field_text(r, "description"),
        )

    headers = ("SERVER", "URI", "NAME", "TYPE", "DESCRIPTION")
    found, _app = await answered(
        core, args, RESOURCES, args.server, what="its servers' resources, as they list them now"
    )
    return _listing(args, found, row, headers)


async def cmd_read(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.shown import part_bytes, part_describe, part_text
    from diana.core.api.types import READ, ReadAnswer

    if args.out is not None:  # refused before the server is started
        try:
            check_save_target(Path(args.out))
        except UnreadableFile as exc:
            raise BadInput(f"--out {exc}") from None
    found, _app = await answered(
        core,
        args,
        READ,
        args.server,
        {"uri": args.uri},
        what=f"read on its connection to {args.server}",
        content=True,
    )
    assert isinstance(found, ReadAnswer)
    if found.contents is None:
        raise Failed(str(found.problem))
    contents = found.contents
    if args.out is not None:
        if len(contents) > 1:
            raise BadInput(f"{args.uri} has {len(contents)} parts; --json shows them all")
        (part,) = contents
        try:
            data = part_bytes(part)
        except ValueError as exc:
            raise Failed(str(exc)) from None
        try:
            save_to(Path(args.out), data)
        except UnreadableFile as exc:
            raise BadInput(f"--out {exc}") from None
        print(f"{args.uri}: {part_describe(part)} written to {args.out}", file=sys.stderr)
        return EXIT_OK
    if args.json:
        print(_dump(contents))
        return EXIT_OK
    for part in contents:
        text = part_text(part)
        if text is None:
            print(f"{field_text(part, 'uri')}: {part_describe(part)} (--out FILE saves it)")
        elif field_text(part, "mimeType").endswith("json"):
            print(_pretty_json(text))
        else:
            print(text)
    return EXIT_OK


def _pretty_json(text: str) -> str:
    try:
        return _dump(json.loads(text))
    except ValueError:
        return text


async def cmd_prompts(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api.types import PROMPTS

    def row(p: dict[str, Any]) -> tuple[str, ...]:
        taken = p.get("arguments")
        arguments = [a for a in taken if isinstance(a, dict)] if isinstance(taken, list) else []
        takes = ", ".join(
            field_text(a, "name") + ("" if a.get("required") else "?") for a in arguments
        )
        return (field_text(p, "server"), field_text(p, "name"), takes, field_text(p, "description"))

    headers = ("SERVER", "PROMPT", "ARGUMENTS (? optional)", "DESCRIPTION")
    found, _app = await answered(
        core, args, PROMPTS, args.server, what="its servers' prompts, as they list them now"
    )
    return _listing(args, found, row, headers)


def _listing(
    args: argparse.Namespace,
    found: Answer,
    row: Callable[[dict[str, Any]], tuple[str, ...]],
    headers: tuple[str, ...],
) -> int:
    """What servers listed: JSON, a table, or `None.`; each server that could not list
    says why on stderr, one line, and the exit is 1."""
    from diana.core.api.types import Listing

    assert isinstance(found, Listing)
    for problem in found.problems:
        _problem(problem)
    if args.json:
        print(_dump(found.items))
    elif found.items:
        print(_table([row(item) for item in found.items], headers))
    elif not found.problems:
        print("None.")
    return EXIT_TOOL_FAILED if found.problems else EXIT_OK


async def cmd_prompt(core: Core, args: argparse.Namespace) -> int:
    from diana.core.api import prompt_arguments
    from diana.core.api.types import PROMPT, PromptAnswer

    try:
        arguments = prompt_arguments(args.arg or [])
    except ValueError as exc:
        raise BadInput(f"--arg {exc}") from None
    found, _app = await answered(
        core,
        args,
        PROMPT,
        args.server,
        {"name": args.name, "arguments": arguments},
        what=f"got on its connection to {args.server}",
        content=True,
    )
    assert isinstance(found, PromptAnswer)
    if found.messages is None:
        raise (BadInput if found.bad_input else Failed)(str(found.problem))
    if args.json:
        print(_dump({"description": found.description, "messages": found.messages}))
        return EXIT_OK
    for message in found.messages:
        print(f"{field_text(message, 'role')}: {field_text(message, 'text')}")
    return EXIT_OK


def servers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("enable", "disable", *SUBAGENT_ACTIONS),
        help="switch a server on or off; search the MCP Registry; install a server from it; "
        "remove, test or edit a configured one",
    )
    parser.add_argument(
        "name",
        nargs="?",
        help="server name, as `diana servers` lists it (search: a word of the name; "
        "install: the registry name)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.add_argument(
        "--as", dest="as_", metavar="NAME", help="install: the name in mcp-servers.json"
    )
    parser.add_argument("--version", metavar="V", help="install: this registry version")
    parser.add_argument(
        "--env",
        action="append",
        metavar="KEY=VALUE",
        help="install: a setting's value (environment variable, header or argument by name; "
        "${VAR} is written as a reference); repeatable",
    )
    parser.add_argument(
        "--allow-deprecated", action="store_true", help="install: even a deprecated entry"
    )
    parser.add_argument(
        "--limit", type=int, default=10, metavar="N", help="search: at most N servers (10)"
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="edit: set a field of the entry (env.KEY, headers.NAME reach inside; VALUE is "
        "JSON, or text); repeatable",
    )
    parser.add_argument(
        "--unset", action="append", metavar="FIELD", help="edit: take a field out; repeatable"
    )


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
