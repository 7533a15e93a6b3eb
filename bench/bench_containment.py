"""Containment and hostile servers: how many processes are left running after each way diana
ends one, what a tools/list_changed flood costs diana, and what starting a child contained
costs.

Run from the repository root:  .venv/bin/python bench/bench_containment.py
Every figure is measured in this run; whatever is left running is killed before it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.config.mcp_servers import MCPServerConfig  # noqa: E402
from diana.core.mcp.connection import ServerConnection  # noqa: E402
from diana.core.mcp.info import ServerStatus  # noqa: E402
from diana.core.system import os_processes, processes  # noqa: E402
from diana.core.system.clock import SystemClock  # noqa: E402
from diana.core.system.telemetry import StructuredLog  # noqa: E402
from diana.core.tools.code import execute_code  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SPAWNING = str(FIXTURES / "spawning_server.py")
ABUSIVE = str(FIXTURES / "abusive_server.py")
FLOOD_SECONDS = 10.0
SPAWNS = 60
seen: set[int] = set()  # every process a scenario started, to count and then clean up


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110 - another process
        await asyncio.sleep(0.02)


def connection(tmp: Path, how: str, *extra: str, **options: float) -> ServerConnection:
    timeout = options.pop("timeout", 10)
    config = MCPServerConfig(
        name="spawning",
        command=sys.executable,
        args=[SPAWNING, "--pids", str(tmp / "sleepers"), "--how", how, *extra],
        timeout=timeout,
    )

    def note(c: ServerConnection) -> None:
        if c.state.pid is not None:
            seen.add(c.state.pid)

    return ServerConnection(config, on_change=note, **options)


async def left_after(tmp: Path, scenario: Callable[[Path], Awaitable[None]]) -> int:
    before = set(seen)
    await scenario(tmp)
    mine = (seen - before) | set(pids_in(tmp / "sleepers"))
    await asyncio.sleep(0.5)  # what is being killed has time to go
    return sum(os_processes.running(pid) for pid in mine | set(pids_in(tmp / "sleepers")))


async def stopped(tmp: Path, how: str) -> None:
    c = connection(tmp, how, backoff_start=600)
    c.start()
    await c.wait_first_attempt()
    await c.stop()


async def failed_attempts(tmp: Path) -> None:
    c = connection(tmp, "setsid", "--never-answer", timeout=1, backoff_start=0.05)
    c.start()
    await until(lambda: len(pids_in(tmp / "sleepers")) >= 5)
    await c.stop()


async def hung(tmp: Path) -> None:
    c = connection(tmp, "setsid", health_interval=0.2, probe_timeout=1, backoff_start=600)
    c.start()
    await c.wait_first_attempt()
    assert c.state.pid is not None
    os.kill(c.state.pid, signal.SIGSTOP)
    await until(lambda: c.state.status is ServerStatus.ERROR)
    await c.stop()


async def stopped_in_handshake(tmp: Path) -> None:
    c = connection(tmp, "double-fork", "--never-answer", timeout=2, backoff_start=600)
    c.start()
    await c.wait_first_attempt()
    c.reconnect()
    await until(lambda: len(pids_in(tmp / "sleepers")) == 2)
    await c.stop()


async def code_timeout(tmp: Path, escape: str) -> None:
    code = {
        "setsid": f"setsid sleep 300 & echo $! >> {tmp / 'sleepers'}; sleep 300",
        "fork": (
            "python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n"
            f'    if os.fork() == 0:\n        open("{tmp / "sleepers"}", "a")'
            ".write(str(os.getpid()))\n        time.sleep(300)\n    os._exit(0)\n"
            "time.sleep(300)'"
        ),
    }[escape]
    try:
        await asyncio.wait_for(execute_code({"language": "shell", "code": code}), 1.5)
    except TimeoutError:
        pass


async def tool_after_diana_killed(tmp: Path) -> None:
    config, data = tmp / "config", tmp / "data"
    (config / "tools").mkdir(parents=True)
    (config / "mcp-servers.json").write_text("[]")
    (config / "settings.json").write_text(json.dumps({"obsidian": {"vault": str(tmp)}}))
    started = tmp / "started"
    (config / "tools" / "slow.py").write_text(
        "import os, time\ndef run(arguments):\n"
        f"    open({str(tmp / 'sleepers')!r}, 'a').write(str(os.getpid()))\n"
        f"    open({str(started)!r}, 'w').write('x')\n    time.sleep(300)\n"
    )
    entry = {"name": "slow", "description": "Slow.", "script": "slow.py"}
    (config / "tools.json").write_text(json.dumps({"tools": [entry]}))
    argv = [sys.executable, "-m", "diana.tui.cli"]
    argv += ["--config-dir", str(config), "--data-dir", str(data)]

    def approve() -> subprocess.Popen[bytes]:
        held = subprocess.run([*argv, "call", "slow"], capture_output=True, text=True, cwd=ROOT)
        return subprocess.Popen(
            [*argv, "approve", held.stdout.strip()],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    approving = await asyncio.to_thread(approve)
    await until(started.exists)
    approving.kill()
    await asyncio.to_thread(approving.wait)


async def flood(tmp: Path) -> tuple[float, int, int]:
    listings, log_file = tmp / "listings", tmp / "diana.jsonl"
    log = StructuredLog(log_file, SystemClock())
    config = MCPServerConfig(
        name="flood",
        command=sys.executable,
        args=[ABUSIVE, "list-changed-flood", "--count", str(listings)],
    )
    c = ServerConnection(config, log=log, backoff_start=600)
    c.start()
    try:
        await c.wait_first_attempt()
        listed = len(listings.read_text().split())
        logged = log_file.stat().st_size
        used = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(FLOOD_SECONDS)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)
        relists = len(listings.read_text().split()) - listed
        log_bytes = log_file.stat().st_size - logged
    finally:
        await c.stop()
        log.close()
    return cpu / FLOOD_SECONDS, relists, log_bytes


async def spawn_cost() -> None:
    """Start and reap /bin/true, with and without the preexec that contains it, in a process
    whose heap is the size of the app's (a fork copies its page tables)."""
    if not hasattr(processes, "_in_child") or not processes.CONTAINED:
        print("spawn cost: (no containment in this tree)")
        return
    ballast = bytearray(200 * 2**20)  # touched below, so it is resident
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1

    async def once(preexec: bool) -> float:
        start = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            "/bin/true",
            start_new_session=True,
            preexec_fn=processes._in_child if preexec else None,
        )
        await process.wait()
        return time.perf_counter() - start

    async def contained() -> float:
        start = time.perf_counter()
        tree = await processes.spawn(["/bin/true"])
        await tree.process.wait()
        await tree.close()
        return time.perf_counter() - start

    plain, pre, whole = [], [], []
    for _ in range(SPAWNS):
        plain.append(await once(False))
        pre.append(await once(True))
        whole.append(await contained())
    p, q, w = (statistics.median(x) * 1000 for x in (plain, pre, whole))
    print(
        f"start and reap /bin/true with a 200 MiB heap, median of {SPAWNS}: plain {p:.2f} ms; "
        f"with the containing preexec {q:.2f} ms ({q / p:.2f}x); contained spawn + "
        f"freeze-and-kill scan + close {w:.2f} ms ({w / p:.2f}x)"
    )


def kill_leftovers(root: Path) -> None:
    for tmp in root.iterdir():
        seen.update(pids_in(tmp / "sleepers") if tmp.is_dir() else [])
    for pid in seen:
        if os_processes.running(pid):
            os.kill(pid, signal.SIGKILL)


async def main() -> None:
    print(f"containment: {'on' if getattr(processes, 'CONTAINED', False) else 'off'}")
    scenarios: list[tuple[str, Callable[[Path], Awaitable[None]]]] = [
        ("MCP server stopped; its grandchild called setsid", lambda t: stopped(t, "setsid")),
        ("MCP server stopped; its grandchild double-forked", lambda t: stopped(t, "double-fork")),
        ("5 failed connect attempts, a setsid grandchild each", failed_attempts),
        ("hung server declared down, diana stops at once", hung),
        ("stopped during a handshake after a reconnect", stopped_in_handshake),
        ("code_execution timeout; a setsid sleeper", lambda t: code_timeout(t, "setsid")),
        ("code_execution timeout; a double-forked sleeper", lambda t: code_timeout(t, "fork")),
        ("local tool; the approving diana killed (SIGKILL)", tool_after_diana_killed),
    ]
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        try:
            for index, (what, scenario) in enumerate(scenarios):
                tmp = root / str(index)
                tmp.mkdir()
                count = await left_after(tmp, scenario)
                print(f"left running: {count}  — {what}")
            cpu, relists, log_bytes = await flood(root)
            print(
                f"tools/list_changed flood for {FLOOD_SECONDS:g} s: diana used "
                f"{cpu:.0%} of a core, listed the tools {relists} times, wrote "
                f"{log_bytes:,} bytes of log"
            )
        finally:
            kill_leftovers(root)
    await spawn_cost()


if __name__ == "__main__":
    asyncio.run(main())
