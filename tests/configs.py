"""What a test writes into diana's config: MCP server entries and the scripts they run, a
tools.json entry."""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")


RAW = str(Path(__file__).parent / "fixtures" / "raw_mcp_server.py")


LARGE_SERVER = str(Path(__file__).parent / "fixtures" / "large_resource_server.py")


# A server command that writes its pid to a file, then becomes the fixture server: each line
# of the file is one start.
COUNTING = """
import os, sys
with open(sys.argv[1], "a") as starts:
    starts.write(f"{os.getpid()}\\n")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def counted_server(tmp_path: Path, *extra: str, **fields: object) -> tuple[dict[str, object], Path]:
    """A fixture server entry whose every start is recorded; the record's path."""
    tmp_path.mkdir(exist_ok=True)
    wrapper, starts = tmp_path / "counting.py", tmp_path / "starts.txt"
    wrapper.write_text(COUNTING)
    entry = {"command": sys.executable, "args": [str(wrapper), str(starts), FIXTURE, *extra]}
    return {**entry, **fields}, starts


def starts_of(record: Path) -> int:
    return len(record.read_text().split()) if record.exists() else 0


def write_servers(config_dir: Path, servers: dict[str, object]) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


# A tool of tools.json, as little as one may say.
WORD_COUNT = {
    "name": "word_count",
    "description": "Count the words in a text.",
    "parameters": {"type": "object"},
    "script": "word_count.py",
}
