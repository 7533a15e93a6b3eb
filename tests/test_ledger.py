"""What a proposal says it is, it is: an approval the run ledger cannot record leaves it
pending (never approved, never interrupted); a proposal whose key is gone is withdrawn, never
called changed, and cannot be approved; one whose waiting process is gone is withdrawn and
never runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from diana.core.approvals.keyfile import KEY_GONE
from diana.core.approvals.ledger import RunLedger
from diana.core.approvals.proposal import ProposalStatus, ProposalWithdrawn
from diana.core.approvals.proposal_store import NEVER_STARTED, ProposalStore
from diana.core.system.os_processes import process_identity

from .commands import diana_here, propose_save_fact, start_diana
from .conftest import new_proposal, stepping_clock
from .database import edit_proposal, proposal_row
from .fixtures.fake_ollama import FakeOllama
from .sampling_server import configure

NOW = stepping_clock().now()


def listed(config_dir: Path, data_dir: Path, *flags: str) -> list[dict[str, object]]:
    done = diana_here(config_dir, data_dir, "proposals", "--json", *flags)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` stays a regular file diana can read but not write, even as root."""
    path.touch()
    if os.geteuid() != 0:
        path.chmod(0o400)
        yield
        path.chmod(0o600)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {made.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


# -- the run ledger ----------------------------------------------------------------------------


def test_a_ledger_linked_elsewhere_is_refused_and_the_proposal_still_waits(
    config_dir: Path, data_dir: Path
) -> None:
    proposal_id = propose_save_fact(config_dir, data_dir)
    ledger = data_dir / "proposals.runs"
    ledger.symlink_to("/proc/version")  # readable, a regular file behind the link

    refused = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert str(ledger) in refused.stderr and "symbolic link to /proc/version" in refused.stderr
    assert "put the file itself there" in refused.stderr
    assert "the proposal still waits" in refused.stderr
    # A later start finds it pending: it was never approved, so never interrupted.
    assert [(p["id"], p["status"]) for p in listed(config_dir, data_dir, "--all")] == [
        (proposal_id, "pending")
    ]
    assert proposal_row(data_dir, proposal_id)["executor"] is None

    ledger.unlink()
    approved = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert approved.returncode == 0, approved.stderr
    assert ledger.read_text() == f"{proposal_id}\n"


@pytest.mark.processes  # as root, chattr makes the ledger immutable
def test_a_ledger_that_cannot_be_written_leaves_the_proposal_pending(
    config_dir: Path, data_dir: Path
) -> None:
    proposal_id = propose_save_fact(config_dir, data_dir)
    ledger = data_dir / "proposals.runs"

    with unwritable(ledger):
        refused = diana_here(config_dir, data_dir, "approve", proposal_id)
        after = listed(config_dir, data_dir, "--all")

    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert f"{ledger} cannot be written" in refused.stderr
    assert "Nothing was approved: the proposal still waits" in refused.stderr
    assert [(p["id"], p["status"]) for p in after] == [(proposal_id, "pending")]
    row = proposal_row(data_dir, proposal_id)
    assert (row["decided_at"], row["executor"]) == (None, None)
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        assert db.execute("SELECT count(*) FROM proposal_runs").fetchone()[0] == 0

    approved = diana_here(config_dir, data_dir, "approve", proposal_id)
    assert approved.returncode == 0, approved.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a regular file"])
def test_the_ledger_is_never_opened_through_a_link_nor_as_anything_but_a_file(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "proposals.runs"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("abc\n")
        path.symlink_to(tmp_path / "elsewhere")
    ledger = RunLedger(path)

    for attempt in (ledger.read, lambda: ledger.add("abcdef")):
        with pytest.raises(Exception, match=re.escape(str(path))) as refused:
            attempt()
        said = str(refused.value)
        assert "\n" not in said and "not a regular file" in said
        assert "move it aside" in said or "put the file itself there" in said
    if kind == "link to a regular file":
        assert (tmp_path / "elsewhere").read_text() == "abc\n"  # nothing written through


def test_an_approval_taken_back_does_not_count_and_a_new_one_does(tmp_path: Path) -> None:
    path = tmp_path / "proposals.runs"
    ledger = RunLedger(path)
    ledger.add("abcdef")
    ledger.take_back("abcdef")  # its transaction did not commit
    ledger.add("ghjkmn")

    assert RunLedger(path).read() == {"ghjkmn"}
    ledger.add("abcdef")
    assert RunLedger(path).read() == {"ghjkmn", "abcdef"}


async def test_an_approved_call_that_never_started_is_withdrawn_not_interrupted(
    data_dir: Path,
) -> None:
    store = await ProposalStore.open(data_dir / "diana.db")
    proposal_id = await new_proposal(store)
    await store.approve(proposal_id, by="test", at=NOW)
    # Its executor's pid, started at another time: a process gone, its pid reused (by us).
    pid, _, started = process_identity().partition(":")
    edit_proposal(data_dir, proposal_id, executor=f"{pid}:{int(started) - 1}")

    swept = await store.mark_interrupted(NOW)
    proposal = await store.get(proposal_id)
    await store.close()

    assert swept == [proposal_id]
    assert proposal.status is ProposalStatus.WITHDRAWN
    assert proposal.error == NEVER_STARTED


# -- the proposal key --------------------------------------------------------------------------


def test_a_proposal_whose_key_is_gone_is_withdrawn_never_called_changed(
    config_dir: Path, data_dir: Path
) -> None:
    proposal_id = propose_save_fact(config_dir, data_dir)
    old_key = (data_dir / "proposals.key").read_bytes()
    (data_dir / "proposals.key").unlink()

    pending = listed(config_dir, data_dir)
    shown = diana_here(config_dir, data_dir, "show", proposal_id)
    approved = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert pending == []
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"status +withdrawn", shown.stdout), shown.stdout
    assert KEY_GONE in shown.stdout
    assert "make the call again" in shown.stdout and "diana call save_fact" in shown.stdout
    assert approved.returncode == 2
    assert KEY_GONE in approved.stderr and "withdrawn" in approved.stderr
    for said in (shown.stdout, approved.stderr):
        assert "changed" not in said
    # A fresh key signs new proposals, and they run.
    assert (data_dir / "proposals.key").read_bytes() != old_key
    again = propose_save_fact(config_dir, data_dir)
    assert diana_here(config_dir, data_dir, "approve", again).returncode == 0


def test_a_proposal_of_a_lost_key_cannot_be_approved_by_setting_it_back(
    config_dir: Path, data_dir: Path
) -> None:
    proposal_id = propose_save_fact(config_dir, data_dir)
    (data_dir / "proposals.key").unlink()
    assert diana_here(config_dir, data_dir, "proposals").returncode == 0  # withdraws it
    fresh = propose_save_fact(config_dir, data_dir)
    signer = str(proposal_row(data_dir, fresh)["digest"]).partition(":")[0]
    old_signature = str(proposal_row(data_dir, proposal_id)["digest"]).partition(":")[2]

    # Set back to pending, even claiming the new key signed it: never run.
    edit_proposal(data_dir, proposal_id, status="pending")
    as_lost = diana_here(config_dir, data_dir, "approve", proposal_id)
    edit_proposal(data_dir, proposal_id, status="pending", digest=f"{signer}:{old_signature}")
    as_forged = diana_here(config_dir, data_dir, "approve", proposal_id)

    assert as_lost.returncode == 2 and KEY_GONE in as_lost.stderr
    assert as_forged.returncode == 2
    assert "were changed after it was proposed; it is now rejected" in as_forged.stderr
    assert proposal_row(data_dir, proposal_id)["executor"] is None
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        ran = db.execute("SELECT proposal_id FROM proposal_runs").fetchall()
    assert ran == []


async def test_a_process_that_held_a_deleted_key_signs_with_the_new_one(
    data_dir: Path,
) -> None:
    running = await ProposalStore.open(data_dir / "diana.db")  # holds the first key
    before = await new_proposal(running, path="before")
    (data_dir / "proposals.key").unlink()
    after = await new_proposal(running, path="after")  # a new key is made for it
    other = await ProposalStore.open(data_dir / "diana.db")

    approved = await other.approve(after, by="test", at=NOW)
    with pytest.raises(ProposalWithdrawn, match="the proposal key is gone"):
        await other.approve(before, by="test", at=NOW)
    await running.close()
    await other.close()

    assert approved.status is ProposalStatus.APPROVED


# -- a proposal whose waiting process is gone -----------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("then", ["proposals", "approve"])
def test_a_sampling_proposal_whose_asker_was_killed_is_withdrawn_and_never_runs(
    config_dir: Path, data_dir: Path, then: str
) -> None:
    with FakeOllama([{"content": "For no one."}]) as ollama:
        configure(config_dir, ollama.url)
        asker = start_diana(  # its own process: the pid the proposal names is the one killed
            config_dir,
            data_dir,
            "call",
            "fx_summarize",
            "--args",
            '{"text": "x", "hint": ""}',
            forked=False,
        )
        assert asker.stderr is not None
        line = asker.stderr.readline()
        found = re.search(r"proposal (\w+) waits for approval", line)
        assert found, line
        proposal_id = found.group(1)
        os.kill(asker.pid, signal.SIGKILL)
        asker.communicate(timeout=30)

        if then == "proposals":
            assert listed(config_dir, data_dir) == []
        approved = diana_here(config_dir, data_dir, "approve", proposal_id)
        everything = listed(config_dir, data_dir, "--all")
        chats = [r for r in ollama.requests if "messages" in r]

    assert approved.returncode == 2, approved.stderr
    assert "withdrawn without running" in approved.stderr
    assert f"(pid {asker.pid}) has ended" in approved.stderr
    assert "MCP server fx must ask again" in approved.stderr
    ((proposal,),) = [[p for p in everything if p["id"] == proposal_id]]
    assert proposal["status"] == "withdrawn"
    assert f"(pid {asker.pid}) has ended, so no one waits for the answer" in str(proposal["error"])
    assert chats == []  # the model was never asked
