"""What a running app shares with `diana` (core/shared/live.py) is read back as untrusted: rows
damaged or written by hand are passed over with one warning, a row claiming an app that is not
there is not believed, and a flood of requests is carried out a few times, not once each.

The app here is its runtime in a process of its own (tests/fixtures/live_app.py), so a test can
pause it while requests pile up; the commands are the real `diana`: run in the test's process
(a process beside the app's) where what one says is tested, as subprocesses where several run at
once or one waits in the background."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from diana.core.shared.live import LOCKS_DIR
from diana.core.system.files import write_private

from .commands import diana, diana_here, start_diana
from .configs import COUNTING, starts_of
from .database import query
from .live_apps import NOW, app_running
from .scenarios import prepare_dirs
from .waits import until

pytestmark = pytest.mark.processes

# A server with no SDK: it starts in milliseconds, so the many commands here stay quick.
RAW = {
    "command": sys.executable,
    "args": [str(Path(__file__).parent / "fixtures" / "raw_mcp_server.py")],
}


def warnings_of(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The command's stderr, which must be whole lines from diana and never a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith("diana: ") for line in lines), done.stderr
    return lines


def test_a_flood_of_identical_requests_is_carried_out_once_and_each_is_answered(
    tmp_path: Path,
) -> None:
    """2,000 rows a script wrote and four `diana reconnect` at once, while the app is busy
    (paused): one reconnect answers them all."""
    wrapper, starts = tmp_path / "counting.py", tmp_path / "starts.txt"
    wrapper.write_text(COUNTING)  # each start of the server is a line in `starts`
    server = {"command": sys.executable, "args": [str(wrapper), str(starts), *RAW["args"]]}
    config_dir, data_dir = prepare_dirs(tmp_path, {"srv": server})
    with app_running(config_dir, data_dir) as app:
        assert starts_of(starts) == 1
        app.pause(data_dir)
        rows = [(app.app_id, "reconnect", "srv", NOW)] * 2000
        with sqlite3.connect(data_dir / "diana.db", timeout=30) as db:
            db.executemany(
                "INSERT INTO live_requests (app_id, kind, server, requested_at) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )
        commands = [start_diana(config_dir, data_dir, "reconnect", "srv") for _ in range(4)]
        until(lambda: query(data_dir, "SELECT count(*) FROM live_requests") == [(2004,)])
        app.resume()
        outputs = [command.communicate(timeout=60) for command in commands]
        for command, (out, err) in zip(commands, outputs, strict=True):
            assert command.returncode == 0, err
            said, reconnected = out.splitlines()
            assert said == f"{app.describe()} runs on this data dir: it reconnected its servers."
            assert reconnected.startswith("srv: ready, ")
        answered = query(data_dir, "SELECT finished_at, outcome FROM live_requests")
        assert len(answered) == 2000  # the commands' own rows are gone with their answers
        assert all(finished is not None for finished, _outcome in answered)
        (outcome,) = {outcome for _finished, outcome in answered}  # one outcome for all
        assert [s["name"] for s in json.loads(outcome)["servers"]] == ["srv"]
        assert starts_of(starts) == 2  # restarted once, for 2,004 requests


def test_requests_the_app_cannot_carry_out_are_answered_and_it_goes_on(tmp_path: Path) -> None:
    config_dir, data_dir = prepare_dirs(tmp_path, {"srv": RAW})
    hostile: list[tuple[Any, Any]] = [
        ("explode", "srv"),
        (b"\x00\xff", None),  # a kind that is not text
        ("reconnect", b"\xff\xfe"),  # a server that is not text
        ("reconnect", ""),
        ("reconnect", "x" * 100_000),
        ("reconnect", "nosuch"),
    ]
    with app_running(config_dir, data_dir) as app:
        with sqlite3.connect(data_dir / "diana.db", timeout=30) as db:
            db.executemany(
                "INSERT INTO live_requests (app_id, kind, server, requested_at) "
                "VALUES (?, ?, ?, ?)",
                [(app.app_id, kind, server, NOW) for kind, server in hostile],
            )
        waiting = "SELECT count(*) FROM live_requests WHERE finished_at IS NULL"
        until(lambda: query(data_dir, waiting) == [(0,)])
        outcomes = [json.loads(o) for (o,) in query(data_dir, "SELECT outcome FROM live_requests")]
        assert len(outcomes) == len(hostile)
        for outcome in outcomes:
            assert set(outcome) <= {"error", "unknown"} and 0 < len(outcome["error"]) < 400
        errors = sorted(outcome["error"] for outcome in outcomes)
        assert any("kind: Input should be 'reconnect'" in error for error in errors)
        assert any("at most 256 characters" in error for error in errors)
        assert any("no MCP server named nosuch" in error for error in errors)
        done = diana_here(config_dir, data_dir, "reconnect", "srv")  # and it goes on serving
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0].startswith(app.describe())


# Columns of the app's live_apps row, damaged one at a time; each leaves the row unbelieved.
DAMAGED_APP = [
    ("started_at", "not a date", "started_at: 'not a date' is not a date and time"),
    ("started_at", "2026-11-27T09:00:00", "started_at: Input should have timezone info"),
    ("servers_at", "soon", "servers_at: 'soon' is not a date and time"),
    ("servers_at", None, "it has not shared its servers"),
    ("pid", "abc", "pid: Input should be a valid integer"),
    ("pid", 4_000_000, "pid 4000000 is not the pid its app_id names"),
    ("config_dir", b"\x00", "config_dir: Input should be a valid string"),
    ("app_id", b"\x07", "app_id: is not text"),
]


def test_a_damaged_app_row_is_passed_over_with_one_warning(tmp_path: Path) -> None:
    """No servers are configured: what differs is only who answers, the app or the command."""
    config_dir, data_dir = prepare_dirs(tmp_path)
    with app_running(config_dir, data_dir) as app:
        (row,) = query(data_dir, "SELECT * FROM live_apps")
        for column, value, problem in DAMAGED_APP:
            query(data_dir, f"UPDATE live_apps SET {column} = ?", (value,))
            done = diana_here(config_dir, data_dir, "servers")
            (warning,) = warnings_of(done)
            assert warning.startswith("diana: warning: live_apps: "), warning
            assert problem in warning, (column, warning)
            assert done.stdout.startswith("No diana-tui runs on this data dir"), done.stdout
            assert done.returncode == 0
            query(data_dir, "DELETE FROM live_apps")  # put back as the app wrote it
            query(data_dir, f"INSERT INTO live_apps VALUES ({', '.join('?' * len(row))})", row)
        believed = diana_here(config_dir, data_dir, "servers")
        assert believed.stdout.startswith(f"{app.describe()} runs on this data dir")
        assert believed.stderr == ""


# A server's shared state, damaged: that server is left out, the others shown.
DAMAGED_SERVER = [
    ("not json", "diagnostics is not valid JSON"),
    ("[1, 2]", "diagnostics is not a JSON object"),
    (
        '{"name": "a"}',
        "transport: Field required; timeout: Field required; status: Field required (and 1 more)",
    ),
    ("tools", "tools: Input should be a valid list"),
    ("retry_at", "retry_at: 'soon' is not a date and time"),
    ("huge", "diagnostics is past 8,388,608 bytes"),
]


def test_a_damaged_server_row_is_left_out_with_one_warning(tmp_path: Path) -> None:
    config_dir, data_dir = prepare_dirs(tmp_path, {"a": RAW, "b": RAW})
    with app_running(config_dir, data_dir) as app:
        where = "WHERE app_id = ? AND position = 0"
        ((shared,),) = query(
            data_dir, f"SELECT diagnostics FROM live_servers {where}", (app.app_id,)
        )
        for damage, problem in DAMAGED_SERVER:
            text = {
                "tools": json.dumps({**json.loads(shared), "tools": "many"}),
                "retry_at": json.dumps({**json.loads(shared), "retry_at": "soon"}),
                "huge": json.dumps({**json.loads(shared), "logs": ["x" * (9 << 20)]}),
            }.get(damage, damage)
            query(data_dir, f"UPDATE live_servers SET diagnostics = ? {where}", (text, app.app_id))
            done = diana_here(config_dir, data_dir, "servers", "--json")
            (warning,) = warnings_of(done)
            assert warning == (
                f"diana: warning: live_servers: server 0 of {app.describe()} cannot be read "
                f"({problem}); left out"
            ), warning
            assert [s["name"] for s in json.loads(done.stdout)] == ["b"]
            assert done.returncode == 0

        # A newer row naming the app's lock by another path is not taken for the app.
        query(data_dir, f"UPDATE live_servers SET diagnostics = ? {where}", (shared, app.app_id))
        forged = (
            f"./{app.app_id}",
            app.pid,
            str(config_dir.resolve()),
            "2099-01-01T00:00:00+00:00",
        )
        query(
            data_dir,
            "INSERT INTO live_apps (app_id, pid, config_dir, started_at, servers_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (*forged, forged[-1]),
        )
        done = diana_here(config_dir, data_dir, "servers")
        (warning,) = warnings_of(done)
        assert f"app_id: './{app.app_id}' is not an app's id" in warning
        assert done.stdout.startswith(f"{app.describe()} runs on this data dir")
        assert done.stdout.splitlines()[2:] == [
            "a       ready   stdio      1",
            "b       ready   stdio      1",
        ]


OUTCOMES = [
    ("not json", "outcome is not valid JSON"),
    ('{"servers": "many"}', "servers: Input should be a valid list"),
    ('{"error": 5}', "error: Input should be a valid string"),
    ("{}", "has not exactly one of an error, servers and an answer"),
    (None, "outcome is not text"),
]


def test_an_outcome_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    """The app is paused while each request waits, and the outcome written by hand."""
    config_dir, data_dir = prepare_dirs(tmp_path, {"srv": RAW})
    with app_running(config_dir, data_dir) as app:
        for outcome, problem in OUTCOMES:
            app.pause(data_dir)
            command = start_diana(config_dir, data_dir, "reconnect", "srv")
            # The command asks the app (its request waits, the app being paused); one that
            # ends first did not take the app for running: say what it said.
            until(
                lambda command=command: (
                    bool(query(data_dir, "SELECT id FROM live_requests"))
                    or command.poll() is not None
                )
            )
            assert command.poll() is None, command.communicate(timeout=5)
            ((request_id,),) = query(data_dir, "SELECT id FROM live_requests")
            query(
                data_dir,
                "UPDATE live_requests SET picked_at = ?, finished_at = ?, outcome = ?",
                (NOW, NOW, outcome),
            )
            _out, err = command.communicate(timeout=60)
            app.resume()
            assert command.returncode == 2
            said = f"the outcome {app.describe()} wrote for request {request_id} cannot be read"
            assert err.startswith(f"diana: {said} (live_requests.outcome: {problem}"), err
            assert err.count("\n") == 1
            assert query(data_dir, "SELECT count(*) FROM live_requests") == [(0,)]


@contextmanager
def lock_held(path: Path, content: dict[str, Any]) -> Iterator[int]:
    """The lock file at ``path``, with ``content``, held by another process: its pid. Made
    private, as diana makes its own (one others could read would be tightened, and said)."""
    write_private(path, json.dumps(content))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("forgery", ["a dead pid", "a pid not holding the lock"])
def test_a_forged_app_row_is_not_believed(
    tmp_path: Path, config_dir: Path, data_dir: Path, forgery: str
) -> None:
    """A row naming a lock that is held, but not by the process the row names: the commands
    answer from their own servers at once, and say why they passed it over."""
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"srv": RAW}}))
    assert diana_here(config_dir, data_dir, "proposals").returncode == 0  # makes the database
    pid = dead_pid() if forgery == "a dead pid" else os.getpid()
    app_id = f"{pid}-0123abcd"
    said = {"app_id": app_id, "pid": pid, "data_dir": str(data_dir.resolve())}
    with lock_held(data_dir / LOCKS_DIR / f"{app_id}.lock", said) as holder:
        query(
            data_dir,
            "INSERT INTO live_apps (app_id, pid, config_dir, started_at, servers_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (app_id, pid, str(config_dir.resolve()), NOW, NOW),
        )
        why = (
            f"its pid {pid} is not running"
            if forgery == "a dead pid"
            else f"its lock is held by pid {holder}, not by its pid {pid}"
        )
        warning = (
            f"diana: warning: live_apps: app {app_id} is not taken for a running diana-tui: {why}"
        )
        listed = diana(config_dir, data_dir, "servers")
        assert warnings_of(listed) == [warning]
        assert listed.stdout.splitlines()[0].startswith("No diana-tui runs on this data dir")
        assert "srv" in listed.stdout and listed.returncode == 0
        reconnected = diana(config_dir, data_dir, "reconnect", "srv")
        assert warnings_of(reconnected) == [warning]
        assert reconnected.returncode == 0
        assert reconnected.stdout.splitlines()[0] == (
            "No diana-tui runs on this data dir: connected for this command only."
        )
        assert reconnected.stdout.splitlines()[1].startswith("srv: ready, ")
