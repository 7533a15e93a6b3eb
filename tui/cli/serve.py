"""`diana serve`: diana as an MCP server for other hosts (the gateway, tui/serve/)."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

from diana.core.api import (
    Core,
    HostTokens,
    TokenError,
    load_settings,
    pause_hosts,
    resume_hosts,
)
from diana.core.api.shown import shown_minute
from diana.core.api.types import Paths
from diana.core.profiles import Profile

from ..serve.hosts import HOSTS, diana_command, host_config
from ..serve.http import PATH as MCP_PATH
from ..serve.http import loopback
from .common import EXIT_OK, BadInput, _dump, _err, _table, printable

DEFAULT_PORT = 8737


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "switch",
        nargs="?",
        choices=("pause", "resume", "token", "clients"),
        help="pause: every call a host makes waits for a person, whatever the policy allows, "
        "in every diana on this data dir, until resume; token add NAME | list | remove NAME: "
        "the clients that may reach --http; clients: every host seen and what it waits for; "
        "nothing is served",
    )
    parser.add_argument("words", nargs="*", metavar="WORD", help=argparse.SUPPRESS)
    parser.add_argument(
        "--http",
        action="store_true",
        help=f"serve over streamable HTTP at http://127.0.0.1:PORT{MCP_PATH} instead of stdio; "
        "every request needs a client's bearer token (`diana serve token add NAME`)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"with --http (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="with --http: a loopback address (anything else is refused)",
    )
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="with --http: let any program on this machine in without a token (for testing)",
    )
    parser.add_argument(
        "--print-config",
        choices=HOSTS,
        metavar="HOST",
        help="print what HOST's configuration needs to start this diana, and where it goes "
        f"(HOST: {', '.join(HOSTS)}); nothing is served",
    )
    parser.add_argument(
        "--only",
        metavar="SERVER",
        help="serve one MCP server of mcp-servers.json alone, its tools, resources and prompts "
        "under its own names, every call through diana's approval gate; no other server is "
        "started",
    )
    parser.add_argument("--json", action="store_true", help="clients: print one JSON array")
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between progress notifications while a call waits for a person (default 5)",
    )


def without_core(args: argparse.Namespace) -> int | None:
    """`diana serve pause|resume|token ...` and `--print-config HOST`, answered without
    serving; None for `diana serve` itself (whose options are checked here first)."""
    if args.switch == "token":
        return tokens(args)
    if args.words:
        raise BadInput(f"`diana serve {args.switch or ''}` takes no {args.words[0]!r}")
    if args.switch == "clients":
        return None  # read from the log (cmd_serve)
    if args.switch is not None:
        return switched(args)
    if args.only is not None:
        checked_only(args)
    if args.print_config is not None:
        return printed_config(args)
    checked_http(args)
    return None


def checked_only(args: argparse.Namespace) -> None:
    """--only SERVER names an enabled server of mcp-servers.json (refused before anything
    opens, with the file it was looked for in)."""
    from diana.core.api import load_servers
    from diana.core.api.types import MCP_SERVERS_FILE

    if args.switch is not None:
        raise BadInput(f"--only goes with serving, not `diana serve {args.switch}`")
    paths = Paths.resolve(getattr(args, "config_dir", None), getattr(args, "data_dir", None))
    where = paths.config_file(MCP_SERVERS_FILE)
    servers = load_servers(where)
    enabled = [server.name for server in servers if not server.disabled]
    if args.only in enabled:
        return
    named = printable(args.only)
    if any(server.name == args.only for server in servers):
        raise BadInput(f"--only {named}: MCP server {named} is disabled in {where}")
    raise BadInput(
        f"--only {named}: no MCP server named {named} in {where} "
        f"(enabled: {', '.join(printable(n) for n in enabled) or 'none'})"
    )


def tokens(args: argparse.Namespace) -> int:
    """`diana serve token add NAME` (the token printed once), `list`, `remove NAME`."""
    paths = Paths.resolve(getattr(args, "config_dir", None), getattr(args, "data_dir", None))
    kept = HostTokens(paths.data_dir)
    action, names = (args.words[0], args.words[1:]) if args.words else ("list", [])
    expected = {"add": 1, "remove": 1, "list": 0}
    if action not in expected or len(names) != expected[action]:
        raise BadInput("usage: diana serve token add NAME | list | remove NAME")
    try:
        if action == "add":
            token = kept.add(names[0], datetime.now(UTC).astimezone())
            print(token)
            _err(
                f"diana: the token of client {names[0]}, shown this once (diana keeps only its "
                "hash): give it to the host as `Authorization: Bearer TOKEN`"
            )
        elif action == "remove":
            if not kept.remove(names[0]):
                raise BadInput(f"no client named {printable(names[0])} has a token")
            print(f"Removed the token of {names[0]}: its requests are refused from now on.")
        else:
            listed = kept.listed()
            for token_of in listed:
                print(f"{token_of.name}  made {token_of.created}")
            if not listed:
                print("No client has a token (`diana serve token add NAME`).")
    except (TokenError, OSError) as exc:
        raise BadInput(str(exc)) from None
    return EXIT_OK


def switched(args: argparse.Namespace) -> int:
    paths = Paths.resolve(getattr(args, "config_dir", None), getattr(args, "data_dir", None))
    try:
        if args.switch == "pause":
            now = datetime.now(UTC).astimezone()
            if pause_hosts(paths.data_dir, f"`diana serve pause` (pid {os.getpid()})", now):
                print(
                    "Hosts paused: every call a host makes through `diana serve` waits for a "
                    "person, whatever the policy allows, until `diana serve resume`."
                )
            else:
                print("Hosts were paused already.")
        elif resume_hosts(paths.data_dir):
            print("Hosts resumed: their calls pass the policy again.")
        else:
            print("Hosts were not paused.")
    except OSError as exc:
        raise BadInput(f"cannot {args.switch} hosts in {paths.data_dir}: {exc.strerror}") from None
    return EXIT_OK


def printed_config(args: argparse.Namespace) -> int:
    """`--print-config HOST`: the snippet on stdout, where it goes on stderr; the dirs this
    diana was pointed at (by option or environment) and --keep-alive go into it, so the host's
    diana serves the same data."""
    host = args.print_config
    config_dir, data_dir = getattr(args, "config_dir", None), getattr(args, "data_dir", None)
    paths = Paths.resolve(config_dir, data_dir)
    argv = [*diana_command(), "serve"]
    chosen = (
        ("--config-dir", config_dir, "DIANA_CONFIG_DIR", paths.config_dir),
        ("--data-dir", data_dir, "DIANA_DATA_DIR", paths.data_dir),
    )
    for option, given, variable, resolved in chosen:
        if given is not None or os.environ.get(variable):
            argv += [option, str(resolved.resolve())]
    if args.keep_alive is not None:
        argv += ["--keep-alive", f"{args.keep_alive:g}"]
    if args.only is not None:
        argv += ["--only", args.only]
    for part in argv:
        try:
            part.encode()
        except UnicodeEncodeError:
            raise BadInput(
                f"{printable(part)} is not UTF-8 text: no host's configuration can hold it"
            ) from None
    shown = host_config(host, argv, load_settings(paths).serve.wait)
    print(shown.snippet)
    _err(f"diana: for {host}: {shown.where}")
    return EXIT_OK


def serve_profile(args: argparse.Namespace) -> Profile:
    """What `diana serve` opens: every server to serve (a running app's, if one runs); the
    log alone to list clients. `--only SERVER` serves that server under its own names, which
    only a connection of its own knows: it starts that server itself, app or not."""
    if args.switch == "clients":
        return Profile.READ.but(execution_log=True)
    only = getattr(args, "only", None)
    if only is not None:
        return Profile.GATEWAY.but(only=only, through_app=False)
    return Profile.GATEWAY


async def show_clients(core: Core, args: argparse.Namespace) -> int:
    listed = await core.clients()
    if args.json:
        print(_dump([client.public() for client in listed]))
        return EXIT_OK
    paused = core.hosts_paused()
    if paused is not None:
        print(paused[:1].upper() + paused[1:] + ".")
    if not listed:
        print("No host has called through `diana serve` yet.")
        return EXIT_OK
    rows = [
        (
            client.name,
            f"{client.calls:,}",
            f"{client.waiting:,}",
            shown_minute(client.last_call),
            "yes" if client.token else "—",
        )
        for client in listed
    ]
    print(_table(rows, ("CLIENT", "CALLS", "WAITING", "LAST CALL", "TOKEN")))
    return EXIT_OK


async def cmd_serve(core: Core, args: argparse.Namespace) -> int:
    from diana.tui.serve import serve_stdio
    from diana.tui.serve.gateway import KEEP_ALIVE, unknown_choices

    if args.switch == "clients":
        return await show_clients(core, args)

    keep_alive = KEEP_ALIVE if args.keep_alive is None else args.keep_alive
    if not 0.05 <= keep_alive <= 3600:
        raise BadInput(f"--keep-alive: {keep_alive:g} is not between 0.05 and 3600 seconds")
    for warning in unknown_choices(core):
        _err(printable(warning))
    if not args.http:
        return await serve_stdio(core, keep_alive=keep_alive, only=args.only)
    from diana.tui.serve.http import serve_http

    if args.no_token:
        _err("diana: --no-token: any program on this machine may call diana's tools unnamed")

    def ready(port: int) -> None:
        _err(f"diana: serving MCP at http://{shown_bind(args.bind)}:{port}{MCP_PATH}")

    try:
        return await serve_http(
            core,
            args.port,
            bind=args.bind,
            tokens=not args.no_token,
            keep_alive=keep_alive,
            only=args.only,
            ready=ready,
        )
    except OSError as exc:
        raise BadInput(f"cannot listen on {args.bind} port {args.port}: {exc.strerror}") from None


def shown_bind(bind: str) -> str:
    return f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind


def checked_http(args: argparse.Namespace) -> None:
    """--http's options, refused before anything opens: a bind that is not loopback, a port
    out of range, or --port/--bind/--no-token without --http."""
    if not args.http:
        given = [
            name
            for name, set_ in (
                ("--port", args.port != DEFAULT_PORT),
                ("--bind", args.bind != "127.0.0.1"),
                ("--no-token", args.no_token),
            )
            if set_
        ]
        if given:
            raise BadInput(f"{given[0]} goes with --http")
        return
    if not loopback(args.bind):
        raise BadInput(
            f"--bind {printable(args.bind)}: diana serves only this machine's loopback address "
            "(127.0.0.1, ::1 or localhost)"
        )
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port {args.port}: not a port number (0 to 65535)")
