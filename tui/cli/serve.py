"""`diana serve`: diana as an MCP server for other hosts (the gateway, tui/serve/)."""

from __future__ import annotations

import argparse

from diana.core.api import Core

from .common import BadInput


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-alive",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between progress notifications while a call waits for a person (default 5)",
    )


async def cmd_serve(core: Core, args: argparse.Namespace) -> int:
    from diana.tui.serve import serve_stdio
    from diana.tui.serve.gateway import KEEP_ALIVE

    keep_alive = KEEP_ALIVE if args.keep_alive is None else args.keep_alive
    if not 0.05 <= keep_alive <= 3600:
        raise BadInput(f"--keep-alive: {keep_alive:g} is not between 0.05 and 3600 seconds")
    return await serve_stdio(core, keep_alive=keep_alive)
