"""`diana`'s tables on an 80-column terminal: one header line, no line past the width, the
columns that matter (ids, names) whole, the rest giving way as the panes' tables do; piped,
every cell whole as scripts read it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.cells import cell_len

from .commands import diana_here, on_a_terminal
from .fixtures.fake_registry import FakeRegistry

pytestmark = pytest.mark.processes  # every test here runs diana on a terminal (a pty)

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
LONG_PATH = "/home/someone/projects/a-rather-long-folder-name/and/a/file-with-a-long-name.txt"


def run(config_dir: Path, data_dir: Path, *args: str, columns: int | None) -> str:
    """A command's stdout, piped; ``columns``: with COLUMNS set to it."""
    env = None if columns is None else {"COLUMNS": str(columns)}
    done = diana_here(config_dir, data_dir, *args, env=env)
    assert done.returncode in (0, 3), done.stderr
    return done.stdout


def widest_line(text: str) -> int:
    return max(cell_len(line) for line in text.splitlines())


@pytest.fixture
def dirs(config_dir: Path, data_dir: Path) -> Iterator[tuple[Path, Path]]:
    servers = {"files": {"command": sys.executable, "args": [FIXTURE]}}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    yield config_dir, data_dir


def test_proposals_tools_and_stats_fit_80_columns_with_ids_whole(
    dirs: tuple[Path, Path],
) -> None:
    config_dir, data_dir = dirs
    for _ in range(2):  # held for approval: two proposals
        run(
            config_dir,
            data_dir,
            "call",
            "files_delete_file",
            "--args",
            json.dumps({"path": LONG_PATH}),
            columns=None,
        )
    proposals = json.loads(run(config_dir, data_dir, "proposals", "--json", columns=None))
    ids = [p["id"] for p in proposals]
    assert len(ids) == 2

    for command, header in (
        (("proposals",), ["ID", "STATUS", "RISK", "TOOL", "ARGUMENTS", "CREATED"]),
        (("tools",), ["TOOL", "AGENT", "RISK", "DESCRIPTION"]),
        (("stats",), ["TOOL", "CALLS", "OK", "FAILED"]),
    ):
        fitted = on_a_terminal(config_dir, data_dir, *command, width=80)
        assert widest_line(fitted) <= 80, fitted
        first = fitted.splitlines()[0].split()  # the one header line
        assert first[: len(header)] == header, fitted
        # Piped, even with COLUMNS: every cell whole, as before, for scripts.
        piped = run(config_dir, data_dir, *command, columns=80)
        assert widest_line(piped) > 80
        if command == ("proposals",):
            rows = fitted.splitlines()[1:]
            assert sorted(row.split()[0] for row in rows) == sorted(ids)  # ids never cut
            assert all(row.rstrip()[-19:-9].count("-") == 2 for row in rows)  # the date
            assert LONG_PATH[:40] in piped and LONG_PATH[:40] not in fitted
        if command == ("tools",):
            tools = {line.split()[0] for line in fitted.splitlines()[1:] if line}
            assert {"files_delete_file", "get_current_time", "mcp_list_available_tools"} <= tools
        if command == ("stats",):
            assert first[-2:] == ["LAST", "USED"]  # never cut
            assert "(not shown at 80 columns: agent, refused" in fitted
            assert "files_delete_file" in fitted

    # COLUMNS is the width on a terminal, as the terminal's own would be.
    shown = on_a_terminal(config_dir, data_dir, "proposals", width=200, columns=80)
    assert widest_line(shown) <= 80 and shown.splitlines()[0].split()[0] == "ID"
    assert shown == on_a_terminal(config_dir, data_dir, "proposals", width=80)


def test_servers_search_fits_80_columns_with_names_whole(config_dir: Path, data_dir: Path) -> None:
    with FakeRegistry() as registry:
        settings = json.loads((config_dir / "settings.json").read_text())
        settings["registry"] = {"url": registry.url}
        (config_dir / "settings.json").write_text(json.dumps(settings))
        found = json.loads(
            run(config_dir, data_dir, "servers", "search", "time", "--json", columns=None)
        )
        fitted = on_a_terminal(config_dir, data_dir, "servers", "search", "time", width=80)
        piped = run(config_dir, data_dir, "servers", "search", "time", columns=None)
    assert widest_line(piped) > 80
    assert widest_line(fitted) <= 80, fitted
    header = fitted.splitlines()[0].split()
    assert header[0] == "NAME" and "RUNS" in header and "TITLE" not in header
    names = [line.split()[0] for line in fitted.splitlines()[1 : 1 + len(found)]]
    assert names == [s["name"] for s in found]  # names never cut
