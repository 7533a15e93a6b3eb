"""A config file diana changes while a person's editor saves it: diana writes only over the
file it read, so no save of the editor's is ever lost, whether the editor renames a new file
over it or writes it in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from diana.core.config.mcp_servers import parse_servers
from diana.core.config.settings import ConfigError
from diana.core.config.writer import ATTEMPTS, writer_for
from diana.core.mcp.servers_document import document_switched

from .commands import diana

EDITOR = str(Path(__file__).parent / "fixtures" / "editor.py")
SERVERS = {"mcpServers": {"hand": {"command": "true"}, "other": {"command": "true"}}}


def start_editor(path: Path, stop: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, EDITOR, str(path), str(stop)], stdout=subprocess.PIPE, text=True
    )


def editor_report(editor: subprocess.Popen[str], stop: Path) -> dict[str, Any]:
    stop.touch()
    out, _ = editor.communicate(timeout=30)
    assert editor.returncode == 0
    return dict(json.loads(out))


def last_save(path: Path) -> int:
    """The number of the editor's last save in the file (-1 if none, or caught mid-save)."""
    try:
        document = json.loads(path.read_text())
    except ValueError:
        return -1
    return int(document["mcpServers"]["hand"].get("env", {}).get("EDIT", -1))


def switch(path: Path, enabled: bool) -> Any:
    """What `diana servers enable|disable other` writes, through the same writer."""
    return writer_for(path).update(
        lambda document: document_switched(document, "other", enabled=enabled),
        lambda document, where: parse_servers(document, where, dict(os.environ)),
    )


@pytest.mark.processes
async def test_no_save_of_an_editor_is_lost_while_diana_writes_the_file(tmp_path: Path) -> None:
    path, stop = tmp_path / "mcp-servers.json", tmp_path / "stop"
    path.write_text(json.dumps(SERVERS))
    editor = start_editor(path, stop)
    refused: list[str] = []
    turns = 0
    try:
        # Until both have done their share: a hundred changes, sixty saves.
        while turns < 100 or last_save(path) < 60:
            try:
                await switch(path, enabled=bool(turns % 2))
            except ConfigError as exc:  # the editor saved throughout every try
                refused.append(exc.message)
            turns += 1
    finally:
        report = editor_report(editor, stop)

    assert report["saves"] >= 60, report
    assert report["lost"] == [], f"{len(report['lost'])} of {report['saves']} saves lost"
    final = json.loads(path.read_text())
    assert final["mcpServers"]["hand"]["env"] == {"EDIT": str(report["saves"] - 1)}
    assert all("another program kept saving it" in said for said in refused), refused
    assert len(refused) < turns // 10, refused


@pytest.mark.processes
def test_diana_servers_disable_and_enable_lose_no_save_of_an_editor(
    config_dir: Path, data_dir: Path
) -> None:
    path, stop = config_dir / "mcp-servers.json", config_dir / "stop"
    path.write_text(json.dumps(SERVERS))
    editor = start_editor(path, stop)
    done = []
    try:
        for turn in range(6):
            done.append(
                diana(config_dir, data_dir, "servers", ("disable", "enable")[turn % 2], "other")
            )
    finally:
        report = editor_report(editor, stop)

    assert [d.returncode for d in done] == [0] * 6, [d.stderr for d in done]
    assert report["lost"] == [], f"{len(report['lost'])} of {report['saves']} saves lost"


async def test_a_file_that_keeps_changing_is_refused_and_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcp-servers.json"
    path.write_text(json.dumps(SERVERS))
    saves = 0

    def saved_meanwhile(document: Any, where: Path) -> None:
        """Another program saves the file each time diana has read it."""
        nonlocal saves
        saves += 1
        edited = json.loads(path.read_text())
        edited["mcpServers"]["hand"]["env"] = {"EDIT": str(saves)}
        path.write_text(json.dumps(edited))

    with pytest.raises(ConfigError) as refused:
        await writer_for(path).update(
            lambda document: document_switched(document, "other", enabled=False), saved_meanwhile
        )

    assert str(refused.value) == (
        f"{path}: another program kept saving it while diana was changing it ({ATTEMPTS} "
        "tries); nothing was written, so no save of theirs was lost: try again"
    )
    final = json.loads(path.read_text())
    assert final["mcpServers"]["hand"]["env"] == {"EDIT": str(ATTEMPTS)}
    assert "disabled" not in final["mcpServers"]["other"]


@pytest.mark.parametrize("done", ["", "half"])
async def test_a_save_in_place_caught_half_written_is_read_again(tmp_path: Path, done: str) -> None:
    """An editor's save in place caught empty (truncated) or half written, and finished only
    0.2 s later (a busy machine): diana waits for the rest and changes the saved file."""
    path = tmp_path / "mcp-servers.json"
    edited = {**SERVERS, "mcpServers": {**SERVERS["mcpServers"], "hand": {"command": "edited"}}}
    whole = json.dumps(edited)
    path.write_text(whole[: len(whole) // 2] if done else "")
    finish = threading.Timer(0.2, path.write_text, [whole])
    read: list[Any] = []

    def change(document: Any) -> Any:
        read.append(document)
        return document_switched(document, "other", enabled=False)

    finish.start()
    try:
        await writer_for(path).update(change, lambda document, where: None)
    finally:
        finish.join()

    final = json.loads(path.read_text())
    assert read == [edited]
    assert final["mcpServers"]["hand"] == {"command": "edited"}
    assert final["mcpServers"]["other"]["disabled"] is True


async def test_a_broken_file_that_does_not_change_is_an_error_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp-servers.json"
    path.write_text('{"mcpServers": ')

    with pytest.raises(ConfigError, match=str(path)):
        await switch(path, enabled=False)

    assert path.read_text() == '{"mcpServers": '


def test_a_change_keeps_the_files_layout() -> None:
    from diana.core.config.writer import formatted_like

    value = {"mcpServers": {"a": {"command": "x", "disabled": True}}}
    assert formatted_like(value, b'{"mcpServers":{"a":{"command":"x"}}}') == (
        '{"mcpServers":{"a":{"command":"x","disabled":true}}}'
    )
    assert formatted_like(value, b'{"mcpServers": {"a": {"command": "x"}}}\n') == (
        '{"mcpServers": {"a": {"command": "x", "disabled": true}}}\n'
    )
    tabbed = formatted_like(value, b'{\n\t"mcpServers": {}\n}\n')
    assert tabbed.startswith('{\n\t"mcpServers": {\n\t\t"a"') and tabbed.endswith("}\n")
    assert formatted_like(value, b"").startswith('{\n  "mcpServers"')  # a new file


@pytest.mark.processes
def test_diana_servers_disable_keeps_a_compact_file_on_one_line(tmp_path: Path) -> None:
    from .commands import diana
    from .scenarios import fixture_server

    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    config_dir.mkdir()
    compact = json.dumps({"mcpServers": {"a": fixture_server()}}, separators=(",", ":"))
    (config_dir / "mcp-servers.json").write_text(compact)
    done = diana(config_dir, data_dir, "servers", "disable", "a")
    assert done.returncode == 0, done.stderr
    written = (config_dir / "mcp-servers.json").read_text()
    assert "\n" not in written and written.endswith('"disabled":true}}}')
