"""Shared state under real use: one SQLite file for the app and many `diana` processes, input
that cannot be stored as it is, damaged rows, and start-up that fails half-way.

The soak test (tests/test_soak.py) runs the whole product this way for 20 s; these tests pin
down each way it used to break, one at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from diana.core.approvals.policy import Policy
from diana.core.approvals.proposal import DamagedProposal, ProposalStatus
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.approvals.service import STOPPED_RUNNING, Approvals
from diana.core.calls.agents import FunctionAgent, FunctionTool
from diana.core.calls.orchestrator import Orchestrator
from diana.core.events import EventBus
from diana.core.models import ErrorCode, RiskLevel
from diana.core.runtime import Profile, Runtime
from diana.core.storage.db import StorageError
from diana.core.storage.execution_log import query_calls
from diana.core.storage.schema import connect
from diana.core.storage.stored import STORED_VALUE_LIMIT
from diana.core.system.lifecycle import CloseError, Closing
from diana.core.system.telemetry import TOO_DEEP_SHOWN
from diana.tui.app import make_app
from diana.tui.panes.approvals import ApprovalsPane

from .agents_fixtures import tool
from .commands import diana, diana_argv
from .conftest import new_proposal, stepping_clock
from .scenarios import TERMINAL_SIZE, build_app, settle
from .waits import settled, started

WORKER = Path(__file__).parent / "fixtures" / "proposal_worker.py"
ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
DEEP = 900


def diana_bytes(config_dir: Path, data_dir: Path, *args: bytes) -> subprocess.CompletedProcess[str]:
    """`diana` with arguments as raw bytes, as a shell passes what a person typed."""
    argv = [os.fsencode(a) for a in diana_argv(config_dir, data_dir)] + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, errors="replace")


def log_rows(data_dir: Path) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        db.row_factory = sqlite3.Row
        return list(db.execute("SELECT * FROM execution_log ORDER BY id"))


def aiosqlite_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]


# -- one transaction discipline: processes and tasks deciding together -------------------------


@pytest.mark.processes
def test_processes_and_tasks_deciding_together_never_meet_a_lock(tmp_path: Path) -> None:
    """Four processes, each with three tasks deciding and one watching on one connection (as
    the app does), for two seconds: no `database is locked`, every decision exactly once."""
    path = tmp_path / "diana.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            # Two seconds (five before) still make hundreds of decisions by every process
            # and collisions, asserted below: the same contention, for less long.
            [sys.executable, str(WORKER), str(path), "2", "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        reports.append(json.loads(out))

    assert [r["errors"] for r in reports] == [[], [], [], []]
    assert all(r["tally"]["created"] > 0 for r in reports)  # every process took part
    created = sum(r["tally"]["created"] for r in reports)
    decided = sum(r["tally"]["approved"] + r["tally"]["rejected"] for r in reports)
    with contextlib.closing(sqlite3.connect(path)) as db:
        counts = dict(db.execute("SELECT status, count(*) FROM proposals GROUP BY status"))
    assert sum(counts.values()) == created > 100
    assert counts.get("approved", 0) + counts.get("rejected", 0) == decided  # each once
    assert sum(r["tally"]["already_decided"] for r in reports) > 0  # they did collide


async def test_a_failed_write_rolls_back_and_the_connection_goes_on(tmp_path: Path) -> None:
    db = await connect(tmp_path / "diana.db")

    async def half_then_fail(connection: aiosqlite.Connection) -> None:
        await connection.execute("INSERT INTO facts (content, created_at) VALUES ('half', 'x')")
        await connection.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        await db.write(half_then_fail)
    await db.execute("INSERT INTO facts (content, created_at) VALUES ('whole', 'x')")

    assert [r[0] for r in await db.read("SELECT content FROM facts")] == ["whole"]
    await db.close()


async def test_a_cancelled_write_rolls_back_before_the_next_one_starts(tmp_path: Path) -> None:
    db = await connect(tmp_path / "diana.db")
    entered = asyncio.Event()

    async def slow(connection: aiosqlite.Connection) -> None:
        await connection.execute("INSERT INTO facts (content, created_at) VALUES ('gone', 'x')")
        entered.set()
        await asyncio.Event().wait()

    writing = asyncio.create_task(db.write(slow))
    await entered.wait()
    writing.cancel()
    await db.execute("INSERT INTO facts (content, created_at) VALUES ('kept', 'x')")

    assert writing.cancelled()
    assert [r[0] for r in await db.read("SELECT content FROM facts")] == ["kept"]
    await db.close()


async def test_a_write_cancelled_while_its_transaction_begins_leaves_none_open(
    tmp_path: Path,
) -> None:
    # Cancelled while BEGIN is on its way to SQLite: BEGIN still runs, so the transaction
    # it opened must be rolled back, or every later write on the connection fails.
    db = await connect(tmp_path / "diana.db")
    for _ in range(20):
        writing = asyncio.ensure_future(
            db.execute("INSERT INTO facts (content, created_at) VALUES ('gone', 'x')")
        )
        await asyncio.sleep(0)  # into the write, waiting on BEGIN
        writing.cancel()
        await asyncio.wait({writing})
        await db.execute("INSERT INTO facts (content, created_at) VALUES ('kept', 'x')")
    assert {r[0] for r in await db.read("SELECT content FROM facts")} == {"kept"}
    await db.close()


async def test_a_decision_that_cannot_get_the_lock_says_so_and_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "diana.db"
    store = ProposalStore(await connect(path, busy_timeout_ms=20, patience=0.3))
    proposal_id = await new_proposal(store)
    blocker = await aiosqlite.connect(path, isolation_level=None)
    await blocker.execute("BEGIN IMMEDIATE")

    with pytest.raises(StorageError, match=r"stayed busy for \d+\.\d s .* nothing was changed"):
        await store.approve(proposal_id, by="test", at=NOW)
    await blocker.rollback()
    await blocker.close()

    assert (await store.get(proposal_id)).status is ProposalStatus.PENDING
    assert (await store.approve(proposal_id, by="test", at=NOW)).status is ProposalStatus.APPROVED
    await store.close()


# -- the record of a call that ran ------------------------------------------------------------


async def approvals_on(path: Path, tmp_path: Path, handler: Any) -> Approvals:
    """Approvals over a store whose busy timeout is 20 ms and whose writes give up after
    0.1 s of a held lock (but for records that must land), and a tool `append` that always
    asks, run by ``handler``."""
    # As the runtime wires them: the orchestrator asks the approvals' gate.
    orchestrator = Orchestrator(
        clock=stepping_clock(), gate=lambda request: approvals.gate(request)
    )
    definition = tool("append", always_ask=True)
    orchestrator.register_agent_factory(
        "files", lambda: FunctionAgent("files", "Files", [FunctionTool(definition, handler)])
    )
    await orchestrator.start_all()
    policy_file = tmp_path / "policy.json"
    policy_file.write_text("{}")
    db = await connect(path, busy_timeout_ms=20, patience=0.1)
    approvals = Approvals(
        ProposalStore(db),
        orchestrator,
        Policy(lambda: policy_file, policy_file),
        clock=stepping_clock(),
        bus=EventBus(),
    )
    return approvals


async def test_the_record_of_a_call_that_ran_waits_out_a_held_lock(tmp_path: Path) -> None:
    """The call finishes while another process holds the write lock far longer than the
    busy timeout: its result is recorded when the lock goes, never dropped or left
    executing."""
    path = tmp_path / "diana.db"
    ran, release = asyncio.Event(), asyncio.Event()

    async def append(params: dict[str, Any]) -> str:
        ran.set()
        await release.wait()
        return "appended"

    approvals = await approvals_on(path, tmp_path, append)
    held = await approvals.orchestrator.execute("append", {})
    assert held.error_code is ErrorCode.PENDING_APPROVAL
    proposal_id = held.data["proposal_id"]

    approving = asyncio.create_task(approvals.approve(proposal_id, by="test"))
    await ran.wait()
    blocker = await aiosqlite.connect(path, isolation_level=None)
    await blocker.execute("BEGIN IMMEDIATE")
    release.set()
    # fixed wait: the lock held 25 times the busy timeout and 5 times the patience of any
    # other write; the record keeps trying
    await asyncio.sleep(0.5)
    assert not approving.done()
    await blocker.rollback()
    decision = await asyncio.wait_for(approving, timeout=10)
    await blocker.close()

    assert decision.result is not None and decision.result.data == "appended"
    assert (await approvals.store.get(proposal_id)).status is ProposalStatus.SUCCEEDED
    await approvals.close()


async def test_a_call_stopped_while_it_runs_is_interrupted_at_once(tmp_path: Path) -> None:
    ran = asyncio.Event()

    async def append(params: dict[str, Any]) -> str:
        ran.set()
        await asyncio.Event().wait()
        return "never"

    approvals = await approvals_on(tmp_path / "diana.db", tmp_path, append)
    held = await approvals.orchestrator.execute("append", {})
    proposal_id = held.data["proposal_id"]
    approving = asyncio.create_task(approvals.approve(proposal_id, by="test"))
    await ran.wait()
    approving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await approving
    await approvals.close()  # waits for the record

    store = await ProposalStore.open(tmp_path / "diana.db")
    proposal = await store.get(proposal_id)
    assert (proposal.status, proposal.error) == (ProposalStatus.INTERRUPTED, STOPPED_RUNNING)
    await store.close()


# -- input that cannot be stored as it is -------------------------------------------------------


@pytest.mark.processes
def test_text_that_is_not_utf8_is_refused_naming_the_field(
    config_dir: Path, data_dir: Path
) -> None:
    escaped = diana(
        config_dir, data_dir, "call", "save_fact", "--args", '{"content": "bad \\udc80 byte"}'
    )
    raw = diana_bytes(
        config_dir, data_dir, b"call", b"save_fact", b"--args", b'{"content": "\xff"}'
    )
    name = diana_bytes(config_dir, data_dir, b"call", b"save\xff_fact")
    as_json = diana(
        config_dir, data_dir, "call", "save_fact", "--args", '{"content": "\\udc80"}', "--json"
    )

    for result in (escaped, raw):
        assert result.returncode == 2, result.stderr
        assert 'argument "content": text that is not valid UTF-8' in result.stderr
        assert "Traceback" not in result.stderr
    assert json.loads(as_json.stdout)["error_code"] == "invalid_arguments"
    assert name.returncode == 2 and "unknown tool save\ufffd_fact" in name.stderr
    rows = log_rows(data_dir)
    assert [(r["tool"], r["status"]) for r in rows] == [
        ("save_fact", "refused"),
        ("save_fact", "refused"),
        ("save\ufffd_fact", "refused"),
        ("save_fact", "refused"),
    ]
    assert json.loads(rows[0]["arguments"]) == {"content": "bad \ufffd byte"}


@pytest.mark.processes
def test_arguments_nested_900_deep_are_refused_and_logged(config_dir: Path, data_dir: Path) -> None:
    deep = '{"outline": ' + "[" * DEEP + "]" * DEEP + "}"
    result = diana(config_dir, data_dir, "call", "save_fact", "--args", deep)

    assert result.returncode == 2
    assert 'argument "outline" is nested deeper than 64 levels' in result.stderr
    assert "RecursionError" not in result.stderr
    (row,) = log_rows(data_dir)
    assert (row["tool"], row["status"], row["error_code"]) == (
        "save_fact",
        "refused",
        "invalid_arguments",
    )


ODD_TOOLS = ["surrogate", "deep", "huge", "plain"]


def odd_agent() -> FunctionAgent:
    """Results SQLite cannot take as they are (in ODD_TOOLS order), then an ordinary one."""
    nested: Any = "bottom"
    for _ in range(DEEP):
        nested = {"down": nested}
    return FunctionAgent(
        "odd",
        "Odd",
        [
            FunctionTool(
                tool("surrogate", risk=RiskLevel.REVERSIBLE),
                lambda p: {"text": "half \udc80 a byte"},
            ),
            FunctionTool(tool("deep", risk=RiskLevel.REVERSIBLE), lambda p: nested),
            FunctionTool(
                tool("huge", risk=RiskLevel.REVERSIBLE), lambda p: "x" * (STORED_VALUE_LIMIT * 4)
            ),
            FunctionTool(tool("plain", risk=RiskLevel.REVERSIBLE), lambda p: "fine"),
        ],
    )


async def test_the_log_writer_survives_results_it_cannot_store_as_they_are(
    config_dir: Path, data_dir: Path
) -> None:
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    runtime.orchestrator.register_agent_factory("odd", odd_agent)
    await runtime.orchestrator.start_agent("odd")

    results = {name: await runtime.orchestrator.execute(name, {}) for name in ODD_TOOLS}
    await runtime.execution_log.flush()
    rows = {row.tool: row for row in await query_calls(runtime.db, limit=None)}
    await runtime.close()  # must not raise

    assert all(r.success for r in results.values())
    assert len(results["huge"].data) == STORED_VALUE_LIMIT * 4  # the caller gets it whole
    assert set(rows) == set(ODD_TOOLS)  # the call after the odd ones is written too
    assert rows["surrogate"].result == {"text": "half \ufffd a byte"}
    assert TOO_DEEP_SHOWN in json.dumps(rows["deep"].result)
    assert rows["huge"].result.endswith(
        f"[cut: {STORED_VALUE_LIMIT * 4 + 2:,} bytes, the first {STORED_VALUE_LIMIT:,} kept]"
    )
    assert rows["huge"].note == f"result cut to {STORED_VALUE_LIMIT:,} of " + (
        f"{STORED_VALUE_LIMIT * 4 + 2:,} bytes"
    )
    assert rows["plain"].result == "fine"


# -- start-up that fails half-way ----------------------------------------------------------------


async def database_whose_cost_ledger_cannot_load(data_dir: Path) -> None:
    """A database that opens and migrates, but that the cost ledger cannot read."""
    db = await connect(data_dir / "diana.db")
    await db.execute("DROP INDEX execution_log_usage")  # it holds the column
    await db.execute("ALTER TABLE execution_log DROP COLUMN cost_units")
    await db.close()


async def test_a_failed_start_releases_everything_it_acquired(
    config_dir: Path, data_dir: Path
) -> None:
    await database_whose_cost_ledger_cannot_load(data_dir)
    before = set(aiosqlite_threads())

    with pytest.raises(StorageError, match=r"cannot use the database .*cost_units"):
        await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        )

    left = [t for t in aiosqlite_threads() if t not in before]
    for thread in left:  # each connection it opened is closed: its thread ends
        await asyncio.to_thread(thread.join, 5)
    assert [t for t in left if t.is_alive()] == []


async def test_closing_goes_on_past_a_part_that_fails_and_names_it() -> None:
    closed: list[str] = []

    async def broken() -> None:
        raise OSError("disk gone")

    stack = Closing()
    stack.push("the database", lambda: closed.append("the database"))
    stack.push("the log", broken)
    stack.push("the servers", lambda: closed.append("the servers"))

    with pytest.raises(CloseError, match=r"^closing the log failed: OSError: disk gone$"):
        await stack.close()
    assert closed == ["the servers", "the database"]  # newest first, and past the failure


@pytest.mark.processes
async def test_the_cli_exits_when_start_up_fails(config_dir: Path, data_dir: Path) -> None:
    await database_whose_cost_ledger_cannot_load(data_dir)

    # `diana cost` opens the cost ledger (`diana proposals` opens only the proposals).
    result = await asyncio.to_thread(diana, config_dir, data_dir, "cost")  # 60 s bound

    assert result.returncode == 2
    assert result.stderr.startswith(f"diana: cannot use the database {data_dir / 'diana.db'}")
    assert "Traceback" not in result.stderr


async def test_the_app_shows_a_failed_start_and_quits(config_dir: Path, data_dir: Path) -> None:
    await database_whose_cost_ledger_cannot_load(data_dir)
    app = make_app(config_dir, data_dir, clock=stepping_clock())

    async def run() -> None:
        async with app.run_test(size=TERMINAL_SIZE) as pilot:
            await started(app)
            await pilot.press("ctrl+q")

    await asyncio.wait_for(run(), timeout=20)
    assert app.startup_error is not None and "cost_units" in app.startup_error
    assert app.close_error is None


@pytest.mark.processes
def test_a_database_that_is_a_directory_is_one_clear_line(config_dir: Path, data_dir: Path) -> None:
    (data_dir / "diana.db").mkdir(parents=True)

    result = diana(config_dir, data_dir, "proposals")

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"diana: cannot open the database {data_dir / 'diana.db'}: it is a directory; "
        "move it aside or choose another --data-dir"
    ]


# -- rows that cannot be read ------------------------------------------------------------------


async def two_proposals_one_damaged(data_dir: Path) -> tuple[str, str]:
    store = await ProposalStore.open(data_dir / "diana.db")
    ids = [await new_proposal(store, path=path) for path in ("a.txt", "b.txt")]
    await store.close()
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        db.execute("UPDATE proposals SET arguments = '{\"path\": ' WHERE id = ?", (ids[0],))
        db.commit()
    return ids[0], ids[1]


async def test_a_damaged_proposal_is_listed_and_never_runs(data_dir: Path) -> None:
    damaged, whole = await two_proposals_one_damaged(data_dir)
    store = await ProposalStore.open(data_dir / "diana.db")

    listed = {p.id: p for p in await store.select(None)}
    with pytest.raises(DamagedProposal, match="arguments is not valid JSON"):
        await store.approve(damaged, by="test", at=NOW)
    rejected = await store.reject(damaged, by="test", at=NOW)

    assert listed[damaged].damaged == "arguments is not valid JSON"
    assert listed[whole].damaged is None and listed[whole].arguments == {"path": "b.txt"}
    assert rejected.status is ProposalStatus.REJECTED
    await store.close()


@pytest.mark.processes
async def test_the_cli_lists_a_damaged_proposal_beside_the_others(
    config_dir: Path, data_dir: Path
) -> None:
    damaged, whole = await two_proposals_one_damaged(data_dir)

    listed = await asyncio.to_thread(diana, config_dir, data_dir, "proposals", "--all", "--json")
    table = await asyncio.to_thread(diana, config_dir, data_dir, "proposals")
    shown = await asyncio.to_thread(diana, config_dir, data_dir, "show", damaged)
    approved = await asyncio.to_thread(diana, config_dir, data_dir, "approve", damaged)

    assert listed.returncode == 0, listed.stderr
    by_id = {p["id"]: p for p in json.loads(listed.stdout)}
    assert by_id[damaged]["damaged"] == "arguments is not valid JSON"
    assert by_id[whole]["arguments"] == {"path": "b.txt"}
    assert "DAMAGED: arguments is not valid JSON" in table.stdout and whole in table.stdout
    assert shown.returncode == 0 and "damaged  arguments is not valid JSON" in shown.stdout
    assert approved.returncode == 2
    assert f"proposal {damaged} is damaged" in approved.stderr


async def test_the_app_shows_a_damaged_proposal_and_will_not_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(tmp_path)
    damaged, whole = await two_proposals_one_damaged(tmp_path / "data")
    notes: list[str] = []
    monkeypatch.setattr(app, "notify", lambda message, **_: notes.append(message))
    async with app.run_test(size=TERMINAL_SIZE) as pilot:
        await settle(pilot)
        pane = app.query_one(ApprovalsPane)
        rows = {
            str(key.value): [str(cell) for cell in pane.table.get_row(key)]
            for key in pane.table.rows
        }
        await pilot.press("f3")
        pane.table.move_cursor(row=list(rows).index(damaged))
        await pilot.press("a")
        await settled(app)

    assert rows[damaged][-1] == "damaged: arguments is not valid JSON"
    assert rows[whole][-1] == '{"path": "b.txt"}'
    assert any(f"proposal {damaged} is damaged" in note for note in notes)
    store = await ProposalStore.open(tmp_path / "data" / "diana.db")
    assert (await store.get(damaged)).status is ProposalStatus.PENDING
    await store.close()
