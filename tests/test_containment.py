"""Every process diana starts, and everything those start, ends with diana or with its call.

Real processes that try to get away — a grandchild that calls setsid, a daemon that forks
twice, a tree that keeps forking — against MCP servers, code_execution and local tools."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diana.core.config.mcp_servers import MCPServerConfig
from diana.core.mcp.connection import ServerConnection
from diana.core.mcp.info import ServerStatus
from diana.core.system import os_processes, processes

from .commands import diana, start_diana

pytestmark = pytest.mark.processes  # every test here starts a process

FIXTURES = Path(__file__).parent / "fixtures"
SPAWNING = str(FIXTURES / "spawning_server.py")
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not processes.CONTAINED, reason="containment needs Linux and /proc"),
]


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def eventually(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for state no event announces (another process's), checking now and then."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the state is another process's
            await asyncio.sleep(0.02)


def spawning(pids: Path, how: str, *extra: str, **fields: Any) -> MCPServerConfig:
    return MCPServerConfig(
        name="spawning",
        command=sys.executable,
        args=[SPAWNING, "--pids", str(pids), "--how", how, *extra],
        **fields,
    )


def wait_until(condition: Callable[[], bool], within: float = 10.0) -> bool:
    """For synchronous tests: wait for another process's state."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- MCP servers -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
async def test_what_a_server_started_ends_when_it_is_stopped_or_reconnected(
    tmp_path: Path, how: str
) -> None:
    pids = tmp_path / "sleepers"
    connection = ServerConnection(spawning(pids, how), backoff_start=600)
    connection.start()
    try:
        await connection.wait_first_attempt()
        assert connection.ready, connection.state.last_error
        first_server = connection.state.pid
        (first,) = pids_in(pids)
        assert os_processes.running(first)
        connection.reconnect()
        await connection.wait_attempt_after_reconnect()
        assert connection.ready, connection.state.last_error
        (_, second) = pids_in(pids)
        assert first_server is not None and not os_processes.running(first_server)
        assert not os_processes.running(first), (
            f"the {how} sleeper of the first connection outlived it"
        )
        assert os_processes.running(second)
    finally:
        await connection.stop()
    assert not os_processes.running(second), f"the {how} sleeper outlived the stopped server"


async def test_every_failed_connect_attempt_ends_its_whole_process_tree(tmp_path: Path) -> None:
    # The server never answers the handshake, so every attempt fails and is retried.
    pids = tmp_path / "sleepers"
    config = spawning(pids, "setsid", "--never-answer", timeout=1)
    connection = ServerConnection(config, backoff_start=0.05)
    connection.start()
    try:
        await eventually(lambda: len(pids_in(pids)) >= 3, within=30)
        # Attempts run one after another: at most the current one's sleeper is alive.
        assert sum(os_processes.running(pid) for pid in pids_in(pids)) <= 1
    finally:
        await connection.stop()
    assert connection.state.last_error == "did not finish the MCP handshake within 1 s"
    assert [pid for pid in pids_in(pids) if os_processes.running(pid)] == []


async def test_a_server_stopped_in_the_middle_of_its_handshake_leaves_nothing(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "sleepers"
    connection = ServerConnection(
        spawning(pids, "double-fork", "--never-answer", timeout=2), backoff_start=600
    )
    connection.start()
    try:
        await connection.wait_first_attempt()  # the handshake timed out
        connection.reconnect()
        await eventually(lambda: len(pids_in(pids)) == 2)
        server = connection.state.pid
        assert server is not None
    finally:
        # The stop cancels the second handshake, whose own 2 s timeout then falls due while
        # the server is being stopped: the stop is cut short, and must still end it all.
        await connection.stop()
    assert not os_processes.running(server)
    assert [pid for pid in pids_in(pids) if os_processes.running(pid)] == []


async def test_a_hung_server_declared_down_is_killed_even_if_diana_stops_at_once(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "sleepers"
    connection = ServerConnection(
        spawning(pids, "setsid", timeout=10),
        health_interval=0.2,
        probe_timeout=1,
        backoff_start=600,
    )
    connection.start()
    try:
        await connection.wait_first_attempt()
        assert connection.ready, connection.state.last_error
        server = connection.state.pid
        assert server is not None
        os.kill(server, signal.SIGSTOP)  # alive, but answers nothing
        await eventually(lambda: connection.state.status is ServerStatus.ERROR)
        assert connection.state.last_error == (
            "stopped answering: a health check got no reply within 1 s"
        )
    finally:
        await connection.stop()  # diana quits while the hung server is being dealt with
    assert not os_processes.running(server), "the hung server was left running"
    assert [pid for pid in pids_in(pids) if os_processes.running(pid)] == []


# -- code_execution and local tools, through the command line ----------------------------------

ESCAPES = {
    # A shell's background job that leaves its session, holding the output open.
    "setsid": "setsid sleep 300 & echo $! > {pidfile}; sleep 300",
    # A daemon: fork, setsid, fork again, the middle one exits; the sleeper is re-parented.
    "double-fork": (
        "python3 -c 'import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        '        open("{pidfile}", "w").write(str(os.getpid()))\n'
        "        time.sleep(300)\n"
        "    os._exit(0)\n"
        "time.sleep(300)'"
    ),
}


@pytest.mark.parametrize("how", list(ESCAPES))
def test_code_that_escapes_is_killed_at_its_timeout_without_a_traceback(
    config_dir: Path, data_dir: Path, tmp_path: Path, how: str
) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    settings["tools"] = {"timeouts": {"code_execution": 1}}
    (config_dir / "settings.json").write_text(json.dumps(settings))
    pidfile = tmp_path / "sleeper.pid"
    code = {"language": "shell", "code": ESCAPES[how].format(pidfile=pidfile)}
    held = diana(config_dir, data_dir, "call", "code_execution", "--args", json.dumps(code))
    assert held.returncode == 3, held.stderr
    done = diana(config_dir, data_dir, "approve", held.stdout.strip())
    assert done.returncode == 1
    assert "code_execution did not finish within 1 s" in done.stderr
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr
    (sleeper,) = pids_in(pidfile)
    assert wait_until(lambda: not os_processes.running(sleeper)), (
        f"the {how} sleeper outlived its call"
    )


TOOL_SCRIPTS = {
    # Starts a daemon, answers at once: the daemon must not outlive the call.
    "leaves_a_daemon.py": (
        "import os, subprocess, sys\n"
        "def run(arguments):\n"
        "    sleeper = subprocess.Popen(['sleep', '300'], start_new_session=True,\n"
        "                               stdout=sys.stderr)\n"
        "    open(arguments['pidfile'], 'w').write(str(sleeper.pid))\n"
        "    return 'started'\n"
    ),
    # Says it started, waits for a go, then has its effect.
    "slow_effect.py": (
        "import os, pathlib, time\n"
        "def run(arguments):\n"
        "    pathlib.Path(arguments['started']).write_text(str(os.getpid()))\n"
        "    while not pathlib.Path(arguments['go']).exists():\n"
        "        time.sleep(0.02)\n"
        "    pathlib.Path(arguments['effect']).write_text('done')\n"
        "    return 'done'\n"
    ),
}


def write_tools(config_dir: Path, *names: str) -> None:
    folder = config_dir / "tools"
    folder.mkdir(exist_ok=True)
    entries = []
    for name in names:
        (folder / f"{name}.py").write_text(TOOL_SCRIPTS[f"{name}.py"])
        entries.append({"name": name, "description": f"{name} for tests", "script": f"{name}.py"})
    (config_dir / "tools.json").write_text(json.dumps({"tools": entries}))


def test_what_a_local_tool_leaves_behind_ends_with_its_call(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_tools(config_dir, "leaves_a_daemon")
    pidfile = tmp_path / "daemon.pid"
    arguments = json.dumps({"pidfile": str(pidfile)})
    held = diana(config_dir, data_dir, "call", "leaves_a_daemon", "--args", arguments)
    assert held.returncode == 3, held.stderr
    done = diana(config_dir, data_dir, "approve", held.stdout.strip())
    assert done.returncode == 0, done.stderr
    assert "started" in done.stdout
    (daemon,) = pids_in(pidfile)
    assert wait_until(lambda: not os_processes.running(daemon)), "the daemon outlived the call"


def test_a_local_tool_dies_with_the_process_that_approved_it(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    write_tools(config_dir, "slow_effect")
    files = {name: str(tmp_path / name) for name in ("started", "go", "effect")}
    held = diana(config_dir, data_dir, "call", "slow_effect", "--args", json.dumps(files))
    assert held.returncode == 3, held.stderr
    approving = start_diana(config_dir, data_dir, "approve", held.stdout.strip())
    runner = 0
    try:
        assert wait_until(lambda: Path(files["started"]).exists() and approving.poll() is None)
        runner = int(Path(files["started"]).read_text())
        os.kill(approving.pid, signal.SIGKILL)
        approving.wait(timeout=10)
        assert wait_until(lambda: not os_processes.running(runner)), "the tool outlived diana"
        Path(files["go"]).write_text("go")
        assert not Path(files["effect"]).exists()
    finally:
        if runner and os_processes.running(runner):
            os.kill(runner, signal.SIGKILL)  # the code before the fix left it running
        approving.kill()
        approving.communicate(timeout=10)
    shown = json.loads(diana(config_dir, data_dir, "show", held.stdout.strip(), "--json").stdout)
    assert shown["status"] == "interrupted"


# -- the module itself -------------------------------------------------------------------------

CHAIN = (
    "import os, time\n"
    "for _ in range(300):\n"  # a new process every 2 ms, each parent gone at once
    "    if os.fork():\n"
    "        os._exit(0)\n"
    "    time.sleep(0.002)\n"
    "time.sleep(300)\n"
)
WIDE = (
    "import os, time\n"
    "depth = kids = 0\n"
    "while True:\n"  # 3 children each, 3 levels deep: 40 processes, all forking meanwhile
    "    time.sleep(0.01)\n"
    "    if depth < 3 and kids < 3:\n"
    "        if os.fork() == 0:\n"
    "            depth, kids = depth + 1, 0\n"
    "        else:\n"
    "            kids += 1\n"
)


@pytest.mark.parametrize("program", [CHAIN, WIDE], ids=["chain", "wide"])
async def test_a_forking_tree_is_frozen_and_killed_whole(program: str) -> None:
    devnull = asyncio.subprocess.DEVNULL
    tree = await processes.spawn(
        [sys.executable, "-c", program], stdin=devnull, stdout=devnull, stderr=devnull
    )
    try:
        await eventually(lambda: len(tree.members()) > 10)
    finally:
        await tree.close()
    # Nothing of it is left: neither running, nor a zombie waiting to be collected.
    assert tree.members() == {}
