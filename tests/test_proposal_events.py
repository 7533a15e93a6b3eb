"""The panes that follow proposals render a change from its event: a ProposalsChanged made in
this process carries the proposal as written, so the Approvals pane, the chat and the
Execution Log read nothing again; a change another process made (the event carries
nothing) is read from the database."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.events import ProposalsChanged
from diana.core.storage.schema import connect
from diana.tui.app import DianaApp
from diana.tui.panes.approvals import ApprovalsPane
from diana.tui.panes.execlog import ExecutionLogPane

from .scenarios import build_app, settle
from .waits import settled

SIZE = (120, 35)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each proposal query ran against the database (the real store's
    methods run; each call is counted on its way)."""
    counted: Counter[str] = Counter()
    for name in ("get", "select"):
        real = getattr(ProposalStore, name)

        def counting(
            self: ProposalStore, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any
        ) -> Any:
            counted[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(ProposalStore, name, counting)
    return counted


async def hold_call(app: DianaApp, entry: str) -> str:
    assert app.core is not None
    held = await app.core._runtime.orchestrator.execute("obsidian_log", {"entry": entry})
    assert held.data is not None
    return str(held.data["proposal_id"])


def listed(app: DianaApp) -> list[str]:
    return [str(row.key.value) for row in app.query_one(ApprovalsPane).table.ordered_rows]


async def test_a_proposal_made_here_is_listed_from_its_event(
    tmp_path: Path, reads: Counter[str]
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first = await hold_call(app, "one")
        await settled(app)
        reads.clear()
        second = await hold_call(app, "two")
        await settled(app)
        await pilot.pause()
        assert listed(app) == [second, first]  # the newest first
        assert app.query_one(ApprovalsPane).pending == 2
        assert reads["select"] == 0 and reads["get"] == 0


async def test_a_decision_made_here_reaches_every_pane_from_its_event(
    tmp_path: Path, reads: Counter[str]
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        proposal = await hold_call(app, "to reject")
        await settled(app)
        log = app.query_one(ExecutionLogPane)
        assert [c.status for c in log.calls.values() if c.proposal == proposal] == [
            "pending_approval"
        ]
        assert app.core is not None
        store_reads_before = Counter(reads)
        # The decision itself reads the proposal once (to reject what is stored).
        await app.core._runtime.approvals.reject(proposal, by="test", reason="not now")
        await settled(app)
        await pilot.pause()
        assert listed(app) == []
        assert [c.status for c in log.calls.values() if c.proposal == proposal] == ["rejected"]
        assert reads["select"] == store_reads_before["select"]  # no pane listed them again
        assert reads["get"] == store_reads_before["get"]  # nor read the proposal again


async def test_a_change_from_another_process_is_read_again(
    tmp_path: Path, reads: Counter[str]
) -> None:
    """The event without data (what the watch on the database publishes) is what makes the
    panes read: the count above is of real reads, which happen when they must."""
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        proposal = await hold_call(app, "elsewhere")
        await settled(app)
        assert app.core is not None
        runtime = app.core._runtime
        # Decided "in another process": written to the database without this process's
        # event, as `diana reject` does; the watch then publishes an event carrying nothing.
        await runtime.approvals.store.reject(
            proposal, by="cli", at=runtime.clock.now(), reason="from a script"
        )
        reads.clear()
        runtime.bus.publish(ProposalsChanged(None, None))
        await settled(app)
        await pilot.pause()
        assert reads["select"] >= 1
        assert listed(app) == []


async def make(store: ProposalStore, n: int) -> str:
    proposal = await store.create(
        tool="obsidian_log",
        agent="obsidian",
        arguments={"entry": f"entry {n}"},
        risk="reversible_with_delay",
        reason="test",
        confidence=None,
        correlation_id=f"c{n}",
        origin="test",
        at=datetime.now(UTC),
    )
    return proposal.id


async def test_the_watch_tells_only_of_proposals_changed_elsewhere(tmp_path: Path) -> None:
    """What the Approvals service's watch asks each half second: another process's proposal
    is news; this store's own writes are not (they are told with their data), nor is
    another connection writing other tables (the execution log, the cost ledger)."""
    path = tmp_path / "diana.db"
    here = await ProposalStore.open(path)
    elsewhere = await ProposalStore.open(path)
    other = await connect(path)
    try:
        assert not await here.changed_elsewhere()  # the first look takes note
        mine = await make(here, 1)
        await here.reject(mine, by="tui", at=datetime.now(UTC))
        assert not await here.changed_elsewhere()
        await other.execute("CREATE TABLE IF NOT EXISTS scratch (n INTEGER)")
        await other.execute("INSERT INTO scratch VALUES (1)")
        assert not await here.changed_elsewhere()  # committed elsewhere, but no proposal
        await make(elsewhere, 2)
        assert await here.changed_elsewhere()
        assert not await here.changed_elsewhere()  # told once
        # A change elsewhere followed by one here before the next look is still told.
        await make(elsewhere, 3)
        await make(here, 4)
        assert await here.changed_elsewhere()
    finally:
        await here.close()
        await elsewhere.close()
        await other.close()
