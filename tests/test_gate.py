"""One gate, no way around it: a server that lies with two tools of one name, a deny written
after a proposal was made, a proposal edited in the database, a settled proposal set back to
pending. Each must end with nothing run that a person did not approve as shown."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.keyfile import call_digest
from diana.core.approvals.proposal import ProposalChanged, ProposalStatus
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.events import Notice
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .commands import diana_here, propose_save_fact
from .conftest import new_proposal, stepping_clock
from .database import edit_proposal, proposal_row

GATE_SERVER = str(Path(__file__).parent / "fixtures" / "gate_server.py")
NOW = stepping_clock().now()


def gate_server(config_dir: Path, side_effects: Path, name: str = "gate", **fields: Any) -> None:
    (config_dir / "mcp-servers.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    name: {
                        "command": sys.executable,
                        "args": [GATE_SERVER, "--side-effects", str(side_effects)],
                        **fields,
                    }
                }
            }
        )
    )


def effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def propose(config_dir: Path, data_dir: Path, line: str, **extra: str) -> str:
    made = diana_here(
        config_dir,
        data_dir,
        "call",
        "gate_append_line",
        "--args",
        json.dumps({"line": line, **extra}),
    )
    assert made.returncode == 3, made.stderr
    return made.stdout.split()[-1]


# -- 1: two tools, one name -------------------------------------------------------------------


@pytest.mark.processes
async def test_tools_that_collide_after_normalising_are_both_rejected(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects, name="dup")
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    notices = runtime.bus.subscribe()
    try:
        await runtime.mcp.wait_ready()
        tools = {d.name for d, _agent in runtime.orchestrator.tool_definitions()}
        result = await runtime.orchestrator.execute("dup_get_item", {"key": "k"})
    finally:
        await runtime.close()

    assert "dup_get_item" not in tools and "dup_append_line" in tools
    assert result.error_code is ErrorCode.TOOL_NOT_FOUND
    assert effects(side_effects) == []
    warnings = [
        e.message
        for e in [notices.queue.get_nowait() for _ in range(notices.queue.qsize())]
        if isinstance(e, Notice)
    ]
    assert any(
        "'Get_Item' and 'get-item' were both rejected: they are both named dup_get_item" in w
        for w in warnings
    ), warnings


@pytest.mark.processes
def test_the_cli_cannot_call_either_of_two_tools_of_one_name(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects, name="dup")

    called = diana_here(config_dir, data_dir, "call", "dup_get_item", "--args", '{"key": "k"}')

    assert called.returncode == 2, called.stderr
    assert "unknown tool dup_get_item" in called.stderr
    assert effects(side_effects) == []


# -- 4: a deny written after the proposal -------------------------------------------------------


@pytest.mark.processes
def test_a_deny_written_after_the_proposal_stops_it(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects)
    proposal_id = propose(config_dir, data_dir, "never")
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"gate_append_line": "deny"}}))

    approved = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert approved.returncode == 1
    assert approved.stderr.strip() == (
        f"diana: not run, {proposal_id} rejected: gate_append_line is denied by policy "
        "(tool rule for gate_append_line)"
    )
    row = proposal_row(data_dir, proposal_id)
    assert (row["status"], row["reject_reason"]) == (
        "rejected",
        "gate_append_line is denied by policy (tool rule for gate_append_line)",
    )
    assert effects(side_effects) == []


@pytest.mark.processes
async def test_an_approved_call_still_passes_the_policy_when_it_runs(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    """The orchestrator asks the gate even for a call a person approved: a deny in force
    when it runs stops it, whoever calls with approved=True."""
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects)
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"gate": "deny"}}))
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    try:
        await runtime.mcp.wait_ready()
        result = await runtime.orchestrator.execute(
            "gate_append_line", {"line": "x"}, approved=True
        )
    finally:
        await runtime.close()

    assert result.error_code is ErrorCode.DENIED_BY_POLICY
    assert result.error == "gate_append_line is denied by policy (server rule for gate)"
    assert effects(side_effects) == []


# -- 5: an approval binds to the call that was proposed -----------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize(
    "edit",
    [
        {
            "tool": "code_execution",
            "agent": "code",
            "arguments": '{"language": "shell", "code": "echo ran > MARK"}',
        },
        {"arguments": '{"line": "edited"}'},
    ],
    ids=["tool swapped for code_execution", "arguments edited"],
)
def test_a_proposal_edited_in_the_database_does_not_run(
    config_dir: Path, data_dir: Path, tmp_path: Path, edit: dict[str, str]
) -> None:
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects)
    proposal_id = propose(config_dir, data_dir, "as proposed")
    mark = tmp_path / "MARK"
    edit = {k: v.replace("MARK", str(mark)) for k, v in edit.items()}
    edit_proposal(data_dir, proposal_id, **edit)

    approved = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert approved.returncode == 2
    assert approved.stderr.strip() == (
        f"diana: proposal {proposal_id} was not approved: its tool, agent or arguments were "
        "changed after it was proposed; it is now rejected"
    )
    assert effects(side_effects) == [] and not mark.exists()
    assert proposal_row(data_dir, proposal_id)["status"] == "rejected"


@pytest.mark.processes
@pytest.mark.parametrize("also", ["nothing else", "its proposal_runs row deleted", "restored"])
def test_a_settled_proposal_set_back_to_pending_never_runs_again(
    config_dir: Path, data_dir: Path, tmp_path: Path, also: str
) -> None:
    side_effects = tmp_path / "effects.txt"
    gate_server(config_dir, side_effects)
    proposal_id = propose(config_dir, data_dir, "once")
    copy = tmp_path / "diana.db.copy"
    if also == "restored":  # a copy of the database taken while it was pending
        with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
            db.execute("VACUUM INTO ?", (str(copy),))
    first = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert first.returncode == 0, first.stderr
    if also == "restored":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{data_dir / 'diana.db'}{suffix}").unlink(missing_ok=True)
        copy.rename(data_dir / "diana.db")
        assert proposal_row(data_dir, proposal_id)["status"] == "pending"
    else:
        # Everything a person could see about it put back as it was before the decision.
        edit_proposal(
            data_dir, proposal_id, status="pending", arguments='{"line": "once"}', decided_at=None
        )
    if also == "its proposal_runs row deleted":
        with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
            db.execute("DELETE FROM proposal_runs WHERE proposal_id = ?", (proposal_id,))
            db.commit()

    again = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert again.returncode == 2
    assert "it was approved once already: a proposal never runs twice" in again.stderr
    assert effects(side_effects) == ["once"]


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory", "dangling link"])
@pytest.mark.parametrize("name", ["proposals.key", "proposals.runs"])
def test_a_key_or_run_ledger_that_is_not_a_regular_file_is_one_clear_line(
    config_dir: Path, data_dir: Path, name: str, kind: str
) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    if name == "proposals.runs":  # the key is made, and a proposal waits
        proposal_id = propose_save_fact(config_dir, data_dir)
    path = data_dir / name
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir(mode=0o700)  # private, as diana keeps its data: only the kind is wrong
    else:
        path.symlink_to("/dev/zero" if kind == "link to /dev/zero" else data_dir / "nowhere")
    command = ["approve", proposal_id] if name == "proposals.runs" else ["proposals"]

    done = diana_here(config_dir, data_dir, *command)

    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr, done.stderr
    assert "not a regular file" in done.stderr or "does not exist" in done.stderr
    if name == "proposals.runs":
        assert proposal_row(data_dir, proposal_id)["status"] == "pending"


async def test_an_approval_is_refused_if_the_proposal_changed_since_it_was_shown(
    data_dir: Path,
) -> None:
    store = await ProposalStore.open(data_dir / "diana.db")
    proposal_id = await new_proposal(store)
    shown = await store.get(proposal_id)
    other = call_digest(b"k" * 32, shown.tool, shown.agent, {"path": "elsewhere"})

    with pytest.raises(ProposalChanged, match="it changed after it was shown to you"):
        await store.approve(proposal_id, by="test", at=NOW, seen=other)
    still = await store.get(proposal_id)
    approved = await store.approve(proposal_id, by="test", at=NOW, seen=shown.digest)
    await store.close()

    assert still.status is ProposalStatus.PENDING
    assert approved.status is ProposalStatus.APPROVED


async def test_proposals_are_signed_with_a_key_kept_outside_the_database(
    data_dir: Path,
) -> None:
    store = await ProposalStore.open(data_dir / "diana.db")
    proposal_id = await new_proposal(store)
    await store.close()
    key = (data_dir / "proposals.key").read_bytes()

    assert (data_dir / "proposals.key").stat().st_mode & 0o777 == 0o600
    assert key not in (data_dir / "diana.db").read_bytes()
    row = proposal_row(data_dir, proposal_id)
    assert row["digest"] == call_digest(
        key, row["tool"], row["agent"], json.loads(row["arguments"])
    )
