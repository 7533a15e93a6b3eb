"""One live instance of each MCP server while diana-tui runs on the data dir: `diana call`,
`diana approve` and `diana serve` beside it use the app's servers, and start none of their
own. The app runs in a process of its own (tests/fixtures/live_app.py); a command that runs to
its end runs in the test's process, one that must be stopped or outlive the app as a
subprocess. A stateful server (tests/fixtures/counter_server.py, a counter held in its process)
proves it: every call, whoever made it, changes the same count, in the one process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .commands import diana_here, diana_here_async, start_diana
from .database import query
from .live_apps import app_running
from .scenarios import prepare_dirs
from .serving import stdio_host as host
from .serving import text_of
from .waits import until

pytestmark = pytest.mark.processes  # every test here starts an app, commands and a server

COUNTER = str(Path(__file__).parent / "fixtures" / "counter_server.py")


def counter_dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Dirs with the counter server configured once (its starts counted in a file), `bump`
    allowed and `bump_held` asked of a person."""
    starts = tmp_path / "starts"
    server = {"command": sys.executable, "args": [COUNTER, "--starts", str(starts)]}
    config_dir, data_dir = prepare_dirs(tmp_path, {"counter": server})
    rules = {"tools": {"counter_bump": "allow", "counter_bump_held": "ask"}}
    (config_dir / "policy.json").write_text(json.dumps(rules))
    return config_dir, data_dir, starts


def started(starts: Path) -> list[int]:
    """The pid of every counter server process started so far."""
    return [int(line) for line in starts.read_text().split()] if starts.exists() else []


def bumped(stdout: str) -> tuple[int, int]:
    said = json.loads(stdout)
    return said["count"], said["pid"]


def picked_up(data_dir: Path, kind: str) -> bool:
    return bool(
        query(
            data_dir,
            "SELECT 1 FROM live_requests WHERE kind = ? AND picked_at IS NOT NULL",
            (kind,),
        )
    )


async def test_diana_call_beside_the_app_is_run_by_the_app_on_its_server(
    tmp_path: Path,
) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    with app_running(config_dir, data_dir):
        (server,) = started(starts)
        first = await diana_here_async(config_dir, data_dir, "call", "counter_bump")
        second = await diana_here_async(config_dir, data_dir, "call", "counter_bump", "--json")
        assert first.returncode == 0, first.stderr
        assert second.returncode == 0, second.stderr
        assert first.stderr == ""  # printed exactly as when the command runs it
        assert bumped(first.stdout) == (1, server)
        assert json.loads(second.stdout)["data"] == {"count": 2, "pid": server}
        assert started(starts) == [server]  # no command started a server
    logged = query(data_dir, "SELECT origin FROM execution_log WHERE tool = 'counter_bump'")
    assert logged == [("cli",), ("cli",)]  # the app logged them, with the command's origin


async def test_a_held_call_beside_the_app_exits_3_and_its_approval_runs_in_the_app(
    tmp_path: Path,
) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    with app_running(config_dir, data_dir):
        (server,) = started(starts)
        held = await diana_here_async(config_dir, data_dir, "call", "counter_bump_held")
        assert held.returncode == 3, held.stderr
        proposal_id = held.stdout.strip()
        assert held.stderr.endswith(f"\ndiana: approve with `diana approve {proposal_id}`\n")
        approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
        assert approved.returncode == 0, approved.stderr
        assert bumped(approved.stdout) == (1, server)
        again = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
        assert again.returncode == 2
        assert again.stderr.startswith("diana: ") and again.stderr.count("\n") == 1
        assert "Traceback" not in again.stderr
        assert started(starts) == [server]


async def test_a_call_the_app_does_not_take_up_is_run_by_the_command_saying_so(
    tmp_path: Path,
) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    with app_running(config_dir, data_dir) as app:
        (server,) = started(starts)
        app.pause(data_dir)
        try:
            done = await diana_here_async(config_dir, data_dir, "call", "counter_bump")
        finally:
            app.resume()
        assert done.returncode == 0, done.stderr
        count, pid = bumped(done.stdout)
        assert pid != server and count == 1
        assert done.stderr == (
            f"diana: warning: {app.describe()} did not take the request up within 5 s; "
            "running the call with this command's own servers\n"
        )
        assert not query(data_dir, "SELECT 1 FROM live_requests")  # taken back: never run twice


async def test_the_app_stopping_mid_call_ends_the_command_with_one_line(tmp_path: Path) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    with app_running(config_dir, data_dir) as app:
        command = start_diana(config_dir, data_dir, "call", "counter_hold")
        try:
            await asyncio.to_thread(until, lambda: picked_up(data_dir, "call"), 30)
            app.process.terminate()
            out, err = await asyncio.to_thread(command.communicate, timeout=60)
        finally:
            if command.poll() is None:
                command.kill()
                command.wait()
        app.process.wait(timeout=30)
    assert command.returncode == 1, err
    assert out == ""
    assert err.startswith(f"diana: {app.describe()} ") and err.count("\n") == 1, err
    assert "stopped" in err
    assert len(started(starts)) == 1  # the command did not start one to run it again


async def test_every_call_through_the_app_gateway_and_commands_counts_on_one_server(
    tmp_path: Path,
) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    seen: list[tuple[int, int]] = []
    with app_running(config_dir, data_dir):
        (server,) = started(starts)
        async with host(config_dir, data_dir) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"counter_bump", "counter_bump_held", "counter_hold"} <= names
            for _ in range(2):
                result = await session.call_tool("counter_bump", {})
                assert not result.is_error, text_of(result)
                seen.append(bumped(text_of(result)))
            for _ in range(2):
                done = await diana_here_async(config_dir, data_dir, "call", "counter_bump")
                assert done.returncode == 0, done.stderr
                seen.append(bumped(done.stdout))
            # A host's call the policy holds: pending at once in the app, approved from the
            # command line, run once, in the app, and its result goes back to the host.
            waiting = asyncio.ensure_future(session.call_tool("counter_bump_held", {}))
            await asyncio.to_thread(
                until,
                lambda: (
                    query(data_dir, "SELECT count(*) FROM proposals WHERE status = 'pending'")
                    == [(1,)]
                ),
                30,
            )
            ((proposal_id, origin),) = query(
                data_dir, "SELECT id, origin FROM proposals WHERE status = 'pending'"
            )
            assert origin == "host:claude-code"
            approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
            assert approved.returncode == 0, approved.stderr
            seen.append(bumped(approved.stdout))
            result = await asyncio.wait_for(waiting, 60)
            assert not result.is_error, text_of(result)
            assert bumped(text_of(result)) == seen[-1]
            result = await session.call_tool("counter_bump", {})
            seen.append(bumped(text_of(result)))
    assert sorted(count for count, _pid in seen) == list(range(1, 7))  # none twice, none lost
    assert {pid for _count, pid in seen} == {server}
    assert started(starts) == [server]  # one process of the server ran, the app's
    logged = query(data_dir, "SELECT origin FROM execution_log WHERE tool = 'counter_bump'")
    assert sorted(origin for (origin,) in logged) == ["cli", "cli", *["host:claude-code"] * 3]


async def test_a_gateway_whose_app_stopped_fails_each_call_in_one_line(tmp_path: Path) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    with app_running(config_dir, data_dir) as app:
        (server,) = started(starts)
        async with host(config_dir, data_dir) as session:
            assert not (await session.call_tool("counter_bump", {})).is_error
            app.process.terminate()
            app.process.wait(timeout=30)
            result = await asyncio.wait_for(session.call_tool("counter_bump", {}), 30)
            assert result.is_error
            said = text_of(result)
            assert said.startswith(f"{app.describe()} stopped") and "\n" not in said, said
            assert "diana serve" in said
    assert started(starts) == [server]  # the gateway started none of its own


def test_the_counter_server_counts_in_its_process(tmp_path: Path) -> None:
    """The fixture itself: two processes of it keep two counts (what the tests above tell)."""
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    counts: list[Any] = []
    for _ in range(2):
        done = diana_here(config_dir, data_dir, "call", "counter_bump")
        assert done.returncode == 0, done.stderr
        counts.append(bumped(done.stdout))
    assert [count for count, _pid in counts] == [1, 1]
    assert len(set(started(starts))) == 2


async def test_arguments_past_what_the_app_is_passed_are_one_line_and_run_nowhere(
    tmp_path: Path,
) -> None:
    config_dir, data_dir, starts = counter_dirs(tmp_path)
    arguments = json.dumps({"x": "y" * 70_000})
    with app_running(config_dir, data_dir):
        (server,) = started(starts)
        done = await diana_here_async(
            config_dir, data_dir, "call", "counter_bump", "--args", arguments
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr.startswith("diana: the call's arguments are ")
        assert "past the 65,536" in done.stderr and done.stderr.count("\n") == 1
        after = await diana_here_async(config_dir, data_dir, "call", "counter_bump")
        assert bumped(after.stdout) == (1, server)  # the refused call did not count
        assert started(starts) == [server]
