"""How `diana` starts. A command that will connect MCP servers starts their processes before
it imports the MCP SDK and the core, and its connections speak to those very processes: the
real SDK over the pipes of a process started early. A server that cannot start, or a command
that is no server, fails as it always did, and nothing started early outlives the command.
What diana sets in its environment for itself alone is not handed to what it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.system import os_processes, processes

from .commands import diana, diana_args

pytestmark = pytest.mark.processes
FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = str(FIXTURES / "mcp_fixture.py")
SPAWNING = str(FIXTURES / "spawning_server.py")
# A server command that writes its pid to a file, then becomes the fixture server.
COUNTING = """
import os, sys
with open(sys.argv[1], "a") as starts:
    starts.write(f"{os.getpid()}\\n")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""
# Runs one `diana` command in this interpreter, noting in order each process it starts, the
# moment it imports the MCP SDK and each package's entry points it reads (audit events:
# nothing of diana's is changed).
WATCHED = """
import json, sys
seen = []
def note(event, args):
    if event == "import" and args[0] == "mcp":
        seen.append(["import", "mcp"])
    elif event == "subprocess.Popen":
        seen.append(["start", [str(part) for part in args[1]]])
    elif event == "open" and str(args[0]).endswith("entry_points.txt"):
        seen.append(["entry points", str(args[0])])
sys.addaudithook(note)
from diana.tui.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "seen": seen}, out)
"""


def write_servers(config_dir: Path, servers: dict[str, object]) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


def counted_server(tmp_path: Path) -> tuple[dict[str, object], Path]:
    wrapper, starts = tmp_path / "counting.py", tmp_path / "starts.txt"
    wrapper.write_text(COUNTING)
    return {"command": sys.executable, "args": [str(wrapper), str(starts), FIXTURE]}, starts


def watched(
    tmp_path: Path, config_dir: Path, data_dir: Path, *args: str
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str], int]:
    """`diana ARGS` run under WATCHED: what it noted, how it ended, and its pid."""
    script, out = tmp_path / "watched.py", tmp_path / "watched.json"
    script.write_text(WATCHED)
    argv = diana_args(config_dir, data_dir, *args)
    process = subprocess.Popen(
        [sys.executable, str(script), str(out), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    stdout, stderr = process.communicate(timeout=120)
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert out.exists(), stderr
    return json.loads(out.read_text()), done, process.pid


def starts_of(seen: list[list[Any]], script: str) -> list[int]:
    """Where in ``seen`` a process running ``script`` was started."""
    return [
        i
        for i, (kind, argv) in enumerate(seen)
        if kind == "start" and any(part.endswith(script) for part in argv)
    ]


def carrying_marker_of(pid: int) -> list[int]:
    """Processes still running that were started by the diana process ``pid`` or by what it
    started (they carry its process-tree variable)."""
    marker = f"\0{processes.TREE_VARIABLE}={pid}-".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                carries = marker in b"\0" + environ.read()
        except OSError:
            continue
        if carries and os_processes.running(int(name)):
            found.append(int(name))
    return found


def test_a_call_starts_its_server_before_importing_the_mcp_sdk_and_talks_to_that_process(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server, "other": {"command": sys.executable}})
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"srv_pid": "allow"}}))
    noted, done, _pid = watched(tmp_path, config_dir, data_dir, "call", "srv_pid")
    assert noted["code"] == 0, done.stderr
    seen = noted["seen"]
    started = starts_of(seen, "counting.py")
    assert len(started) == 1, seen  # one process, started early, and no other
    assert started[0] < seen.index(["import", "mcp"]), seen
    # The answer came from that process: the pid it wrote at start is the one it reports.
    assert starts.read_text().split() == [done.stdout.strip()]
    assert len([what for kind, what in seen if kind == "start"]) == 1  # `other` was not


@pytest.mark.parametrize("command", [("tools",)])
def test_commands_that_connect_every_server_start_them_first(
    tmp_path: Path, config_dir: Path, data_dir: Path, command: tuple[str, ...]
) -> None:
    server, starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    noted, done, _pid = watched(tmp_path, config_dir, data_dir, *command)
    assert noted["code"] == 0, done.stderr
    started = starts_of(noted["seen"], "counting.py")
    assert len(started) == 1 and started[0] < noted["seen"].index(["import", "mcp"])
    assert len(starts.read_text().split()) == 1


def test_a_command_a_running_app_answers_starts_no_server_early(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """With a diana-tui holding its lock on the data dir, `diana tools` leaves the servers to
    the app: nothing is started before the SDK is imported."""
    import fcntl

    from diana.core.shared.applock import LOCKS_DIR

    server, _starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    (data_dir / LOCKS_DIR).mkdir(parents=True)
    with open(data_dir / LOCKS_DIR / "1-feed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held, as a running app holds its own
        noted, _done, _pid = watched(tmp_path, config_dir, data_dir, "tools")
    started = starts_of(noted["seen"], "counting.py")
    importing = (
        noted["seen"].index(["import", "mcp"]) if ["import", "mcp"] in noted["seen"] else None
    )
    assert not [at for at in started if importing is None or at < importing], noted["seen"]


# Each as `diana call` has always said it (a server that cannot start; commands that are not
# servers: one that prints and exits, one that prints and stays).
NOT_SERVERS = {
    "gone": (
        {"command": "no-such-mcp-command-xyz"},
        'command not found: "no-such-mcp-command-xyz" — install it or fix "command" in '
        "mcp-servers.json",
    ),
    "nul": ({"command": "py\u0000thon"}, "ValueError: embedded null byte"),
    "chatty": (
        {
            "command": sys.executable,
            "args": ["-c", "import sys; print('hello, not a server'); sys.stderr.write('bye')"],
        },
        "process exited with code 0 before the MCP handshake finished; last stderr line: bye",
    ),
    "talker": (
        {
            "command": sys.executable,
            "args": ["-c", "import time; print('hi there', flush=True); time.sleep(60)"],
            "timeout": 2,
        },
        "the server's stdout is not JSON-RPC: first offending line: hi there",
    ),
}


@pytest.mark.parametrize("name", list(NOT_SERVERS))
def test_a_server_that_cannot_start_or_is_no_server_fails_as_it_did(
    tmp_path: Path, config_dir: Path, data_dir: Path, name: str
) -> None:
    entry, reason = NOT_SERVERS[name]
    write_servers(config_dir, {name: entry})
    noted, done, pid = watched(tmp_path, config_dir, data_dir, "call", f"{name}_x")
    assert (noted["code"], done.stdout) == (1, ""), done.stderr
    assert done.stderr == (
        f"diana: {name}_x would come from MCP server {name}, which is not ready (error): "
        f"{reason}; retrying in 1 s\n"
    )
    assert carrying_marker_of(pid) == []


@pytest.mark.skipif(not processes.CONTAINED, reason="containment needs Linux and /proc")
def test_a_server_started_early_for_a_command_that_then_fails_leaves_nothing_behind(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """The server (and the sleeper it starts in a session of its own) was started before the
    runtime found the settings unreadable: the command fails as it did, and ends them all."""
    pids = tmp_path / "pids.txt"
    server = {"command": sys.executable, "args": [SPAWNING, "--pids", str(pids), "--how", "setsid"]}
    write_servers(config_dir, {"spawning": server})
    (config_dir / "settings.json").write_text("{not json")
    noted, done, pid = watched(tmp_path, config_dir, data_dir, "call", "spawning_echo")
    assert noted["code"] == 2 and done.stderr.startswith("diana: config error in "), done.stderr
    assert len(starts_of(noted["seen"], SPAWNING)) == 1  # it was started
    assert carrying_marker_of(pid) == []


@pytest.mark.skipif(not processes.CONTAINED, reason="containment needs Linux and /proc")
def test_a_server_started_early_and_used_ends_with_the_command_with_all_it_started(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    pids = tmp_path / "pids.txt"
    server = {"command": sys.executable, "args": [SPAWNING, "--pids", str(pids), "--how", "setsid"]}
    write_servers(config_dir, {"spawning": server})
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"spawning_echo": "allow"}}))
    args = ("call", "spawning_echo", "--args", '{"text": "hi"}')
    noted, done, pid = watched(tmp_path, config_dir, data_dir, *args)
    assert (noted["code"], done.stdout) == (0, "hi\n"), done.stderr
    assert len(starts_of(noted["seen"], SPAWNING)) == 1
    sleepers = [int(line) for line in pids.read_text().split()]
    assert len(sleepers) == 1 and not os_processes.running(sleepers[0])
    assert carrying_marker_of(pid) == []


def test_a_command_reads_no_installed_packages_entry_points(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    """Looking for pydantic plugins would read every installed package's metadata."""
    server, _starts = counted_server(tmp_path)
    write_servers(config_dir, {"srv": server})
    for args in (("call", "get_current_time"), ("call", "srv_echo", "--args", '{"text": "a"}')):
        noted, done, _pid = watched(tmp_path, config_dir, data_dir, *args)
        assert noted["code"] == 0, done.stderr
        assert [what for kind, what in noted["seen"] if kind == "entry points"] == [], args


# Runs one `diana` command in this interpreter, then says which commands' modules it imported
# (tui/cli/ask.py is every command's: it asks a person what a server asks).
MODULES = """
import json, sys
from diana.tui.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
subjects = ("tools", "log", "servers", "policy", "proposals")
imported = [name for name in subjects if f"diana.tui.cli.{name}" in sys.modules]
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "imported": imported}, out)
"""


@pytest.mark.parametrize(
    ("args", "code", "module"),
    [
        (("proposals",), 0, "proposals"),
        (("call", "get_current_time"), 0, "tools"),
        (("call", "--help"), 0, "tools"),
        (("log",), 0, "log"),
        (("policy",), 0, "policy"),
        (("servers",), 0, "servers"),
        (("--help",), 0, None),
        (("nosuch",), 2, None),
    ],
)
def test_a_command_imports_its_own_module_and_no_other_commands(
    tmp_path: Path,
    config_dir: Path,
    data_dir: Path,
    args: tuple[str, ...],
    code: int,
    module: str | None,
) -> None:
    script, out = tmp_path / "modules.py", tmp_path / "modules.json"
    script.write_text(MODULES)
    argv = diana_args(config_dir, data_dir, *args)
    done = subprocess.run(
        [sys.executable, str(script), str(out), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert out.exists(), done.stderr
    assert json.loads(out.read_text()) == {"code": code, "imported": [module] if module else []}


# A local tool that answers with what its process was given of pydantic's plugin switch.
PLUGIN_SWITCH = """
import os
def run(arguments):
    return {"switch": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}
"""


@pytest.mark.parametrize("given", [None, "", "some_plugin"])
def test_what_diana_sets_for_itself_is_not_handed_to_a_tool_and_a_persons_setting_is(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    (config_dir / "tools").mkdir()
    (config_dir / "tools" / "switch.py").write_text(PLUGIN_SWITCH)
    entry = {
        "name": "switch",
        "description": "pydantic's plugin switch as the tool's process sees it",
        "parameters": {"type": "object", "properties": {}},
        "script": "switch.py",
        "risk": "reversible",
    }
    (config_dir / "tools.json").write_text(json.dumps({"tools": [entry]}))
    if given is None:
        monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", given)
    done = diana(config_dir, data_dir, "call", "switch")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"switch": given}


# Runs one `diana` command in this interpreter and says, once it is over, whether the cyclic
# garbage collector was off while it started and on while the command ran.
COLLECTOR = """
import atexit, gc, runpy, sys
sys.argv = ["diana", *sys.argv[1:]]
import diana.tui
seen = {"starting": gc.isenabled()}
def said():
    print("collector", seen["starting"], gc.isenabled(), gc.get_freeze_count() > 0)
atexit.register(said)
runpy.run_module("diana.tui.cli", run_name="__main__")
"""


def test_the_collector_is_off_while_a_command_starts_and_on_while_it_runs(tmp_path: Path) -> None:
    """Start-up makes what the command keeps (modules, classes, schemas), not garbage: the
    collector waits until it is over (it took a fifth of a short command's time), then runs
    as usual for what the command does, so a long one (`diana serve`) never grows for want
    of it."""
    argv = diana_args(tmp_path / "config", tmp_path / "data", "proposals")
    done = subprocess.run(
        [sys.executable, "-c", COLLECTOR, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "collector False True True"
