"""The `diana` command line: its commands, the options every one takes, and the one way a
command runs (the core it needs, signals, one line for any failure).

A command imports its own module and no other command's (``later``), and the MCP servers it
will connect are started before the runtime and the MCP SDK are imported (``run``)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from diana.core.api import (
    app_runs_on,
    could_serve,
    load_servers,
    start_servers_early,
    stop_servers_started_early,
)
from diana.core.api.errors import CloseError, ConfigError, StorageError
from diana.core.api.shown import without_surrogates
from diana.core.api.types import MCP_SERVERS_FILE, MCPServerConfig, Paths
from diana.core.ports import Ports
from diana.core.profiles import Profile
from diana.tui import CONFIG_DIR_HELP, DATA_DIR_HELP, imports_done, started

from .common import (
    ALL,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TOOL_FAILED,
    NONE,
    ON_DEMAND,
    BadInput,
    Entry,
    Failed,
    _err,
    _line,
    _problem,
    printable_output,
)


def later(module: str, *names: str) -> tuple[Callable[..., Any], ...]:
    """Functions of a command's module (tui/cli/MODULE.py), imported when first called: a
    command imports its own module, and no other command's."""

    def deferred(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(f"{__package__}.{module}"), name)(
                *args, **kwargs
            )

        call.__name__ = call.__qualname__ = name
        return call

    return tuple(deferred(name) for name in names)


cmd_agents, agents_arguments = later("agents", "cmd_agents", "agents_arguments")
cmd_ask, ask_arguments, asked_to_wait = later("ask", "cmd_ask", "ask_arguments", "asked_to_wait")
cmd_cost, cmd_log, cmd_stats, cost_arguments, log_arguments, stats_arguments = later(
    "log", "cmd_cost", "cmd_log", "cmd_stats", "cost_arguments", "log_arguments", "stats_arguments"
)
cmd_chats, chats_arguments = later("chats", "cmd_chats", "chats_arguments")
cmd_memory, memory_arguments = later("memory", "cmd_memory", "memory_arguments")
cmd_models, models_arguments = later("models", "cmd_models", "models_arguments")
cmd_policy, policy_arguments = later("policy", "cmd_policy", "policy_arguments")
(
    approve_arguments,
    cmd_approve,
    cmd_proposals,
    cmd_reject,
    cmd_show,
    proposals_arguments,
    reject_arguments,
    show_arguments,
) = later(
    "proposals",
    "approve_arguments",
    "cmd_approve",
    "cmd_proposals",
    "cmd_reject",
    "cmd_show",
    "proposals_arguments",
    "reject_arguments",
    "show_arguments",
)
(
    cmd_login,
    cmd_logout,
    cmd_prompt,
    cmd_prompts,
    cmd_read,
    cmd_reconnect,
    cmd_resources,
    cmd_servers,
    login_arguments,
    logout_arguments,
    prompt_arguments,
    prompts_arguments,
    read_arguments,
    reconnect_arguments,
    resources_arguments,
    servers_arguments,
) = later(
    "servers",
    "cmd_login",
    "cmd_logout",
    "cmd_prompt",
    "cmd_prompts",
    "cmd_read",
    "cmd_reconnect",
    "cmd_resources",
    "cmd_servers",
    "login_arguments",
    "logout_arguments",
    "prompt_arguments",
    "prompts_arguments",
    "read_arguments",
    "reconnect_arguments",
    "resources_arguments",
    "servers_arguments",
)
cmd_serve, serve_arguments, serve_without_core, serve_profile = later(
    "serve", "cmd_serve", "serve_arguments", "without_core", "serve_profile"
)
(
    call_arguments,
    cmd_call,
    cmd_health,
    cmd_tools,
    health_arguments,
    tools_arguments,
    tools_profile,
    tools_servers,
) = later(
    "tools",
    "call_arguments",
    "cmd_call",
    "cmd_health",
    "cmd_tools",
    "health_arguments",
    "tools_arguments",
    "tools_profile",
    "tools_servers",
)

# Every command, in the order `diana --help` lists them.
COMMANDS: list[Entry] = [
    Entry(
        "tools",
        cmd_tools,
        "list the tools agents provide; add, update or remove local tools",
        tools_arguments,
        description="With no action, list every tool. `add FILE.json` and `update FILE.json` write "
        "one tools.json entry (validated first); `remove NAME` deletes one. A running "
        "diana-tui picks the change up without a restart. `changes` lists the MCP tools held "
        "because their server changed their definition since it was first offered (old and "
        "new); `accept NAME` accepts one's new definition, and it can be called again.",
        servers=tools_servers,
        profile=tools_profile,
        starts=lambda _args, _server: True,  # every server the cache does not stand in for
        app_answers=True,
    ),
    Entry(
        "call",
        cmd_call,
        "call one tool",
        call_arguments,
        servers=ON_DEMAND,
        starts=lambda args, server: could_serve(server, args.tool),
        app_answers=True,  # a running diana-tui runs the call on its servers
    ),
    Entry("health", cmd_health, "check every agent's health", health_arguments),
    Entry(
        "agents",
        cmd_agents,
        "diana's own agents; stop or start one",
        agents_arguments,
        description="With no action, list diana's own agents and whether each is stopped. "
        "`stop NAME` and `start NAME` switch one in settings.json (agents.stopped): a stopped "
        "agent's tools are not offered, and a call of one says how to start it. A running "
        "diana-tui applies it within a second. MCP servers: `diana servers disable NAME`.",
    ),
    Entry(
        "servers",
        cmd_servers,
        "MCP servers and their state; enable, disable, search, install, remove, test or edit",
        servers_arguments,
        description="With no action, list every MCP server and its state. `enable NAME` and "
        "`disable NAME` switch one in mcp-servers.json: a disabled server is listed but not "
        "started, and its tools are not offered. `search QUERY` finds servers in the MCP "
        "Registry; `install REGISTRY_NAME` builds its entry (pinned to a version), asks for "
        "the settings it needs, tests it for real and writes it only if it works; `remove "
        "NAME`, `test NAME` and `edit NAME --set FIELD=VALUE` act on a configured one (an "
        "edit is tested before it is written). A running diana-tui applies changes at once.",
        # The sub-agent's work needs the MCP manager (servers known, none started).
        servers=lambda args: (
            ON_DEMAND if args.action in ("install", "remove", "test", "edit") else NONE
        ),
    ),
    Entry("reconnect", cmd_reconnect, "connect an MCP server (or all) now", reconnect_arguments),
    Entry(
        "login",
        cmd_login,
        "sign in to an HTTP MCP server that asks for OAuth",
        login_arguments,
        servers=ON_DEMAND,
    ),
    Entry(
        "logout",
        cmd_logout,
        "forget an MCP server's OAuth tokens",
        logout_arguments,
        servers=ON_DEMAND,
    ),
    Entry(
        "resources",
        cmd_resources,
        "MCP servers' resources and resource templates",
        resources_arguments,
        servers=ON_DEMAND,
    ),
    Entry(
        "read", cmd_read, "read one resource of an MCP server", read_arguments, servers=ON_DEMAND
    ),
    Entry("prompts", cmd_prompts, "MCP servers' prompts", prompts_arguments, servers=ON_DEMAND),
    Entry("prompt", cmd_prompt, "get one prompt's messages", prompt_arguments, servers=ON_DEMAND),
    Entry(
        "proposals",
        cmd_proposals,
        "calls waiting for a person's decision",
        proposals_arguments,
        profile=Profile.READ,
    ),
    Entry("show", cmd_show, "one proposal in full", show_arguments, profile=Profile.READ),
    Entry(
        "approve",
        cmd_approve,
        "approve a proposal and run it",
        approve_arguments,
        servers=ON_DEMAND,  # it runs the call: the call profile
    ),
    Entry("reject", cmd_reject, "reject a proposal", reject_arguments, profile=Profile.DECIDE),
    Entry(
        "policy",
        cmd_policy,
        "the approval policy's rules, and where each came from; remove one",
        policy_arguments,
        description="With no action, list every rule of policy.json (tool, server and "
        "sampling rules), the server or agent a tool rule is bound to, and the file it came "
        "from (yours, or the shipped default). `remove NAME` takes the rule for that tool or "
        "server out of your policy.json; every running diana applies it at once.",
        profile=Profile.READ,
    ),
    Entry(
        "memory",
        cmd_memory,
        "the facts DIANA remembers: list, search QUERY, show ID, forget ID",
        memory_arguments,
        description="list (newest first), search by meaning and words (says when only by "
        "words, and why), show one fact in full, or forget one (its vector and index entry "
        "go with it).",
        profile=Profile.READ.but(memory=True, execution_log=True),
    ),
    Entry(
        "models",
        cmd_models,
        "the models Ollama has: list, show NAME, pull NAME, rm NAME",
        models_arguments,
        description="list: each model's size, parameters, quantisation, context length, what "
        "it can do (tools, vision, thinking, embedding) and whether it is loaded; the chat's "
        "model is marked *. show NAME: one in full. pull NAME: download it, with its "
        "progress (Ctrl+C stops; pulling again continues). rm NAME: remove it (asks first on "
        "a terminal; --yes otherwise).",
    ),
    Entry(
        "chats",
        cmd_chats,
        "the conversations kept: list, search WORDS, show ID, rename ID TITLE, rm ID, export ID",
        chats_arguments,
        description="list: newest first, with each one's model, message count and where it "
        "began (the app or diana ask); search WORDS: those whose title or messages hold every "
        "word. show ID: one in full (--json: as JSON). rename ID TITLE. rm ID: remove it and "
        "its messages (the calls it made stay in the log; asks first on a terminal, --yes "
        "otherwise). export ID [--format md|json] [--out FILE]: Markdown or JSON with every "
        "tool call and what came of it. diana ask --chat ID goes on with one.",
        profile=Profile.READ,
    ),
    Entry(
        "ask",
        cmd_ask,
        "ask the local model; tool calls go through approvals",
        ask_arguments,
        servers=ON_DEMAND,
        chat=True,
        watches=asked_to_wait,
        asks_person=True,
    ),
    Entry(
        "serve",
        cmd_serve,
        "serve diana's tools to other MCP hosts over stdio; their calls wait for approvals",
        serve_arguments,
        description="An MCP server on stdin and stdout for hosts that start a command "
        '({"command": "diana", "args": ["serve"]}): the tools of every enabled MCP server '
        "and built-in agent, under diana's names. Every call passes the same gate as the "
        "chat's model; one held for a person keeps the host waiting (with progress) until "
        "it is approved or rejected, here or in diana-tui, for at most settings.json "
        "serve.wait seconds. The host cancelling or going away withdraws the proposal. "
        "Nothing but MCP goes to stdout; diana's own lines go to stderr.",
        servers=ALL,
        app_answers=True,  # a running diana-tui's servers are used, none started here
        profile=serve_profile,
        without_core=serve_without_core,
    ),
    Entry(
        "log",
        cmd_log,
        "show recent calls",
        log_arguments,
        description="The newest calls, oldest first; filters combine.",
        profile=Profile.READ.but(execution_log=True),
    ),
    Entry(
        "stats",
        cmd_stats,
        "how each tool is used: calls, outcomes, latency, cost",
        stats_arguments,
        profile=Profile.READ.but(execution_log=True),
    ),
    Entry(
        "cost",
        cmd_cost,
        "today's cost units per agent and MCP server",
        cost_arguments,
        profile=Profile.READ.but(cost=True),
    ),
]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: of the one command named (``only``), with its arguments,
    so that only its module is imported; or (None) every command by its name and help, for
    `diana --help` and for a command that does not exist."""
    # Global options are accepted before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help=CONFIG_DIR_HELP,
    )
    common.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help=DATA_DIR_HELP,
    )
    parser = argparse.ArgumentParser(
        prog="diana",
        parents=[common],
        description="DIANA's core from the command line: tools, calls, health, the log.",
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for entry in COMMANDS:
        if only is not None and entry.name != only:
            continue
        command = sub.add_parser(
            entry.name, parents=[common], help=entry.help, description=entry.description
        )
        if only is not None:
            entry.arguments(command)
        command.set_defaults(entry=entry)
    return parser


GLOBAL_WITH_VALUE = ("--config-dir", "--data-dir")


def given_command(argv: Sequence[str]) -> str | None:
    """The command named in ``argv``: its first argument that is neither a global option nor
    a global option's value. None when an option comes first that only the whole parser
    knows (``-h``, a mistyped one): that parser then answers."""
    args = iter(argv)
    for arg in args:
        if arg in GLOBAL_WITH_VALUE:
            next(args, None)
        elif arg.startswith(tuple(f"{option}=" for option in GLOBAL_WITH_VALUE)):
            continue
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments, parsed by a parser that knows only the given command, so only that
    command's module is imported and only its arguments built; with no command known,
    by the parser of every command (which says what is wrong, and lists them)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    name = given_command(arguments)
    known = name is not None and any(entry.name == name for entry in COMMANDS)
    return build_parser(name if known else None).parse_args(arguments)


class VersionAction(argparse.Action):
    """--version: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from .version import version_text

        print(version_text())
        parser.exit()


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP cancel the command, so its finally-blocks stop every MCP server.
    (Not when ``main`` runs in a thread of another program: its signals are its own.)"""
    if threading.current_thread() is not threading.main_thread():
        return
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, task.cancel)


def servers_it_starts(entry: Entry, args: argparse.Namespace) -> list[MCPServerConfig]:
    """The MCP servers this command connects whatever else happens: every enabled one, or on
    demand those its entry ``starts`` that the tool cache does not stand in for. Nothing if
    the config cannot be read: opening the runtime says why."""
    servers = entry.servers_for(args)
    if servers == NONE or (servers == ON_DEMAND and entry.starts is None):
        return []
    try:
        paths = Paths.resolve(getattr(args, "config_dir", None), getattr(args, "data_dir", None))
        configs = load_servers(paths.config_file(MCP_SERVERS_FILE))
    except ConfigError:
        return []
    if entry.app_answers and app_runs_on(paths.data_dir):
        return []  # the app answers it on its own connections, most likely
    only = entry.profile_for(args).only  # `diana serve --only SERVER`: that one alone
    enabled = [c for c in configs if not c.disabled and only in (None, c.name)]
    if servers == ALL:
        return enabled
    assert entry.starts is not None
    chosen = [config for config in enabled if entry.starts(args, config.name)]
    from diana.core.api.shown import not_cached

    return not_cached(paths.database, chosen, datetime.now(UTC)) if chosen else []


async def run(args: argparse.Namespace) -> int:
    stop_on_signals()
    entry: Entry = args.entry
    if entry.without_core is not None:
        answered = entry.without_core(args)
        if answered is not None:
            return int(answered)
    try:
        # Servers start before the MCP SDK and the core are imported: the two take about as
        # long, and overlap. Whatever no connection takes is ended with the command.
        await start_servers_early(servers_it_starts(entry, args))
        return await run_on_runtime(entry, args)
    finally:
        await stop_servers_started_early()


async def run_on_runtime(entry: Entry, args: argparse.Namespace) -> int:
    from diana.core.api import Core

    profile = entry.profile_for(args)
    core = await Core.open(
        profile,
        getattr(args, "config_dir", None),  # given before or after the command, or not
        getattr(args, "data_dir", None),
        ports=terminal_ports(entry) if profile.agents else Ports(),  # nobody to ask without
    )
    for notice in core.notices:
        _problem(notice)
    started()
    try:
        code = await entry.run(core, args)
        # An approved server addition queued sub-agent work: closing now would cancel it.
        if core.profile.agents and core.server_requests.busy:
            _err("diana: waiting for the MCP sub-agent to finish its requests")
            await core.server_requests.wait_idle()
            for request in core.server_requests.recent():
                message = _line(request.message)
                _err(f"  {request.id} {request.kind.value} {request.server}: {message}")
        return code
    finally:
        await core.close()


def terminal_ports(entry: Entry) -> Ports:
    """What the model (`diana ask`) or a server asks a person is asked on the terminal, if
    there is one."""
    from .ask import ask_on_terminal, decline_without_terminal, elicit_on_terminal, sampling_waits

    is_terminal = sys.stdin.isatty()
    return Ports(
        ask_person=ask_on_terminal if is_terminal and entry.asks_person else None,
        answer_server=elicit_on_terminal if is_terminal else decline_without_terminal,
        sampling_waits=sampling_waits,
    )


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
    args = parse(argv)
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
