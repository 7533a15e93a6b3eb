"""What diana offers MCP servers as their client: roots (told again when they change, with no
restart), and the server's own log messages, kept per server at the level asked for."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import sys
from pathlib import Path

import pytest
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .configs import RAW
from .conftest import stepping_clock
from .scenarios import fixture_server, until

pytestmark = pytest.mark.processes  # every test here starts a process


def write_host_fixture(config_dir: Path) -> None:
    """The SDK fixture with its host tools, every call allowed."""
    server = {"fx": fixture_server("--host-tools")}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": server}))
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"fx": "allow"}}))


def write_raw(config_dir: Path, roots: list[str]) -> None:
    entry = {
        "command": sys.executable,
        "args": [RAW, "--host"],
        "roots": roots,
        "logLevel": "debug",
    }
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"raw": entry}}))


async def test_roots_are_offered_and_a_change_is_told_without_a_restart(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    write_raw(config_dir, [str(tmp_path / "project"), "~/notes"])
    async with await Runtime.open(
        Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        result = await runtime.call_tool("raw_roots", {}, origin="test")
        home = Path("~/notes").expanduser().as_uri()
        assert result.data == f"{(tmp_path / 'project').as_uri()}\n{home}"
        connection = runtime.mcp.connections["raw"]
        pid = connection.state.pid

        write_raw(config_dir, [str(tmp_path / "other")])
        texts = lambda: [entry.text for entry in connection.state.logs]  # noqa: E731
        await until(lambda: "roots changed" in texts(), within=10)
        assert connection.state.pid == pid  # told, not restarted
        result = await runtime.call_tool("raw_roots", {}, origin="test")
        assert result.data == (tmp_path / "other").as_uri()

        info = runtime.mcp.diagnostics("raw")
        assert info.roots == [(tmp_path / "other").as_uri()]
        assert info.log_level == "debug"
        logged = [(entry.level, entry.text) for entry in info.logs]
        assert logged[0] == ("notice", "log level set to debug")  # logging/setLevel was sent
        assert ("info", "roots were asked for") in logged


def test_roots_must_be_absolute_paths(config_dir: Path, data_dir: Path) -> None:
    from .commands import diana

    write_raw(config_dir, ["relative/path"])
    done = diana(config_dir, data_dir, "servers")
    assert done.returncode == 2
    assert "roots[0] must be an absolute path (or start with ~)" in done.stderr
    assert "mcp-servers.json" in done.stderr


async def test_structured_content_that_breaks_its_output_schema_is_refused(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    write_raw(config_dir, [])
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        kept = await runtime.call_tool("raw_count", {}, origin="test")
        assert (kept.success, kept.data) == (True, {"count": 3})
        lied = await runtime.call_tool("raw_count", {"lie": True}, origin="test")
        assert lied.error_code is ErrorCode.INVALID_RESPONSE
        assert lied.error == (
            "raw_count returned structured content that does not fit its output schema: "
            "count: 'many' is not of type 'integer'"
        )


async def test_a_tool_that_runs_only_as_a_task_is_called_as_one_and_cancelled_with_it(
    config_dir: Path, data_dir: Path
) -> None:
    write_raw(config_dir, [])
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"raw": "allow"}}))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        connection = runtime.mcp.connections["raw"]
        assert connection.state.protocol_version == "2025-11-25"
        done = await runtime.call_tool("raw_research", {"seconds": 0.3}, origin="test")
        assert done.data == "task-1 completed"  # polled until done, then its result fetched

        call = asyncio.create_task(
            runtime.call_tool("raw_research", {"seconds": 30}, origin="test")
        )
        texts = lambda: [entry.text for entry in connection.state.logs]  # noqa: E731
        await until(lambda: texts().count("making a task") == 2, within=20)  # sent, this one
        (call_id,) = runtime.orchestrator._running
        assert runtime.orchestrator.cancel(call_id)
        assert (await call).error_code is ErrorCode.CANCELLED
        await until(lambda: "task-2 cancelled" in texts(), within=20)  # tasks/cancel sent


async def test_a_call_cancelled_while_its_task_is_being_made_cancels_the_task(
    config_dir: Path, data_dir: Path
) -> None:
    """The server answers the call with its task only after the call was cancelled: the
    task is cancelled on the server all the same (it would otherwise run on)."""
    write_raw(config_dir, [])
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"raw": "allow"}}))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        connection = runtime.mcp.connections["raw"]
        call = asyncio.create_task(
            runtime.call_tool("raw_research", {"seconds": 60, "made_after": 1}, origin="test")
        )
        texts = lambda: [entry.text for entry in connection.state.logs]  # noqa: E731
        await until(lambda: "making a task" in texts(), within=20)  # not cancelled before sent
        (call_id,) = runtime.orchestrator._running
        assert runtime.orchestrator.cancel(call_id)
        assert (await call).error_code is ErrorCode.CANCELLED
        await until(lambda: "task-1 cancelled" in texts(), within=20)


async def test_images_are_kept_as_files_and_embedded_text_is_part_of_the_result(
    config_dir: Path, data_dir: Path
) -> None:
    write_host_fixture(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        picture = await runtime.call_tool("fx_picture", {}, origin="test")
        found = re.search(r"\[image image/png, 67 bytes: (\S+\.png)\]", picture.data)
        assert found, picture.data
        kept = Path(found.group(1))
        assert kept.parent == data_dir / "media"
        assert kept.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and kept.stat().st_size == 67
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        report = await runtime.call_tool("fx_report", {}, origin="test")
        assert report.data == (
            "the report:\n[resource fixture://report.md (text/markdown)]\n# Q3\nAll good.\n"
            "[resource link fixture://greeting (greeting)]"
        )


async def test_a_watched_resource_is_told_of_each_change_and_unwatched_at_the_end(
    config_dir: Path, data_dir: Path
) -> None:
    from diana.core.mcp.catalog import read_resource, unwatch_resource, watch_resource

    write_raw(config_dir, [])
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        connection = await runtime.mcp.connected("raw")
        told: list[str] = []
        await watch_resource(connection, "raw://clock", told.append)
        await until(lambda: len(told) == 2, within=10)
        assert told == ["raw://clock", "raw://clock"]
        (content,) = await read_resource(connection, "raw://clock")
        assert content.text == "tick 2"
        await unwatch_resource(connection, "raw://clock", told.append)
        assert connection.watches.listeners == {}


async def test_a_watched_resource_is_told_of_changes_on_a_listen_stream(
    config_dir: Path, data_dir: Path
) -> None:
    from diana.core.mcp.catalog import read_resource, unwatch_resource, watch_resource

    write_host_fixture(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        connection = await runtime.mcp.connected("fx")
        assert connection.state.protocol_version == "2026-07-28"
        told: list[str] = []
        await watch_resource(connection, "fixture://note", told.append)
        await runtime.call_tool("fx_edit_note", {"text": "second draft"}, origin="test")
        await until(lambda: told == ["fixture://note"], within=10)
        (content,) = await read_resource(connection, "fixture://note")
        assert content.text == "second draft"
        await unwatch_resource(connection, "fixture://note", told.append)
        await runtime.call_tool("fx_edit_note", {"text": "third"}, origin="test")
        # A later change, told to a new watcher, comes after any the old one could be told
        again: list[str] = []
        await watch_resource(connection, "fixture://note", again.append)
        await runtime.call_tool("fx_edit_note", {"text": "fourth"}, origin="test")
        await until(lambda: again == ["fixture://note"], within=10)
        assert told == ["fixture://note"]  # no longer watched
