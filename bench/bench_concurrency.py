"""Concurrency on one data dir: (a) decisions per second with 8 processes deciding at once,
(b) execution-log rows per second landed while the app is open and several processes call.

Run from the repository root:  .venv/bin/python bench/bench_concurrency.py
Every figure is measured in this run; nothing is asserted. Errors are counted and shown.

(a) N proposals for a destructive tool of tests/fixtures/append_server.py (shared over HTTP,
so no process pays for starting a server) are made first; then 8 processes, each with its own
Runtime as `diana` opens one, approve and reject them together. Every CONTESTED-th proposal is
also decided by a second process at the same time, with the other verb. Run twice: as `diana`
decides (one decision at a time, no watcher) and as the app does (decisions in the background,
IN_FLIGHT at once, the proposals watcher on). Each approval appends one line, so the file says
whether every approved call ran exactly once.

(b) The app (Pilot, headless) stays open on the data dir, its own orchestrator calling
`get_current_time` in a loop, while CALLERS processes do the same as fast as they can. The
database is sampled once a second: rows landed per second, and at the end rows against calls.

Worker processes are this script again (`bench_concurrency.py worker decide|call ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.approvals.proposal import AlreadyDecided  # noqa: E402
from diana.core.runtime import Profile, Runtime  # noqa: E402

from tests.fixtures.decider import AppendServerProcess  # noqa: E402
from tests.waits import started as app_started  # noqa: E402

SERVER = "soak"
TOOL = f"{SERVER}_append"
DECIDERS = 8
PROPOSALS = 320
CONTESTED = 4  # every 4th proposal is decided by two processes at once
IN_FLIGHT = 4  # decisions at once in one process, as the app runs them
CALLERS = 4
CALL_SECONDS = 10.0
READY_WITHIN = 60.0  # 8 Python processes importing the core at once, on two cores
TROUBLE = re.compile(r"locked|OperationalError|Traceback|unexpected error|unwritten", re.I)


def write_config(root: Path, servers: dict[str, Any]) -> tuple[Path, Path]:
    config, data = root / "config", root / "data"
    config.mkdir(parents=True)
    (config / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))
    (config / "settings.json").write_text(
        json.dumps(
            {"obsidian": {"vault": str(root / "vault")}, "llm": {"host": "http://127.0.0.1:9"}}
        )
    )
    return config, data


def worker_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


async def start_workers(argvs: list[list[str]], logs: Path) -> list[asyncio.subprocess.Process]:
    processes = []
    for number, argv in enumerate(argvs):
        with (logs / f"worker-{number}.stderr").open("wb") as stderr:
            processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(SELF),
                    "worker",
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=stderr,
                    env=worker_env(),
                )
            )
    return processes


async def release(run: Path, count: int, deadline_after: float = 0.0) -> float:
    """Wait for ``count`` workers to be ready, then let them all go at once."""
    limit = time.monotonic() + READY_WITHIN
    while ready_count(run) < count:
        if time.monotonic() > limit:
            raise RuntimeError(f"workers not ready after {READY_WITHIN:.0f} s; see {run}")
        await asyncio.sleep(0.05)
    started = time.time()
    staged = run / "go.tmp"
    staged.write_text(repr(started + deadline_after))
    staged.rename(run / "go")
    return started


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_json(path: str | Path, value: Any) -> None:
    Path(path).write_text(json.dumps(value))


def mark_ready(path: str | Path) -> None:
    Path(path).touch()


def ready_count(run: Path) -> int:
    return sum(1 for _ in run.glob("ready-*"))


def wait_go(go: Path) -> float:
    while not go.exists():
        time.sleep(0.01)
    return float(go.read_text())


def trouble_in(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        if path.exists():
            found += [
                f"{path.name}: {line.strip()[:200]}"
                for line in path.read_text(errors="replace").splitlines()
                if TROUBLE.search(line)
            ]
    return found


# -- (a) decisions per second -----------------------------------------------------------------


async def make_proposals(config: Path, data: Path, label: str, count: int) -> list[str]:
    runtime = await Runtime.open(Profile.APP.but(share=False, watch=False), config, data)
    try:
        await runtime.mcp.wait_ready()
        ids = []
        for i in range(count):
            held = await runtime.orchestrator.execute(
                TOOL, {"mark": f"{label}-{i}"}, origin="bench"
            )
            assert held.data and "proposal_id" in held.data, held
            ids.append(held.data["proposal_id"])
        return ids
    finally:
        await runtime.close()


def share(ids: list[str], worker: int) -> list[tuple[str, str]]:
    """(proposal id, verb) for one decider: its own share, and the contested proposals of the
    decider before it with the opposite verb."""
    mine = []
    for i, proposal_id in enumerate(ids):
        verb = "approve" if (i // DECIDERS) % 2 == 0 else "reject"
        if i % DECIDERS == worker:
            mine.append((proposal_id, verb))
        elif i % CONTESTED == 0 and (i + 1) % DECIDERS == worker:
            mine.append((proposal_id, "reject" if verb == "approve" else "approve"))
    return mine


async def decide_worker(args: argparse.Namespace) -> None:
    ids = read_json(args.ids)
    todo = share(ids, args.worker)
    outcome: Counter[str] = Counter()
    errors: list[str] = []
    latencies: list[float] = []
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=args.watch), args.config_dir, args.data_dir
    )
    try:
        await runtime.mcp.wait_ready()
        mark_ready(args.ready)
        wait_go(Path(args.go))
        slots = asyncio.Semaphore(args.in_flight)

        async def decide(proposal_id: str, verb: str) -> None:
            async with slots:
                start = time.perf_counter()
                try:
                    if verb == "approve":
                        decision = await runtime.approvals.approve(proposal_id, by="cli")
                        ran = decision.result is not None and decision.result.success
                        outcome["approved" if ran else "approved, call failed"] += 1
                    else:
                        await runtime.approvals.reject(proposal_id, by="cli")
                        outcome["rejected"] += 1
                    latencies.append(time.perf_counter() - start)
                except AlreadyDecided:
                    outcome["refused"] += 1
                except Exception as exc:
                    outcome["errors"] += 1
                    errors.append(f"{verb} {proposal_id}: {type(exc).__name__}: {exc}")

        await asyncio.gather(*(decide(pid, verb) for pid, verb in todo))
        finished = time.time()
    finally:
        await runtime.close()
    write_json(
        args.results,
        {"outcome": outcome, "errors": errors, "latencies": latencies, "finished": finished},
    )


async def decisions_per_second(
    root: Path, server: AppendServerProcess, *, in_flight: int, watch: bool
) -> dict[str, Any]:
    label = root.name
    config, data = write_config(root, {SERVER: server.config})
    ids = await make_proposals(config, data, label, PROPOSALS)
    run = root / "run"
    run.mkdir()
    (run / "ids.json").write_text(json.dumps(ids))
    argvs = []
    for worker in range(DECIDERS):
        argv = [
            "decide",
            f"--config-dir={config}",
            f"--data-dir={data}",
            f"--ids={run / 'ids.json'}",
            f"--worker={worker}",
            f"--in-flight={in_flight}",
            f"--ready={run / f'ready-{worker}'}",
            f"--go={run / 'go'}",
            f"--results={run / f'results-{worker}.json'}",
        ]
        argvs.append([*argv, "--watch"] if watch else argv)
    processes = await start_workers(argvs, run)
    started = await release(run, DECIDERS)
    codes = [await p.wait() for p in processes]

    outcome: Counter[str] = Counter()
    errors: list[str] = [f"decider {n} exited {c}" for n, c in enumerate(codes) if c != 0]
    latencies: list[float] = []
    finished = started
    for worker in range(DECIDERS):
        path = run / f"results-{worker}.json"
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        outcome.update(result["outcome"])
        errors += result["errors"]
        latencies += result["latencies"]
        finished = max(finished, result["finished"])
    errors += trouble_in([run / f"worker-{n}.stderr" for n in range(DECIDERS)])
    errors += trouble_in(sorted(data.rglob("diana*.jsonl")))
    known = re.compile("|".join(map(re.escape, ids)))
    errors = [known.sub("ID", error) for error in errors]

    with contextlib.closing(sqlite3.connect(data / "diana.db")) as db:
        statuses = Counter(
            status
            for (status,) in db.execute("SELECT status FROM proposals WHERE tool = ?", (TOOL,))
        )
        succeeded = {
            json.loads(arguments)["mark"]
            for (arguments,) in db.execute(
                "SELECT arguments FROM proposals WHERE tool = ? AND status = 'succeeded'", (TOOL,)
            )
        }
    lines = [m for m in server.marks.read_text().splitlines() if m.startswith(f"{label}-")]
    seconds = finished - started
    decided = outcome["approved"] + outcome["approved, call failed"] + outcome["rejected"]
    return {
        "seconds": seconds,
        "decided": decided,
        "per_second": decided / seconds if seconds > 0 else 0.0,
        "outcome": outcome,
        "errors": errors,
        "latencies": latencies,
        "statuses": statuses,
        "exactly_once": len(lines) == len(set(lines)) and set(lines) == succeeded,
        "lines": len(lines),
        "succeeded": len(succeeded),
        "ran_twice": len(lines) - len(set(lines)),
        "ran_unrecorded": len(set(lines) - succeeded),
        "recorded_unrun": len(succeeded - set(lines)),
    }


# -- (b) execution-log rows per second ----------------------------------------------------------


async def call_worker(args: argparse.Namespace) -> None:
    calls = failures = 0
    errors: list[str] = []
    runtime = await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False), args.config_dir, args.data_dir
    )
    try:
        mark_ready(args.ready)
        deadline = wait_go(Path(args.go))
        while time.time() < deadline:
            try:
                result = await runtime.orchestrator.execute(
                    "get_current_time", {"timezone": "UTC"}, origin="cli"
                )
            except Exception as exc:
                failures += 1
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            calls += 1
            if not result.success:
                failures += 1
                errors.append(f"{result.error_code}: {result.error}")
            # A built-in call never suspends: yield, or the log writer only runs at close.
            await asyncio.sleep(0)
    finally:
        await runtime.close()  # writes out what is still queued
    write_json(args.results, {"calls": calls, "failures": failures, "errors": errors[:20]})


def count_rows(database: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM execution_log").fetchone()[0])


async def rows_per_second(root: Path) -> dict[str, Any]:
    from diana.tui.app import make_app

    config, data = write_config(root, {})
    run = root / "run"
    run.mkdir()
    argvs = [
        [
            "call",
            f"--config-dir={config}",
            f"--data-dir={data}",
            f"--ready={run / f'ready-{n}'}",
            f"--go={run / 'go'}",
            f"--results={run / f'results-{n}.json'}",
        ]
        for n in range(CALLERS)
    ]
    app = make_app(config, data)
    app_calls = app_failures = 0
    app_errors: list[str] = []
    samples: list[tuple[float, int]] = []
    async with app.run_test(size=(160, 48)):
        await app_started(app)
        assert app.runtime is not None
        runtime = app.runtime
        before = count_rows(data / "diana.db")
        processes = await start_workers(argvs, run)
        started = await release(run, CALLERS, deadline_after=CALL_SECONDS)
        deadline = started + CALL_SECONDS

        async def app_calls_loop() -> None:
            nonlocal app_calls, app_failures
            while time.time() < deadline:
                result = await runtime.orchestrator.execute(
                    "get_current_time", {"timezone": "UTC"}, origin="tui"
                )
                app_calls += 1
                if not result.success:
                    app_failures += 1
                    app_errors.append(f"{result.error_code}: {result.error}")
                await asyncio.sleep(0)  # the app's screen and watcher get their turn

        calling = asyncio.create_task(app_calls_loop())
        next_sample = started
        while any(p.returncode is None for p in processes) or not calling.done():
            next_sample += 1.0
            await asyncio.sleep(max(0.0, next_sample - time.time()))
            samples.append((time.time() - started, count_rows(data / "diana.db") - before))
        await calling
        codes = [await p.wait() for p in processes]
        await runtime.execution_log.flush()
    landed = count_rows(data / "diana.db") - before
    calls = app_calls
    failures = app_failures
    errors = [f"app: {e}" for e in app_errors[:20]]
    errors += [f"caller {n} exited {c}" for n, c in enumerate(codes) if c != 0]
    for n in range(CALLERS):
        path = run / f"results-{n}.json"
        if path.exists():
            result = json.loads(path.read_text())
            calls += result["calls"]
            failures += result["failures"]
            errors += [f"caller {n}: {e}" for e in result["errors"]]
    errors += trouble_in([run / f"worker-{n}.stderr" for n in range(CALLERS)])
    errors += trouble_in(sorted(data.rglob("diana*.jsonl")))
    # Per-second rates while everyone was calling (samples inside the calling window).
    rates = [
        (b[1] - a[1]) / (b[0] - a[0])
        for a, b in itertools.pairwise(samples)
        if b[0] <= CALL_SECONDS + 0.5 and b[0] > a[0]
    ]
    return {
        "calls": calls,
        "app_calls": app_calls,
        "landed": landed,
        "failures": failures,
        "errors": errors,
        "rates": rates,
        "seconds": CALL_SECONDS,
    }


# -- report -------------------------------------------------------------------------------------


def show_errors(errors: list[str], shown: int = 8) -> None:
    if not errors:
        print("    errors: none")
        return
    counted = Counter(re.sub(r'"ts": "[^"]*"', '"ts": …', e) for e in errors)
    print(f"    errors: {len(errors)}")
    for text, n in counted.most_common(shown):
        print(f"      {n:>4} x {text}")
    if len(counted) > shown:
        print(f"      … and {len(counted) - shown} more kinds")


def report_decisions(title: str, result: dict[str, Any]) -> None:
    outcome, latencies = result["outcome"], sorted(result["latencies"])
    print(f"  {title}")
    print(
        f"    {result['decided']} decisions in {result['seconds']:.2f} s: "
        f"{result['per_second']:.0f} decisions/s"
        + (
            f"; per decision median {statistics.median(latencies) * 1000:.1f} ms, "
            f"p95 {latencies[int(len(latencies) * 0.95) - 1] * 1000:.1f} ms"
            if latencies
            else ""
        )
    )
    print(
        f"    approved and ran {outcome['approved']}, rejected {outcome['rejected']}, "
        f"refused as already decided {outcome['refused']}"
        + (
            f", approved but the call failed {outcome['approved, call failed']}"
            if outcome["approved, call failed"]
            else ""
        )
    )
    print(
        f"    statuses: {dict(sorted(result['statuses'].items()))}; lines appended "
        f"{result['lines']} for {result['succeeded']} succeeded: "
        + (
            "each approved call ran exactly once"
            if result["exactly_once"]
            else f"ran twice {result['ran_twice']}, ran but not recorded as succeeded "
            f"{result['ran_unrecorded']}, recorded as succeeded but never ran "
            f"{result['recorded_unrun']}"
        )
    )
    show_errors(result["errors"])


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with AppendServerProcess(tmp / "appended.txt", tmp / "append-server.log") as server:
            as_cli = await decisions_per_second(tmp / "a1", server, in_flight=1, watch=False)
            as_app = await decisions_per_second(tmp / "a2", server, in_flight=IN_FLIGHT, watch=True)
        rows = await rows_per_second(tmp / "b")

    print(
        f"(a) {DECIDERS} processes deciding {PROPOSALS} proposals at once on one data dir "
        f"(every {CONTESTED}th by two processes)"
    )
    report_decisions("one decision at a time per process, as `diana approve|reject`", as_cli)
    report_decisions(f"{IN_FLIGHT} decisions in flight per process, watcher on, as the app", as_app)
    if as_cli["per_second"] > 0:
        print(f"    ratio app-like / diana-like: {as_app['per_second'] / as_cli['per_second']:.2f}")
    rates = rows["rates"]
    print(
        f"(b) execution-log rows with the app open and {CALLERS} processes calling "
        f"get_current_time for {rows['seconds']:.0f} s"
    )
    print(
        f"    {rows['calls']} calls ({rows['app_calls']} by the app), {rows['landed']} rows landed"
        f" ({rows['landed'] - rows['calls']:+d}), {rows['failures']} calls failed"
    )
    if rates:
        print(
            f"    rows/s: mean {statistics.mean(rates):.0f}, lowest second {min(rates):.0f}, "
            f"highest {max(rates):.0f} ({len(rates)} one-second samples)"
        )
    show_errors(rows["errors"])
    total = len(as_cli["errors"]) + len(as_app["errors"]) + len(rows["errors"])
    lost = rows["calls"] - rows["landed"]
    print(
        "zero errors, nothing lost"
        if total == 0 and lost == 0 and as_cli["exactly_once"] and as_app["exactly_once"]
        else f"ERRORS: {total} errors, {max(lost, 0)} execution-log rows missing"
    )


def worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_concurrency.py worker")
    parser.add_argument("kind", choices=("decide", "call"))
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--go", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--ids")
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--watch", action="store_true")
    args = parser.parse_args(argv)
    try:
        asyncio.run(decide_worker(args) if args.kind == "decide" else call_worker(args))
    except BaseException:
        traceback.print_exc()
        raise


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker_main(sys.argv[2:])
    else:
        asyncio.run(main())
