"""Soak: the app and several `diana` processes deciding proposals on one data dir at once.

WORKERS processes (tests/fixtures/decider.py: each runs `diana` commands in-process, one after
another) create proposals for a destructive MCP tool whose every run appends one line to a
file, approve and reject them, and often decide the same proposal at the same moment;
meanwhile the app approves by key (F3, `a`) and with `/approve ID` in the chat. The soak lasts
until several processes have decided COLLISIONS proposals at once (and at least
SOAK_AT_LEAST seconds): what it is for has then happened, however fast the machine is; a soak
that reaches SOAK_AT_MOST without it fails. Then the record must hold: no lock error anywhere,
each call that ran ran once and is logged once, the side effects are exactly the succeeded
proposals, nothing is left half-decided, and the app still approves by key. Run with `-s` to
see the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from diana.tui.app import DianaApp, make_app
from diana.tui.messages import DecisionRequested
from diana.tui.panes import ChatPane
from diana.tui.panes.approvals import ApprovalsPane
from textual.events import Key
from textual.pilot import Pilot
from textual.widgets import DataTable, Input
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from .commands import diana
from .fixtures.decider import AppendServerProcess, read_pool
from .scenarios import TERMINAL_SIZE, prepare_dirs, settle, until
from .screen import record_notifications
from .waits import settled

pytestmark = pytest.mark.processes  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent
DECIDER = Path(__file__).parent / "fixtures" / "decider.py"
SERVER = "soak"
TOOL = f"{SERVER}_append"
# Until several processes have decided COLLISIONS proposals at once: 4 to 8 s on this
# machine's two cores while other tests run (a fixed 6 s soak had 5 such, a 20 s one more).
COLLISIONS = 3
SOAK_AT_LEAST = 4.0
SOAK_AT_MOST = 30.0
WORKERS = 4
SEED = 7
READY_WITHIN = 30.0  # WORKERS processes starting at once, on two cores
WIND_DOWN = 20.0  # a worker finishes the command it is in; longer than the 10 s busy timeout
DECISION_WITHIN = 40.0  # an app decision: busy waits (10 s) plus the tool's run
# One round of the app's approvals by key, down the list (then one /approve in the chat).
KEYS_PER_ROUND = ("a", "down", "a", "down", "a")
AT_ONCE = 0.25  # decisions of one proposal started this close together count as "at once"
PROPOSAL_ID = re.compile(r"^[a-z0-9]{6}$")
# What must never show: a lock error, a raw exception, the CLI's last-resort message.
TROUBLE = re.compile(r"locked|OperationalError|Traceback|unexpected error", re.IGNORECASE)
ALREADY_DECIDED = "already decided"
UNSETTLED = ("approved", "executing", "interrupted")


@dataclass
class AppRecord:
    """What the app was asked to decide, how, and what went wrong on its side."""

    decisions: list[tuple[str, str, Worker[None]]] = field(default_factory=list)  # via, id
    notifications: list[tuple[str, str]] = field(default_factory=list)  # (severity, text)
    failures: list[str] = field(default_factory=list)
    screens: list[str] = field(default_factory=list)


def screen_text(app: DianaApp) -> str:
    """The visible screen as plain text (the SVG screenshot without its markup)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


def record_decisions(app: DianaApp, record: AppRecord, monkeypatch: pytest.MonkeyPatch) -> None:
    """Note every decision the app carries out (by key or from the chat) and its worker."""
    run_decision = app.run_decision

    def recording(event: DecisionRequested) -> Worker[None]:
        worker = run_decision(event)
        record.decisions.append(("chat" if event.from_chat else "key", event.proposal, worker))
        return worker

    monkeypatch.setattr(app, "run_decision", recording)


async def wait_decision(app: DianaApp, worker: Worker[None], record: AppRecord) -> None:
    try:
        async with asyncio.timeout(DECISION_WITHIN):
            await worker.wait()
    except WorkerFailed as exc:
        error = exc.error
        record.failures.append(f"app decision: {type(error).__name__}: {error}{where(error)}")
    except (WorkerCancelled, TimeoutError) as exc:
        record.failures.append(f"app decision did not finish: {type(exc).__name__}")
    await settled(app)


def where(error: BaseException) -> str:
    """Where in the project an exception was raised: its innermost frame in core/ or tui/."""
    inside = [
        (frame, Path(frame.filename).resolve())
        for frame in traceback.extract_tb(error.__traceback__)
    ]
    inside = [(frame, path) for frame, path in inside if path.is_relative_to(ROOT)]
    if not inside:
        return ""
    frame, path = inside[-1]
    return f" (in {frame.name}, {path.relative_to(ROOT)}:{frame.lineno})"


def press(app: DianaApp, key: str) -> None:
    """A key as the terminal driver delivers it. Not Pilot.press: that waits for the process
    to be idle after each key, which this busy app never is (up to a second per key)."""
    app.post_message(Key(key, key if len(key) == 1 else None))


async def approve_by_keys(app: DianaApp) -> None:
    """F3, then `a`, `down`, `a`, ...: the newest pending proposals approved one after
    another, as fast as a person types."""
    pane = app.query_one(ApprovalsPane)
    press(app, "f3")
    await until(lambda: app.focused in (pane.table, pane.focus_target))
    for key in KEYS_PER_ROUND:
        press(app, key)


async def approve_in_chat(app: DianaApp, proposal_id: str, record: AppRecord) -> None:
    """`/approve ID` entered in the chat input (what Enter there does), leaving the focus
    where it is: keys still on their way to the Approvals pane must land there, not in the
    input. Wait until the app has started that decision."""
    chat_input = app.query_one("#chat-input", Input)
    chat_input.value = f"/approve {proposal_id}"
    await chat_input.action_submit()
    try:
        await until(lambda: any(p == proposal_id for _, p, _ in record.decisions), within=5)
    except TimeoutError:
        record.failures.append(f"/approve {proposal_id} started no decision")


@dataclass
class Soak:
    """When the soak ends: the app reads it here, the workers in the go file."""

    run_dir: Path
    deadline: float

    def end_at(self, when: float) -> None:
        self.deadline = when
        go(self.run_dir, when)


async def end_once_collided(soak: Soak, started: float) -> None:
    """End the soak once SOAK_AT_LEAST seconds have passed and the workers' decisions of
    COLLISIONS proposals started at once (as the workers have reported so far)."""
    while time.time() < soak.deadline:
        if time.time() >= started + SOAK_AT_LEAST:
            ops = [op for n in range(WORKERS) for op in read_results(worker_results(soak, n))]
            if decided_at_once(ops)[1] >= COLLISIONS:
                soak.end_at(time.time())
                return
        await asyncio.sleep(0.2)  # the workers' results so far: read again


def worker_results(soak: Soak, number: int) -> Path:
    return soak.run_dir / f"worker-{number}.jsonl"


async def app_decides(pilot: Pilot[int], pool: Path, soak: Soak, record: AppRecord) -> None:
    """Until the deadline, rounds of decisions made without waiting for the calls they run
    (the app decides in the background so that a person can go on): approvals by key down
    the Approvals list and `/approve` of the newest proposal published; then wait until the
    app has carried them out, and another round."""
    app = pilot.app
    assert isinstance(app, DianaApp)
    typed: set[str] = set()
    waited = 0
    rounds = 0
    while time.time() < soak.deadline:
        rounds += 1
        await approve_by_keys(app)
        fresh = [e.id for e in read_pool(pool) if e.id not in typed]
        if fresh:
            typed.add(fresh[-1])
            await approve_in_chat(app, fresh[-1], record)
        await pilot.pause(0)  # the keys reach the pane (no wait for idle: never, here)
        if waited == len(record.decisions):
            await asyncio.sleep(0.05)  # nothing pending just now
            continue
        waited = await wait_decisions(app, record, waited)
        if rounds % 5 == 0:
            record.screens.append(screen_text(app))
    await pilot.pause()
    await wait_decisions(app, record, waited)


async def wait_decisions(app: DianaApp, record: AppRecord, waited: int) -> int:
    """Wait for the decisions made since the first ``waited``; how many are waited for now."""
    while waited < len(record.decisions):
        await wait_decision(app, record.decisions[waited][2], record)
        waited += 1
    return waited


async def approve_last_by_key(pilot: Pilot[int], record: AppRecord) -> list[str]:
    """`a` on the selected proposal, with Pilot this time: the problems it met."""
    app = pilot.app
    assert isinstance(app, DianaApp)
    made, failures = len(record.decisions), len(record.failures)
    await pilot.press("a")
    try:
        await until(lambda: len(record.decisions) > made, within=5)
    except TimeoutError:
        return ["`a` on the final proposal started no decision"]
    await wait_decision(app, record.decisions[made][2], record)
    return [f"final approval by key: {f}" for f in record.failures[failures:]]


def start_workers(
    config_dir: Path, data_dir: Path, run_dir: Path
) -> list[tuple[subprocess.Popen[bytes], Path, Path]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    workers = []
    for number in range(WORKERS):
        results = run_dir / f"worker-{number}.jsonl"
        stderr = run_dir / f"worker-{number}.stderr"
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(DECIDER),
                    "--config-dir",
                    str(config_dir),
                    "--data-dir",
                    str(data_dir),
                    "--pool",
                    str(run_dir / "pool"),
                    "--results",
                    str(results),
                    "--go",
                    str(run_dir / "go"),
                    "--ready",
                    str(run_dir / f"ready-{number}"),
                    "--worker",
                    str(number),
                    "--seed",
                    str(SEED),
                    "--tool",
                    TOOL,
                ],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
            )
        workers.append((process, results, stderr))
    return workers


def go(run_dir: Path, deadline: float) -> None:
    """Release the workers, atomically: none reads a half-written deadline."""
    staged = run_dir / "go.tmp"
    staged.write_text(repr(deadline))
    staged.rename(run_dir / "go")


async def stop_workers(
    workers: list[tuple[subprocess.Popen[bytes], Path, Path]], problems: list[str]
) -> None:
    for number, (process, _, _) in enumerate(workers):
        try:
            code = await asyncio.to_thread(process.wait, WIND_DOWN)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)
            problems.append(f"worker {number} still busy {WIND_DOWN:.0f} s after the soak: killed")
            continue
        if code != 0:
            problems.append(f"worker {number} exited {code}")


def read_results(path: Path) -> list[dict[str, Any]]:
    """A worker's results: its whole lines (the one it is writing may be half there)."""
    if not path.exists():
        return []
    text = path.read_text()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def judge_command(op: dict[str, Any]) -> tuple[str, str | None]:
    """(outcome, problem) for one worker command."""
    kind, code, err = op["op"], op.get("code"), op.get("err", "")
    where = f"worker {op['worker']} {kind} {op.get('id') or op.get('mark') or ''}".rstrip()
    said = (err.strip().splitlines() or [""])[-1]
    trouble = TROUBLE.search(op.get("out", "") + err)
    outcome, problem = "ok", None
    if kind == "create":
        if code != 3 or not op.get("id") or not PROPOSAL_ID.match(op["id"]):
            problem = f"{where}: exit {code}, expected 3 and a proposal id: {said}"
    elif kind in ("approve", "reject"):
        if code == 0:
            outcome = "decided"
        elif code == 2 and ALREADY_DECIDED in err:
            outcome = "refused"
        else:
            problem = f"{where}: exit {code}: {said}"
    elif kind == "list" and code != 0:
        problem = f"{where}: exit {code}: {said}"
    if problem is None and trouble:
        tail = " | ".join(line.strip() for line in err.strip().splitlines()[-3:])
        problem = f"{where}: exit {code} but said {trouble.group(0)!r}: {tail}"
    return outcome, problem


def decided_at_once(ops: list[dict[str, Any]]) -> tuple[int, int]:
    """(contested proposals decided by 2+ processes, those whose decisions started within
    AT_ONCE seconds of each other)."""
    starts: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        if op["op"] in ("approve", "reject") and op.get("contested"):
            starts[op["id"]].append(op["at"] - op["seconds"])
    several = [sorted(s) for s in starts.values() if len(s) >= 2]
    close = sum(1 for s in several if any(b - a <= AT_ONCE for a, b in itertools.pairwise(s)))
    return len(several), close


def trouble_lines(text: str) -> list[str]:
    return [line.strip()[:300] for line in text.splitlines() if TROUBLE.search(line)]


def summarize_problems(problems: list[str], ids: set[str], shown: int = 25) -> str:
    """Problems grouped once proposal ids and log timestamps are taken out, commonest first."""
    known = re.compile("|".join(sorted(map(re.escape, ids))) or "(?!)")

    def general(problem: str) -> str:
        problem = re.sub(r'"ts": "[^"]*"', '"ts": …', problem)
        return known.sub("ID", problem)

    counted = Counter(general(p) for p in problems)
    lines = [f"{n:>4} x {text}" for text, n in counted.most_common(shown)]
    if len(counted) > shown:
        lines.append(f"     … and {len(counted) - shown} more kinds")
    return "\n".join(lines)


@pytest.mark.processes
async def test_app_and_cli_processes_deciding_at_once_lose_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `diana` run by commands.diana resolves to this tree, as the workers do.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run_dir = tmp_path / "run"
    (run_dir / "pool").mkdir(parents=True)
    marks_file = tmp_path / "appended.txt"
    problems: list[str] = []
    record = AppRecord()
    final_id: str | None = None
    final_status: str | None = None

    with AppendServerProcess(marks_file, tmp_path / "append-server.log") as server:
        config_dir, data_dir = prepare_dirs(tmp_path, {SERVER: server.config})
        # The real clock: the CLI processes prune the execution log by real time.
        app = make_app(config_dir, data_dir)
        record.notifications = record_notifications(app, monkeypatch)
        record_decisions(app, record, monkeypatch)
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await settle(pilot)
            assert app.core is not None
            assert app.core._runtime.mcp.connections[SERVER].state.status == "ready"

            workers = start_workers(config_dir, data_dir, run_dir)
            try:
                await until(
                    lambda: all((run_dir / f"ready-{n}").exists() for n in range(WORKERS)),
                    within=READY_WITHIN,
                )
                started = time.time()
                soak = Soak(run_dir, started + SOAK_AT_MOST)
                go(run_dir, soak.deadline)
                await asyncio.gather(
                    app_decides(pilot, run_dir / "pool", soak, record),
                    end_once_collided(soak, started),
                )
            finally:
                if not (run_dir / "go").exists():
                    go(run_dir, 0.0)
                await stop_workers(workers, problems)
            soaked = time.time() - started
            app_tries = len(record.decisions)  # during the soak (the final one comes next)

            # The next `diana` a person runs marks what a dead process left half-done.
            swept = await asyncio.to_thread(
                diana, config_dir, data_dir, "proposals", "--all", "--json"
            )
            if swept.returncode != 0:
                problems.append(f"`diana proposals --all` exit {swept.returncode}: {swept.stderr}")
            problems += [f"`diana proposals` stderr: {x}" for x in trouble_lines(swept.stderr)]

            # And the app still approves by key: a last proposal, made by another process.
            made = await asyncio.to_thread(
                diana, config_dir, data_dir, "call", TOOL, "--args", '{"mark": "final-by-key"}'
            )
            problems += [f"final `diana call` stderr: {x}" for x in trouble_lines(made.stderr)]
            if made.returncode != 3:
                problems.append(
                    f"final `diana call` exit {made.returncode}, expected 3: {made.stderr.strip()}"
                )
            else:
                final_id = made.stdout.split()[-1]
                pane = app.query_one(ApprovalsPane)
                try:
                    await until(
                        lambda: any(key.value == final_id for key in pane.table.rows), within=5
                    )
                except TimeoutError:
                    problems.append(f"the app never listed the final proposal {final_id}")
                else:
                    await pilot.press("f3")
                    selected = pane.selected_proposal()
                    if selected != final_id:
                        problems.append(f"F3 selected {selected}, not the newest {final_id}")
                    else:
                        problems += await approve_last_by_key(pilot, record)
                await pilot.pause()
            record.screens.append(screen_text(app))
            while_open = len(record.notifications)
            transcript = app.query_one(ChatPane).plain_text()
            log_table = app.query_one("#log-table", DataTable)
            log_text = "\n".join(
                " ".join(str(cell) for cell in log_table.get_row_at(i))
                for i in range(log_table.row_count)
            )
        server_log = server.log.read_text(errors="replace")

    # -- what the processes said --------------------------------------------------------------
    ops: list[dict[str, Any]] = []
    for number in range(WORKERS):
        ops += read_results(run_dir / f"worker-{number}.jsonl")
        stderr = (run_dir / f"worker-{number}.stderr").read_text(errors="replace")
        problems += [f"worker {number} stderr: {line}" for line in trouble_lines(stderr)]
    commands = [op for op in ops if op["op"] != "done"]
    outcomes: Counter[tuple[str, str]] = Counter()
    for op in commands:
        outcome, problem = judge_command(op)
        outcomes[(op["op"], outcome)] += 1
        if problem:
            problems.append(problem)
    problems += [f"app: {failure}" for failure in record.failures]
    # An error shown while the app was in use is a problem; one raised while it closed is
    # reported, and fails the test only if it is one of the TROUBLE kind.
    problems += [
        f"app notification ({severity}): {text}"
        for severity, text in record.notifications[:while_open]
        if severity == "error" or TROUBLE.search(text)
    ]
    problems += [
        f"app notification while closing ({severity}): {text}"
        for severity, text in record.notifications[while_open:]
        if TROUBLE.search(text)
    ]
    closing_errors = [
        f"app notification while closing ({severity}): {text}"
        for severity, text in record.notifications[while_open:]
        if severity == "error" and not TROUBLE.search(text)
    ]
    screens = "\n".join([*record.screens, transcript, log_text])
    problems += [f"app screen: {line}" for line in dict.fromkeys(trouble_lines(screens))]
    for log_file in sorted(data_dir.rglob("diana*.jsonl")):
        problems += [f"{log_file.name}: {line}" for line in trouble_lines(log_file.read_text())]
    problems += [f"append server: {line}" for line in trouble_lines(server_log)]

    # -- what the database and the file hold ---------------------------------------------------
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        proposals = {
            pid: (status, json.loads(arguments).get("mark"), decided_by)
            for pid, status, arguments, decided_by in db.execute(
                "SELECT id, status, arguments, decided_by FROM proposals WHERE tool = ?", (TOOL,)
            )
        }
        runs = list(
            db.execute(
                "SELECT origin, status, arguments FROM execution_log "
                "WHERE tool = ? AND origin LIKE 'proposal %'",
                (TOOL,),
            )
        )
    appended = marks_file.read_text().splitlines() if marks_file.exists() else []
    statuses = Counter(status for status, _, _ in proposals.values())
    succeeded = {pid: mark for pid, (status, mark, _) in proposals.items() if status == "succeeded"}

    for mark, times in Counter(appended).items():
        if times > 1:
            problems.append(f"the call with mark {mark} ran {times} times")
    ran, meant = set(appended), set(succeeded.values())
    for mark in sorted(ran - meant):
        status = next((s for s, m, _ in proposals.values() if m == mark), "no proposal")
        problems.append(f"mark {mark} was appended but its proposal is {status}")
    for mark in sorted(meant - ran):
        problems.append(f"proposal with mark {mark} succeeded but nothing was appended")
    for pid, (status, mark, _) in sorted(proposals.items()):
        if status in UNSETTLED:
            problems.append(f"proposal {pid} ({mark}) left {status}")
    rows_by_proposal: Counter[str] = Counter(
        origin.removeprefix("proposal ") for origin, _, _ in runs
    )
    for pid in succeeded:
        if rows_by_proposal[pid] != 1:
            problems.append(
                f"succeeded proposal {pid} has {rows_by_proposal[pid]} execution_log rows"
            )
    for pid, rows in rows_by_proposal.items():
        status = proposals.get(pid, ("unknown", None, None))[0]
        if status not in ("succeeded", "failed"):
            problems.append(f"proposal {pid} is {status} but has {rows} execution_log rows")
    if final_id is not None:
        final_status = proposals.get(final_id, ("missing", None, None))[0]
        if final_status != "succeeded":
            problems.append(f"final proposal {final_id} approved by key is {final_status}")
        if "final-by-key" not in appended:
            problems.append("the final proposal's line was not appended")

    # -- figures -------------------------------------------------------------------------------
    tui_won = {
        pid for pid, (status, _, by) in proposals.items() if by == "tui" and status != "rejected"
    }
    by_via: Counter[str] = Counter()
    for pid in tui_won:  # how: the way of deciding it that was not refused as already decided
        refused = f"proposal {pid} was {ALREADY_DECIDED}"
        tried = Counter(via for via, p, _ in record.decisions if p == pid)
        keys = tried["key"] - sum(refused in text for _, text in record.notifications)
        chats = tried["chat"] - transcript.count(refused)
        by_via["key" if keys > 0 >= chats else "chat" if chats > 0 >= keys else "either"] += 1
    app_refused = sum(ALREADY_DECIDED in text for _, text in record.notifications)
    app_refused += transcript.count(ALREADY_DECIDED)
    cli_refused = outcomes[("approve", "refused")] + outcomes[("reject", "refused")]
    contested_ids = {op["id"] for op in commands if op["op"] == "create" and op.get("contested")}
    several, at_once = decided_at_once(commands)
    figures = [
        f"soak: {soaked:.1f} s, {WORKERS} worker processes + the app, one data dir",
        f"worker commands: {len(commands)} ({len(commands) / soaked:.1f}/s): "
        + ", ".join(
            f"{kind} {sum(n for (k, _), n in outcomes.items() if k == kind)}"
            for kind in ("create", "approve", "reject", "list")
        ),
        f"proposals created: {len(proposals)} ({len(contested_ids)} contested; "
        f"{several} decided by 2+ processes, {at_once} of them within {AT_ONCE * 1000:.0f} ms)",
        f"approved by the app: {len(tui_won)} (keys {by_via['key']}, /approve {by_via['chat']}"
        + (f", either {by_via['either']}" if by_via["either"] else "")
        + f"; {len(record.decisions)} tries; the final one included)",
        "approved by the CLI: "
        f"{sum(1 for s, _, by in proposals.values() if by == 'cli' and s != 'rejected')}, "
        f"rejected: {statuses['rejected']}",
        f"double decisions refused as already decided: {cli_refused + app_refused} "
        f"(CLI {cli_refused}, app {app_refused})",
        f"executions: {len(appended)} lines appended, {len(runs)} execution_log rows for "
        f"approved calls, {len(succeeded)} proposals succeeded",
        f"statuses at the end: {dict(sorted(statuses.items()))}",
        f"final approval by key: {final_id} -> {final_status}",
        f"errors: {len(problems)}",
    ]
    if at_once < COLLISIONS:
        problems.append(
            f"in {soaked:.1f} s only {at_once} proposals were decided by several processes "
            f"at once (within {AT_ONCE * 1000:.0f} ms), not {COLLISIONS}"
        )
    if app_tries == 0:
        problems.append(f"the app decided nothing in the {soaked:.1f} s of the soak")
    print("\n" + "\n".join(figures))
    for error in closing_errors:
        print(f"noted, not counted: {error}")
    if problems:
        print(summarize_problems(problems, set(proposals)))

    assert commands and proposals, "the soak did nothing"
    assert not problems, (
        f"{len(problems)} problems:\n{summarize_problems(problems, set(proposals))}"
    )
