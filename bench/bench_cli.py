"""`diana` commands with four MCP servers configured, one of which never answers.

Each figure is a whole command, from starting the process to its exit, measured from
outside; the median of RUNS runs, the commands taking turns. Goals:

- a built-in call and an unknown tool each take at most half as long as `python -c "import
  mcp"` (importing the MCP SDK alone), and `diana proposals` (the read profile: the database
  and the proposals, core/profiles.py) at most 0.35 times as long;
- a call to one server takes at most 1.2 times as long with four servers configured as with
  only that server configured;
- with diana-tui running on the same dirs (its runtime without its screen, as the tests run
  it: tests/fixtures/live_app.py), the commands it answers (`tools`, `tools --refresh`,
  `health`, `resources`, `prompts`, `read`, `prompt`) each take at most 1.5 times as long as
  `diana servers` (which reads what the app shares).
- `diana call` to PyPI's mcp-server-time with nothing cached (a new data dir each run) takes
  at most as long as the MCP Inspector's CLI calling the same tool of the same server
  (`npx -y @modelcontextprotocol/inspector --cli mcp-server-time --method tools/call ...`),
  the two taking turns, median of PEER_RUNS; `diana --version` at most 0.1 s. Without npx
  the comparison is left out, and without mcp-server-time the fixture server stands in,
  each saying so.

The tool cache is filled first (`diana tools --refresh`, once per config dir), as any
diana process connecting to the servers would. Python writes and uses its bytecode caches
here (PYTHONDONTWRITEBYTECODE is dropped), as for an installed diana-tui; one run of each
command before the measured ones is not counted.

Run from the repository root:  .venv/bin/python bench/bench_cli.py
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = str(ROOT / "tests" / "fixtures" / "mcp_fixture.py")
RUNS = 7
MUTE_TIMEOUT = 5  # seconds the never-answering server is given to connect


def servers(names: list[str]) -> dict[str, object]:
    entries: dict[str, object] = {
        name: {"command": sys.executable, "args": [FIXTURE]} for name in names
    }
    if "mute" in names:
        entries["mute"] = {
            "command": sys.executable,
            "args": [FIXTURE, "--never-answer"],
            "timeout": MUTE_TIMEOUT,
        }
    return {"mcpServers": entries}


def diana(config: Path, data: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "diana.tui.cli",
        "--config-dir",
        str(config),
        "--data-dir",
        str(data),
        *args,
    ]


def timed(argv: list[str], env: dict[str, str], expect: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - start
    if done.returncode != expect:
        raise SystemExit(f"{argv[5:]} exited {done.returncode}, not {expect}:\n{done.stderr}")
    return took


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for label, names in (("four", ["alpha", "beta", "gamma", "mute"]), ("one", ["alpha"])):
            config, data = Path(tmp, label, "config"), Path(tmp, label, "data")
            config.mkdir(parents=True)
            (config / "mcp-servers.json").write_text(json.dumps(servers(names)))
            dirs[label] = (config, data)
            timed(diana(config, data, "tools", "--refresh"), env, 0)
        four, one = dirs["four"], dirs["one"]
        echo = ("call", "alpha_echo", "--args", '{"text": "hello"}')
        commands: dict[str, tuple[list[str], int]] = {
            "python -c 'import mcp'": ([sys.executable, "-c", "import mcp"], 0),
            "built-in call": (diana(*four, "call", "get_current_time"), 0),
            "diana proposals": (diana(*four, "proposals"), 0),
            "unknown tool": (diana(*four, "call", "no_such_tool"), 2),
            "server call, 4 configured": (diana(*four, *echo), 0),
            "server call, 1 configured": (diana(*one, *echo), 0),
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(RUNS + 1):
            for name, (argv, expect) in commands.items():
                took = timed(argv, env, expect)
                if round_:  # the first round warms up
                    samples[name].append(took)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"median of {RUNS} runs, seconds (load average {os.getloadavg()[0]:.2f})")
    for name, value in medians.items():
        print(f"  {name:28} {value:6.3f}")
    mcp = medians["python -c 'import mcp'"]
    print("ratios (goal):")
    for name, goal in (("built-in call", 0.5), ("diana proposals", 0.35), ("unknown tool", 0.5)):
        show(f"{name} / import mcp", medians[name] / mcp, goal)
    many, single = medians["server call, 4 configured"], medians["server call, 1 configured"]
    show("server call, 4 / 1 configured", many / single, 1.2)
    bench_with_app(env)


# -- with diana-tui running: the commands it answers, against `diana servers` --------------

LIVE_APP = str(ROOT / "tests" / "fixtures" / "live_app.py")
ANSWERED_GOAL = 1.5
# Each command the app answers, and its exit code with `mute` among the servers (it is never
# ready: listings and health say so, and exit 1).
ANSWERED: dict[str, tuple[tuple[str, ...], int]] = {
    "diana servers": (("servers",), 1),
    "diana tools": (("tools",), 0),
    "diana tools --refresh": (("tools", "--refresh"), 0),
    "diana health": (("health",), 1),
    "diana resources": (("resources",), 1),
    "diana prompts": (("prompts",), 1),
    "diana read": (("read", "alpha", "fixture://greeting"), 0),
    "diana prompt": (("prompt", "alpha", "hello"), 0),
}
APP_SAYS = "runs on this data dir"  # the first line of an answer from the app


@contextlib.contextmanager
def app_running(config: Path, data: Path, env: dict[str, str]) -> Iterator[None]:
    """The app on these dirs, once its servers have made their first attempt and `diana`
    sees it; stopped (SIGTERM) at the end."""
    app = subprocess.Popen(
        [sys.executable, LIVE_APP, str(config), str(data)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert app.stdout is not None
        if app.stdout.readline() != "ready\n":
            raise SystemExit("the app did not start")
        for _ in range(100):
            shown = subprocess.run(
                diana(config, data, "servers"), env=env, cwd=ROOT, capture_output=True, text=True
            )
            if APP_SAYS in shown.stdout.split("\n")[0]:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("`diana servers` never saw the app")
        yield
    finally:
        app.terminate()
        app.wait(timeout=60)


def bench_with_app(env: dict[str, str]) -> None:
    names = ["alpha", "beta", "gamma", "mute"]
    with tempfile.TemporaryDirectory() as tmp:
        config, data = Path(tmp, "config"), Path(tmp, "data")
        config.mkdir()
        (config / "mcp-servers.json").write_text(json.dumps(servers(names)))
        with app_running(config, data, env):
            for name, (args, expect) in ANSWERED.items():  # each answered by the app
                argv = diana(config, data, *args)
                done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
                first = (done.stdout.partition("\n")[0], done.stderr.partition("\n")[0])
                if done.returncode != expect or not any(APP_SAYS in line for line in first):
                    raise SystemExit(f"{name} was not answered by the app:\n{done.stderr}")
            samples: dict[str, list[float]] = {name: [] for name in ANSWERED}
            for round_ in range(RUNS + 1):
                for name, (args, expect) in ANSWERED.items():
                    took = timed(diana(config, data, *args), env, expect)
                    if round_:
                        samples[name].append(took)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"with diana-tui running, median of {RUNS} runs, seconds")
    for name, value in medians.items():
        print(f"  {name:28} {value:6.3f}")
    print("ratios to `diana servers` with the app running (goal):")
    base = medians["diana servers"]
    for name, value in medians.items():
        if name != "diana servers":
            show(f"{name} / diana servers", value / base, ANSWERED_GOAL)


# -- one call to a server, nothing cached, against the MCP Inspector's CLI ---------------------

PEER_RUNS = 11
INSPECTOR = "@modelcontextprotocol/inspector"
VERSION_GOAL = 0.1  # seconds


def time_server() -> tuple[list[str], str, dict[str, str]] | None:
    """PyPI's mcp-server-time (installed with diana-tui): its command, a tool, its arguments."""
    beside = Path(sys.executable).parent / "mcp-server-time"
    found = str(beside) if beside.exists() else shutil.which("mcp-server-time")
    return ([found], "get_current_time", {"timezone": "UTC"}) if found else None


def peer() -> None:
    """`diana call` on a server, with a new data dir each time (no tool cache), against the
    Inspector's CLI calling the same tool of the same server; and `diana --version`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    server = time_server()
    if server is None:
        print("mcp-server-time is not installed: the fixture server stands in for it")
        server = ([sys.executable, FIXTURE], "echo", {"text": "hello"})
    command, tool, arguments = server
    npx = shutil.which("npx")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "config")
        config.mkdir()
        entry = {"command": command[0], "args": command[1:]}
        (config / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"srv": entry}}))
        runs = iter(range(1_000_000))

        def diana_call() -> list[str]:
            data = Path(tmp, f"data-{next(runs)}")  # nothing cached
            return diana(config, data, "call", f"srv_{tool}", "--args", json.dumps(arguments))

        call = [
            *("--cli", *command, "--method", "tools/call", "--tool-name", tool),
            *(part for k, v in arguments.items() for part in ("--tool-arg", f"{k}={v}")),
        ]
        commands: dict[str, Callable[[], list[str]]] = {
            "diana --version": lambda: [sys.executable, "-m", "diana.tui.cli", "--version"],
            "diana call, nothing cached": diana_call,
        }
        if npx:
            commands["Inspector CLI call"] = lambda: [npx, "-y", INSPECTOR, *call]
            installed = inspector_program(npx, env)  # for comparison: without npx's look-up
            if installed:
                commands["Inspector CLI, no npx"] = lambda: [installed, *call]
        else:
            print("npx is not installed: no Inspector CLI to compare with")
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for round_ in range(PEER_RUNS + 1):
            for name, argv in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                took = timed(argv(), env, 0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if round_:  # the first round warms up (npx fetches the Inspector once)
                    samples[name].append(took)
                    used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                    cpu[name].append(used)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"server {' '.join(command)}, tool {tool}")
    print(f"median of {PEER_RUNS} runs, seconds (load average {os.getloadavg()[0]:.2f})")
    # CPU time (the command's and its server's): what a busy machine makes wall time of.
    print(f"  {'':28} {'wall':>6} {'CPU':>6}")
    for name, value in medians.items():
        print(f"  {name:28} {value:6.3f} {statistics.median(cpu[name]):6.3f}")
    print("goals:")
    version = medians["diana --version"]
    met = "met" if version <= VERSION_GOAL else "NOT met"
    print(f"  diana --version: {version:.3f} s (goal <= {VERSION_GOAL} s) {met}")
    if npx:
        took = medians["diana call, nothing cached"]
        show("diana call / Inspector CLI call", took / medians["Inspector CLI call"], 1.0)
        if "Inspector CLI, no npx" in medians:
            ratio = took / medians["Inspector CLI, no npx"]
            print(f"  (diana call / Inspector CLI run without npx: {ratio:.2f}x)")


def inspector_program(npx: str, env: dict[str, str]) -> str | None:
    """The Inspector's own program, as npx installed it (fetched now if it is not)."""
    found = subprocess.run(
        [npx, "-y", "-p", INSPECTOR, "sh", "-c", "command -v mcp-inspector"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return found.stdout.strip() or None if found.returncode == 0 else None


def show(what: str, ratio: float, goal: float) -> None:
    print(f"  {what}: {ratio:.2f}x (goal <= {goal}x) {'met' if ratio <= goal else 'NOT met'}")


if __name__ == "__main__":
    main()
    peer()
