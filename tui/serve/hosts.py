"""What a host's configuration needs to start `diana serve`: for each host people run, the
snippet to paste (with the absolute path of this diana, so the host needs no PATH of its own)
and where that host keeps it (`diana serve --print-config HOST`)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

NAME = "diana"  # the server's name in the host's configuration
# Seconds a host is asked to wait for a call beyond diana's own serve.wait, so diana's answer
# (the proposal's id, once its wait is over) reaches the host before the host gives up.
MARGIN = 30
STARTUP = 30  # seconds a host that times start-up is asked to give `diana serve`


@dataclass(frozen=True)
class HostConfig:
    snippet: str  # what to paste (or, for a host configured by a command, what to run)
    where: str  # where it goes


def diana_command() -> list[str]:
    """This diana as a host must start it: the `diana` script running now, or the one beside
    this Python (an installed diana-tui), else this Python running the module."""
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if running is not None and running.name == "diana" and running.is_file():
        return [str(running.resolve())]
    beside = Path(sys.executable).parent / "diana"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "diana.tui.cli"]


def _json(servers_key: str, entry: dict[str, object]) -> str:
    return json.dumps({servers_key: {NAME: entry}}, indent=2)


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string (ASCII, escaped) is a TOML basic string


def host_config(
    host: str,
    argv: list[str],
    wait: float,
    *,
    platform: str = sys.platform,
    home: Path | None = None,
    env: Mapping[str, str] = os.environ,
) -> HostConfig:
    """The snippet for ``host`` starting ``argv`` (diana and its arguments), whose calls may
    wait ``wait`` seconds for a person. KeyError for a host it does not know."""
    home = Path.home() if home is None else home
    command, args = argv[0], argv[1:]
    entry: dict[str, object] = {"command": command, "args": args}
    limit = int(wait) + MARGIN
    roaming = Path(env.get("APPDATA") or home / "AppData" / "Roaming")
    support = home / "Library" / "Application Support"
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    if host == "claude-desktop":
        folder = {"darwin": support, "win32": roaming}.get(platform, config_home)
        path = folder / "Claude" / "claude_desktop_config.json"
        return HostConfig(_json("mcpServers", entry), f'{path}, under "mcpServers"')
    if host == "claude-code":
        run = shlex.join(["claude", "mcp", "add", "--scope", "user", NAME, "--", *argv])
        return HostConfig(
            run,
            "run it in a shell (for one project instead: "
            '{"mcpServers": {"diana": ...}} in the project\'s .mcp.json)',
        )
    if host == "cursor":
        path = home / ".cursor" / "mcp.json"
        return HostConfig(
            _json("mcpServers", entry),
            f'{path}, under "mcpServers" (for one project: .cursor/mcp.json in it)',
        )
    if host == "vscode":
        folder = {"darwin": support, "win32": roaming}.get(platform, config_home)
        path = folder / "Code" / "User" / "mcp.json"
        return HostConfig(
            _json("servers", {"type": "stdio", **entry}),
            f'{path}, under "servers" (for one workspace: .vscode/mcp.json in it)',
        )
    if host == "codex":
        path = Path(env.get("CODEX_HOME") or home / ".codex") / "config.toml"
        lines = [
            f"[mcp_servers.{NAME}]",
            f"command = {_toml_string(command)}",
            f"args = [{', '.join(_toml_string(arg) for arg in args)}]",
            f"startup_timeout_sec = {STARTUP}",
            f"tool_timeout_sec = {limit}",
        ]
        return HostConfig("\n".join(lines), str(path))
    if host == "gemini-cli":
        path = home / ".gemini" / "settings.json"
        timed = {**entry, "timeout": limit * 1000}
        return HostConfig(_json("mcpServers", timed), f'{path}, under "mcpServers"')
    if host == "oterm":
        if env.get("OTERM_DATA_DIR"):
            folder = Path(env["OTERM_DATA_DIR"])
        elif platform == "win32":
            folder = roaming / "oterm"
        else:
            base = support if platform == "darwin" else home / ".local" / "share"
            folder = Path(env.get("XDG_DATA_HOME") or base) / "oterm"
        return HostConfig(
            _json("mcpServers", entry), f'{folder / "config.json"}, under "mcpServers"'
        )
    raise KeyError(host)


HOSTS = ("claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini-cli", "oterm")
