"""A host of `diana serve` as the tests play it: the config of one MCP server whose destructive
tool appends a line per call, the host's name, and a held call's progress as the host hears
it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from mcp import types

from .commands import diana

APPEND = str(Path(__file__).parent / "fixtures" / "append_server.py")
HOST = types.Implementation(name="claude-code", version="2.0.0")


def configure(config_dir: Path, marks: Path, **serve: Any) -> None:
    """One MCP server whose destructive tool appends a line per call (the count of runs)."""
    server = {"command": sys.executable, "args": [APPEND, "--file", str(marks)]}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"append": server}}))
    if serve:
        settings = json.loads((config_dir / "settings.json").read_text())
        (config_dir / "settings.json").write_text(json.dumps({**settings, "serve": serve}))


def lines(marks: Path) -> list[str]:
    return marks.read_text().splitlines() if marks.exists() else []


class Waiting:
    """A held call's progress as the host hears it: set once the first notification came."""

    def __init__(self) -> None:
        self.heard = asyncio.Event()
        self.messages: list[str] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")
        self.heard.set()

    async def proposal_id(self) -> str:
        await asyncio.wait_for(self.heard.wait(), 30)
        return self.messages[0].rsplit(" ", 1)[-1]


def text_of(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def running_with(word: str) -> list[int]:
    """The pids of running processes whose command line holds ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if status != "Z" and word in (entry / "cmdline").read_bytes().decode(
                    errors="replace"
                ):
                    found.append(int(entry.name))
    return found


def pending_proposals(config_dir: Path, data_dir: Path) -> list[dict[str, Any]]:
    listed = diana(config_dir, data_dir, "proposals", "--json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))
