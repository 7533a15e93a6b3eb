"""The `diana` command line: its commands, the options every one takes, and the one way a
command runs (the runtime it needs, signals, one line for any failure)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from core.calls import CALL_STATUSES
from core.config import ConfigError
from core.db import StorageError
from core.lifecycle import CloseError
from core.text import without_surrogates
from tui import imports_done

from .ask import cmd_ask, decline_without_terminal, elicit_on_terminal, sampling_waits
from .common import (
    ALL,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TOOL_FAILED,
    NONE,
    ON_DEMAND,
    BadInput,
    Command,
    Failed,
    _err,
    _line,
    _problem,
    printable_output,
)
from .log import cmd_cost, cmd_log, cmd_stats
from .proposals import cmd_approve, cmd_proposals, cmd_reject, cmd_show
from .servers import (
    cmd_login,
    cmd_logout,
    cmd_prompt,
    cmd_prompts,
    cmd_read,
    cmd_reconnect,
    cmd_resources,
    cmd_servers,
)
from .tools import cmd_call, cmd_health, cmd_tools


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
