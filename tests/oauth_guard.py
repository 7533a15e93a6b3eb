"""An MCP server behind OAuth (tests/fixtures/oauth_server.py) running for a test, and `diana` run
against it with the headless browser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .browsers import BROWSER
from .commands import diana_argv
from .configs import FIXTURES
from .network import free_port
from .waits import listening


class Guarded:
    def __init__(self, port: int, record: Path) -> None:
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.record = record

    def requests(self) -> list[dict[str, str]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def guarded(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Guarded]:
    port = free_port()
    extra = getattr(request, "param", [])
    record = tmp_path / "requests.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            str(FIXTURES / "oauth_server.py"),
            "--port",
            str(port),
            "--record",
            str(record),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, process)
        yield Guarded(port, record)
    finally:
        process.terminate()
        process.wait(timeout=10)


def configure(config_dir: Path, entry: dict[str, object]) -> None:
    servers = {"mcpServers": {"guarded": entry}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"guarded": "allow"}}))


def run(
    config_dir: Path, data_dir: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        diana_argv(config_dir, data_dir, *args),
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "BROWSER": BROWSER, **env},
    )
