"""Starting a local (stdio) MCP server's process: its command line and environment, contained
as every process diana starts is (core/system/processes.py).

A command that knows which servers it will connect, before anything else is done, starts
them first (``start_early``): a server takes about as long to start as diana takes to import
the MCP SDK, and the two then overlap. The stdio transport (core/mcp/stdio.py) takes the
process started for its server's entry as it is now (``take_early``), or starts one; what no
transport took is ended by ``close_early``. This module imports nothing slow: it runs before
the SDK is imported.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from subprocess import PIPE
from typing import TYPE_CHECKING

from ..system import processes

if TYPE_CHECKING:
    from ..config.mcp_servers import MCPServerConfig

# The environment a server inherits besides its own "env": enough to find programs and a home.
INHERITED_ENV = (
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
)

# How a server is started: its argv, working directory and environment, as a dict key.
LaunchKey = tuple[tuple[str, ...], str | None, tuple[tuple[str, str], ...]]

_early: dict[LaunchKey, processes.ProcessTree] = {}  # started early, not yet taken


def server_environment(config: MCPServerConfig) -> dict[str, str]:
    inherited = {k: v for k in INHERITED_ENV if (v := os.environ.get(k)) is not None}
    return inherited | config.env


def resolve_command(command: str) -> str:
    """A bare command not on PATH is also looked for beside this Python (the environment
    diana was installed in), so servers installed with diana work without activating it."""
    if os.sep in command or shutil.which(command):
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else command


def launch_key(config: MCPServerConfig) -> LaunchKey:
    assert config.command is not None
    argv = (resolve_command(config.command), *config.args)
    return argv, config.cwd, tuple(sorted(server_environment(config).items()))


async def start(config: MCPServerConfig) -> processes.ProcessTree:
    """The server's process, started now, contained, its stdin, stdout and stderr piped.
    Raises what starting it raised (OSError: the command is not found, ...)."""
    argv, cwd, env = launch_key(config)
    return await processes.spawn(
        list(argv), stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=cwd, env=dict(env)
    )


async def start_early(configs: list[MCPServerConfig]) -> None:
    """Start these stdio servers' processes now, for their transports to take. One that
    cannot be started is left to its transport, which fails to start it the same way and
    says why, as it would have."""
    for config in configs:
        if config.transport != "stdio" or config.command is None:
            continue
        key = launch_key(config)
        if key in _early:
            continue
        try:
            _early[key] = await start(config)
        except Exception:  # whatever it is, the transport meets it again and says so
            continue


def take_early(config: MCPServerConfig) -> processes.ProcessTree | None:
    """The process started early for this entry, as it is now, once; None if there is none
    (the entry changed since, or it was taken). Taken even if it has already exited: what it
    said and how it ended is then the transport's to tell."""
    key = launch_key(config)
    tree = _early.get(key)
    if tree is None or tree.loop is not asyncio.get_running_loop():
        return None  # one started by another event loop cannot be read from this one
    return _early.pop(key)


async def close_early() -> None:
    """End every process started early that no transport took, and its tree."""
    while _early:
        _key, tree = _early.popitem()
        await tree.close()
