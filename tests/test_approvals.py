"""Approvals: policy, the gate, proposals decided exactly once, across processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.policy import Policy, Rule
from diana.core.approvals.proposal import AlreadyDecided, ProposalStatus
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.events import ProposalsChanged
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.core.system.os_processes import identity_alive

from .commands import diana, diana_here, start_diana
from .conftest import new_proposal, stepping_clock
from .database import proposal_row
from .waits import until

FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


def with_servers(config_dir: Path, *extra: str) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            {"mcpServers": {"files": {"command": sys.executable, "args": [FIXTURE, *extra]}}}
        )
    )


# -- policy ------------------------------------------------------------------------------------


def policy_with(tmp_path: Path, rules: dict[str, Any]) -> Policy:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(rules))
    return Policy(lambda: path, path)


@pytest.mark.parametrize(
    ("rules", "tool", "server", "expected"),
    [
        ({"tools": {"files_read": "allow"}}, "files_read", "files", Rule.ALLOW),
        ({"servers": {"files": "allow"}}, "files_write", "files", Rule.ALLOW),
        (
            {"servers": {"files": "allow"}, "tools": {"files_write": "ask"}},
            "files_write",
            "files",
            Rule.ASK,
        ),
        (
            {"servers": {"files": "deny"}, "tools": {"files_read": "allow"}},
            "files_read",
            "files",
            Rule.DENY,
        ),
        (
            {"servers": {"files": "allow"}, "tools": {"files_rm": "deny"}},
            "files_rm",
            "files",
            Rule.DENY,
        ),
        ({"servers": {"other": "deny"}}, "files_read", "files", None),
        ({}, "save_fact", None, None),
    ],
)
def test_policy_precedence(
    tmp_path: Path, rules: dict[str, Any], tool: str, server: str | None, expected: Rule | None
) -> None:
    match = policy_with(tmp_path, rules).rule_for(tool, server)
    assert (match.rule if match else None) is expected


async def test_a_written_rule_takes_effect_in_another_process_at_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"tools": {"keep_me": "deny"}}')
    here, elsewhere = Policy(lambda: path, path), Policy(lambda: path, path)
    assert elsewhere.rule_for("files_write", "files") is None
    await here.set_tool_rule("files_write", Rule.ALLOW)
    assert elsewhere.rule_for("files_write", "files") == here.rule_for("files_write", "files")
    assert json.loads(path.read_text())["tools"] == {"keep_me": "deny", "files_write": "allow"}
    assert not list(tmp_path.glob(".policy-*"))  # the temporary file was renamed into place


# -- the gate in the runtime ---------------------------------------------------------------------


@pytest.mark.processes
async def test_denied_tools_never_run_and_allowed_ones_skip_approval(
    config_dir: Path, data_dir: Path
) -> None:
    with_servers(config_dir)
    (config_dir / "policy.json").write_text(
        json.dumps({"tools": {"files_delete_file": "deny", "files_slow": "allow"}})
    )
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        run = runtime.orchestrator.execute
        denied = await run("files_delete_file", {"path": "x"})
        assert denied.error_code is ErrorCode.DENIED_BY_POLICY
        assert "tool rule for files_delete_file" in (denied.error or "")
        assert (await run("files_slow", {"seconds": 0})).success  # no annotation, but allowed
        held = await run("files_crash", {})  # unknown risk: a person decides, it does not run
        assert held.error_code is ErrorCode.PENDING_APPROVAL
        assert runtime.mcp.connections["files"].ready
        assert (await run("files_echo", {"text": "fine"})).success  # readOnlyHint
        pending = await runtime.approvals.store.select()
        assert [p.tool for p in pending] == ["files_crash"]


async def test_confidence_decides_for_reversible_with_delay(
    config_dir: Path, data_dir: Path
) -> None:
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        unsure = await runtime.orchestrator.execute("obsidian_log", {"entry": "x"}, confidence=0.5)
        sure = await runtime.orchestrator.execute("obsidian_log", {"entry": "y"}, confidence=0.9)
        assert unsure.error_code is ErrorCode.PENDING_APPROVAL
        assert sure.success


@pytest.mark.processes
async def test_approve_runs_the_stored_call_once_and_records_the_result(
    config_dir: Path, data_dir: Path
) -> None:
    with_servers(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        held = await runtime.orchestrator.execute(
            "files_delete_file", {"path": "/tmp/x", "token": "sekrit"}
        )
        proposal_id = held.data["proposal_id"]
        waiting = asyncio.create_task(runtime.approvals.wait(proposal_id))
        decision = await runtime.approvals.approve(proposal_id, by="test")
        assert decision.result is not None and decision.result.data == "deleted /tmp/x"
        assert decision.proposal.status is ProposalStatus.SUCCEEDED
        assert (await asyncio.wait_for(waiting, 5)).status is ProposalStatus.SUCCEEDED
        assert decision.proposal.public()["arguments"] == {"path": "/tmp/x", "token": "***"}
        with pytest.raises(AlreadyDecided, match=r"already decided: it was approved and ran$"):
            await runtime.approvals.approve(proposal_id, by="test")
        calls = await runtime.recent_calls()
        assert [c.status for c in calls if c.tool == "files_delete_file"] == [
            "approved",  # the held call's row, once decided; its run is a row of its own
            "succeeded",
        ]
        assert runtime.mcp.connections["files"].state.calls == 1


async def test_a_kept_list_follows_every_change_to_the_file(tmp_path: Path) -> None:
    """The whole pending list is read once, then brought up to date from the rows changed
    since, whoever changed them (another connection, or SQL by hand)."""
    path = tmp_path / "d.db"
    ours, theirs = await ProposalStore.open(path), await ProposalStore.open(path)
    try:
        ids = [await new_proposal(ours, path=str(n)) for n in range(6)]
        before = await ours.select()
        assert [p.id for p in before] == ids[::-1]  # the same time: the later row first
        await theirs.reject(ids[0], by="them", at=NOW)
        made = await new_proposal(theirs, path="theirs")
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("UPDATE proposals SET arguments = '{' WHERE id = ?", (ids[1],))
            db.execute("UPDATE proposals SET created_at = '2030-01-01' WHERE id = ?", (ids[2],))
            db.commit()
        after = await ours.select()
        fresh = await ProposalStore.open(path)
        assert after == await fresh.select()
        await fresh.close()
        assert [p.id for p in after] == [ids[2], made, ids[5], ids[4], ids[3], ids[1]]
        assert after[-1].damaged == "arguments is not valid JSON"
        # Rows nobody changed are the very proposals listed before.
        assert all(p is q for p, q in zip(after[2:5], before[:3], strict=True))
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("DELETE FROM proposals WHERE id = ?", (ids[4],))
            db.commit()
        assert [p.id for p in await ours.select()] == [ids[2], made, ids[5], ids[3], ids[1]]
    finally:
        await ours.close()
        await theirs.close()


async def test_two_connections_approving_together_decide_once(tmp_path: Path) -> None:
    first = await ProposalStore.open(tmp_path / "d.db")
    second = await ProposalStore.open(tmp_path / "d.db")
    try:
        for _ in range(100):
            proposal_id = await new_proposal(first)
            outcomes = await asyncio.gather(
                first.approve(proposal_id, by="one", at=NOW),
                second.approve(proposal_id, by="two", at=NOW),
                return_exceptions=True,
            )
            won = [o for o in outcomes if not isinstance(o, BaseException)]
            lost = [o for o in outcomes if isinstance(o, AlreadyDecided)]
            assert len(won) == 1 and len(lost) == 1
    finally:
        await first.close()
        await second.close()


@pytest.mark.processes
def test_two_processes_approving_together_run_the_call_once(
    config_dir: Path, data_dir: Path
) -> None:
    # obsidian_log appends one line per run, so the note counts executions.
    for round_ in range(4):
        held = diana_here(
            config_dir,
            data_dir,
            "call",
            "obsidian_log",
            "--args",
            json.dumps({"entry": f"round {round_}"}),
        )
        assert held.returncode == 3, held.stderr
        proposal_id = held.stdout.strip()
        racers = [start_diana(config_dir, data_dir, "approve", proposal_id) for _ in range(2)]
        codes = sorted(p.wait(timeout=60) for p in racers)
        assert codes == [0, 2]
    note = next((config_dir.parent / "vault" / "Daily").glob("*.md")).read_text()
    assert [line.split(" ", 2)[2] for line in note.splitlines()[2:]] == [
        f"round {r}" for r in range(4)
    ]


@pytest.mark.processes
def test_a_process_killed_during_execution_leaves_the_proposal_interrupted(
    config_dir: Path, data_dir: Path
) -> None:
    with_servers(config_dir)
    held = diana_here(config_dir, data_dir, "call", "files_slow", "--args", '{"seconds": 30}')
    assert held.returncode == 3, held.stderr
    proposal_id = held.stdout.strip()
    approving = start_diana(config_dir, data_dir, "approve", proposal_id)
    # until the approval is recorded and the call is running
    until(lambda: proposal_row(data_dir, proposal_id)["status"] == "executing")
    os.kill(approving.pid, signal.SIGKILL)
    approving.wait(timeout=10)
    # diana ran in the fork server's child, which kills itself once its launcher is gone
    executor = str(proposal_row(data_dir, proposal_id)["executor"])
    until(lambda: not identity_alive(executor), within=10)

    listed = json.loads(diana_here(config_dir, data_dir, "proposals", "--all", "--json").stdout)
    assert [(p["id"], p["status"]) for p in listed] == [(proposal_id, "interrupted")]
    again = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert again.returncode == 2 and "it was interrupted while it ran" in again.stderr


@pytest.mark.processes
async def test_a_proposal_from_another_process_is_announced(
    config_dir: Path, data_dir: Path
) -> None:
    async with await Runtime.open(
        Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        made = await asyncio.to_thread(
            diana,
            config_dir,
            data_dir,
            "call",
            "obsidian_log",
            "--args",
            '{"entry": "from elsewhere"}',
        )
        assert made.returncode == 3
        async with asyncio.timeout(5):
            while not isinstance(await events.get(), ProposalsChanged):
                pass
        pending = await runtime.approvals.store.select()
        assert [p.id for p in pending] == [made.stdout.strip()]


@pytest.mark.processes
def test_cli_lists_shows_and_refuses_bad_ids(config_dir: Path, data_dir: Path) -> None:
    with_servers(config_dir)
    held = diana_here(
        config_dir,
        data_dir,
        "call",
        "files_delete_file",
        "--args",
        '{"path": "x", "password": "pw-SECRET"}',
    )
    assert held.returncode == 3, held.stderr
    proposal_id = held.stdout.strip()
    listed = json.loads(diana_here(config_dir, data_dir, "proposals", "--json").stdout)
    assert {"id", "tool", "arguments", "risk", "reason", "status", "created_at"} <= set(listed[0])
    assert listed[0]["arguments"]["password"] == "***"
    assert "pw-SECRET" not in diana_here(config_dir, data_dir, "show", proposal_id).stdout
    for verb in ("approve", "reject"):
        unknown = diana_here(config_dir, data_dir, verb, "zzzzzz")
        assert unknown.returncode == 2 and "no proposal zzzzzz" in unknown.stderr
    rejected = diana_here(config_dir, data_dir, "reject", proposal_id, "--reason", "not now")
    assert rejected.returncode == 0
    shown = json.loads(diana_here(config_dir, data_dir, "show", proposal_id, "--json").stdout)
    assert (shown["status"], shown["reject_reason"]) == ("rejected", "not now")
    late = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert late.returncode == 2 and "already decided: it was rejected" in late.stderr
