"""`diana read … --out FILE` saves a resource only to a regular file a person can write, made
or replaced whole; anything else there (a device, a /proc file, a FIFO, a directory, a link)
is refused in one line before the server is even started, and nothing is written through it."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from .commands import diana
from .configs import counted_server, starts_of

pytestmark = pytest.mark.processes


def test_out_refuses_what_is_not_a_regular_file_and_starts_nothing(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    server, starts = counted_server(tmp_path / "srv")
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"fx": server}}))
    fifo, link, folder = tmp_path / "fifo", tmp_path / "link", tmp_path / "folder"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere")
    folder.mkdir()
    for target, why in (
        (
            "/proc/self/mem",
            "is in /proc/self, where no file can be made (No such file or directory)",
        ),
        ("/dev/null", "is a character device, not a regular file"),
        (str(fifo), "is a FIFO (named pipe), not a regular file"),
        (str(folder), "is a directory, not a regular file"),
        (str(link), "is a symbolic link; name the file itself"),
        (
            str(tmp_path / "nosuch" / "x"),
            f"cannot be written: there is no folder {tmp_path / 'nosuch'}",
        ),
    ):
        refused = diana(config_dir, data_dir, "read", "fx", "fixture://greeting", "--out", target)
        assert (refused.returncode, refused.stderr) == (2, f"diana: --out {target} {why}\n")
    assert starts_of(starts) == 0  # refused before the server was started
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config",
        "data",
        "fifo",
        "folder",
        "link",
        "srv",
    ]


def test_out_makes_or_replaces_the_file_whole(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    server, _starts = counted_server(tmp_path / "srv")
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"fx": server}}))
    made, replaced = tmp_path / "made.txt", tmp_path / "replaced.txt"
    replaced.write_text("an older, longer text that is replaced whole")
    replaced.chmod(0o640)
    for target in (made, replaced):
        saved = diana(
            config_dir, data_dir, "read", "fx", "fixture://greeting", "--out", str(target)
        )
        assert saved.returncode == 0, saved.stderr
        assert target.read_text() == "hello from the fixture"
    assert stat.S_IMODE(replaced.stat().st_mode) == 0o640  # the file replaced keeps its mode
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # nothing left beside
