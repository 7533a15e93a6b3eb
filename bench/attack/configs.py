"""Config writers: the files a case's setup puts in its config dir."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from .cases import DENY_SAVE_FACT, GATE, Ctx


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def settings_for(ctx: Ctx, **llm: Any) -> dict[str, Any]:
    return {
        "obsidian": {"vault": str(ctx.dir / "vault"), "daily_folder": "Daily"},
        "tools": {"default_timeout": 10, "timeouts": {}},
        "llm": {"model": "attack", "connect_timeout": 1, "timeout": 2, **llm},
    }


def base(
    ctx: Ctx,
    *,
    servers: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    llm: dict[str, Any] | None = None,
    skip: str = "",
) -> None:
    files = {
        "settings.json": settings_for(ctx, **(llm or {})),
        "mcp-servers.json": {"mcpServers": servers or {}},
        "policy.json": DENY_SAVE_FACT if policy is None else policy,
        "tools.json": {"tools": tools or []},
    }
    for name, value in files.items():
        if name != skip:
            write_json(ctx.config / name, value)


def python_server(script: str, *args: str, timeout: float = 3, **fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [script, *args], "timeout": timeout, **fields}


def gate(ctx: Ctx, **fields: Any) -> dict[str, Any]:
    # A working server: a machine busy with other work must not make it miss its handshake
    # or cut off its call (its start, handshake and call all fall within a command's run).
    fields.setdefault("timeout", 30)
    return python_server(GATE, "--side-effects", str(ctx.effects), **fields)


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


def make_loop(path: Path) -> None:
    other = path.with_name(path.name + ".loop")
    os.symlink(other, path)
    os.symlink(path, other)


def make_chain(path: Path, length: int = 45) -> None:
    target = path.with_name(path.name + ".real")
    target.write_text("{}")
    previous = target
    for n in range(length):
        link = path.with_name(f"{path.name}.{n}")
        os.symlink(previous, link)
        previous = link
    os.symlink(previous, path)
