"""`diana serve`: diana as an MCP server for other hosts (the gateway, tui/serve/)."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime

from diana.core.api import Core, load_settings, pause_hosts, resume_hosts
from diana.core.api.types import Paths

from ..serve.hosts import HOSTS, diana_command, host_config
from .common import EXIT_OK, BadInput, _err, printable


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "switch",
        nargs="?",
        choices=("pause", "resume"),
        help="pause: every call a host makes waits for a person, whatever the policy allows, "
        "in every diana on this data dir, until resume; nothing is served",
    )
    parser.add_argument(
        "--print-config",
        choices=HOSTS,
        metavar="HOST",
        help="print what HOST's configuration needs to start this diana, and where it goes "
        f"(HOST: {', '.join(HOSTS)}); nothing is served",
    )
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between progress notifications while a call waits for a person (default 5)",
    )


def without_core(args: argparse.Namespace) -> int | None:
    """`diana serve pause|resume` and `--print-config HOST`, answered without serving; None
    for `diana serve` itself."""
    if args.switch is not None:
        return switched(args)
    if args.print_config is not None:
        return printed_config(args)
    return None


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


async def cmd_serve(core: Core, args: argparse.Namespace) -> int:
    from diana.tui.serve import serve_stdio
    from diana.tui.serve.gateway import KEEP_ALIVE

    keep_alive = KEEP_ALIVE if args.keep_alive is None else args.keep_alive
    if not 0.05 <= keep_alive <= 3600:
        raise BadInput(f"--keep-alive: {keep_alive:g} is not between 0.05 and 3600 seconds")
    return await serve_stdio(core, keep_alive=keep_alive)
