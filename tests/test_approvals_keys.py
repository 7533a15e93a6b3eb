"""The Approvals pane's keys show their effect at once: F3 rewrites the footer's keys where
they stand (none is mounted again) and restyles the two panes it moves between, not what is
inside them, at any size; `a` starts the call before the list is drawn again, and takes the
proposal off the list before the database has the decision if that is slow; a list of
thousands is not a table of thousands."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.events import CallStarted, Event
from diana.tui.app import DianaApp
from diana.tui.panes.approvals import ApprovalsPane
from diana.tui.panes.chat import ChatPane
from rich.text import Text
from textual.dom import DOMNode
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from .scenarios import build_app, settle
from .waits import settled, work_done

SIZE = (160, 48)


async def held_calls(app: DianaApp, count: int) -> list[str]:
    """``count`` calls held for approval (daily-note entries); their proposals, oldest first."""
    assert app.core is not None
    proposals = []
    for n in range(count):
        held = await app.core._runtime.orchestrator.execute("obsidian_log", {"entry": f"entry {n}"})
        assert held.data is not None
        proposals.append(held.data["proposal_id"])
    await settled(app)
    return proposals


async def until(pilot: Pilot[int], condition: Callable[[], bool]) -> None:
    """Until ``condition`` holds, the app running meanwhile."""
    async with asyncio.timeout(10):
        while not condition():
            await pilot.pause()


def footer(app: DianaApp) -> list[tuple[str, str]]:
    return [(key.key_display, key.description) for key in app.query(FooterKey) if key.display]


async def test_moving_the_focus_rewrites_the_footer_keys_in_place(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await held_calls(app, 1)
        await pilot.press("f3")
        await pilot.pause()
        assert ("a", "Approve") in footer(app)
        mounted = set(app.query(FooterKey))
        for key in ("f2", "f3", "f6", "f3"):
            await pilot.press(key)
            await pilot.pause()
            assert set(app.query(FooterKey)) <= mounted  # none mounted again
        assert ("a", "Approve") in footer(app) and ("/", "Filter") not in footer(app)
        await pilot.press("f6")
        await pilot.pause()
        assert ("/", "Filter") in footer(app) and ("a", "Approve") not in footer(app)


async def test_the_footer_draws_each_key_it_rewrites_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key rewritten by F3 is measured and drawn from one rendering of its text, and a key
    showing again what it drew before (F3, F2, F3) renders nothing (Textual's key renders its
    text, and works out its parts' styles, each time it is measured or drawn)."""
    rendered: list[str] = []
    render = FooterKey.render

    def counting(key: FooterKey) -> Text:
        rendered.append(key.description)
        return render(key)

    monkeypatch.setattr(FooterKey, "render", counting)
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await held_calls(app, 1)
        rendered.clear()
        await pilot.press("f3")
        await pilot.pause()
        await pilot.pause()
        shown = footer(app)
        assert ("a", "Approve") in shown
        # Each at most once.
        assert rendered and sorted(rendered) == sorted(set(rendered))
        assert set(rendered) <= {description for _, description in shown}
        await pilot.press("f2")
        await pilot.pause()
        rendered.clear()
        await pilot.press("f3")
        await pilot.pause()
        await pilot.pause()
        assert footer(app) == shown
        assert rendered == []  # each key shows what it drew before


async def test_moving_the_focus_restyles_the_panes_not_what_is_inside_them(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await held_calls(app, 1)
        chat, approvals = app.query_one("#chat"), app.query_one(ApprovalsPane)
        await pilot.press("f2")
        await pilot.pause()
        restyled: list[DOMNode] = []
        update_nodes = app.stylesheet.update_nodes

        def spy(nodes: Iterable[DOMNode], animate: bool = False) -> None:
            nodes = list(nodes)
            restyled.extend(nodes)
            update_nodes(nodes, animate=animate)

        app.stylesheet.update_nodes = spy  # type: ignore[method-assign]
        blurred = app.focused
        await pilot.press("f3")
        await pilot.pause()
        # The two panes (their border), and the widgets that lost and took the focus.
        assert set(restyled) <= {chat, approvals, blurred, approvals.table}, restyled
        assert approvals.has_class("-focus-within") and not chat.has_class("-focus-within")


async def test_f3_on_a_small_terminal_restyles_the_panes_not_what_is_inside_them(
    tmp_path: Path,
) -> None:
    """One pane at a time: the pane shown and the pane hidden are restyled (their size and
    border) once each, not every widget in them, a long chat's every message included."""
    app = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await held_calls(app, 1)
        chat, approvals = app.query_one(ChatPane), app.query_one(ApprovalsPane)
        for n in range(20):
            chat.note(f"note {n}")
        await pilot.press("f2")
        await pilot.pause()
        assert chat.is_maximized
        restyled: list[DOMNode] = []
        update_nodes = app.stylesheet.update_nodes

        def spy(nodes: Iterable[DOMNode], animate: bool = False) -> None:
            nodes = list(nodes)
            restyled.extend(nodes)
            update_nodes(nodes, animate=animate)

        app.stylesheet.update_nodes = spy  # type: ignore[method-assign]
        blurred = app.focused
        await pilot.press("f3")
        await pilot.pause()
        assert approvals.is_maximized and not chat.is_maximized
        assert set(restyled) <= {chat, approvals, blurred, approvals.table}, restyled
        assert approvals.table.has_focus and approvals.has_class("-focus-within")
        # Each pane once, for both its changes (its size, its border).
        assert restyled.count(chat) == restyled.count(approvals) == 1, restyled


async def test_an_approved_call_starts_before_the_list_is_drawn_again(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first, second = await held_calls(app, 2)
        pane = app.query_one(ApprovalsPane)
        await pilot.press("f3")
        await pilot.pause()
        assert app.core is not None
        events = app.core._runtime.bus.subscribe()
        seen: list[Event] = []
        started_when_listed: list[bool] = []

        def listed(_pending: int) -> None:
            while not events.queue.empty():
                seen.append(events.queue.get_nowait())
            started = [e for e in seen if isinstance(e, CallStarted) and e.proposal == second]
            started_when_listed.append(bool(started))

        pane.watch(pane, "pending", listed, init=False)
        pane.DRAW_DECISION_WITHIN = 60.0  # what draws the list is the call starting
        await pilot.press("a")
        await work_done(app, "decisions")
        await settled(app)
        assert started_when_listed[:1] == [True]
        assert [row.key.value for row in pane.table.ordered_rows] == [first]


async def test_a_decision_leaves_the_list_before_the_database_has_it(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first, second = await held_calls(app, 2)
        pane = app.query_one(ApprovalsPane)
        await pilot.press("f3")
        await pilot.pause()
        assert pane.selected_proposal() == second
        # Another process holds the database's write lock: the decision cannot be written.
        holder = sqlite3.connect(app.paths.database, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            await pilot.press("a")
            await until(pilot, lambda: pane.border_title == "Approvals · 1 pending")
            assert [row.key.value for row in pane.table.ordered_rows] == [first]
            assert app.core is not None
            assert (
                await app.core._runtime.approvals.store.get(second)
            ).status is ProposalStatus.PENDING
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await work_done(app, "decisions")
        await settled(app)
        assert (
            await app.core._runtime.approvals.store.get(second)
        ).status is ProposalStatus.SUCCEEDED
        assert [row.key.value for row in pane.table.ordered_rows] == [first]
        assert pane.border_title == "Approvals · 1 pending"


async def test_a_decision_that_did_not_happen_brings_its_proposal_back(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        (proposal,) = await held_calls(app, 1)
        pane = app.query_one(ApprovalsPane)
        await pilot.press("f3")
        await pilot.pause()
        # The row as the person saw it no longer matches the call stored: nothing is decided.
        pane._shown[proposal] = pane._shown[proposal].model_copy(update={"digest": "other"})
        await pilot.press("a")
        await work_done(app, "decisions")
        await settled(app)
        assert app.core is not None
        assert (
            await app.core._runtime.approvals.store.get(proposal)
        ).status is ProposalStatus.PENDING
        assert [row.key.value for row in pane.table.ordered_rows] == [proposal]
        assert pane.border_title == "Approvals · 1 pending"


async def test_thousands_pending_list_the_newest_and_count_them_all(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        pane = app.query_one(ApprovalsPane)
        pane.PENDING_ROWS = 3
        proposals = await held_calls(app, 5)
        assert [row.key.value for row in pane.table.ordered_rows] == proposals[:1:-1]
        assert pane.border_title == "Approvals · 5 pending · newest 3 listed"
        await pilot.press("f3", "a")  # the newest decided: the next one takes its place
        await work_done(app, "decisions")
        await settled(app)
        assert [row.key.value for row in pane.table.ordered_rows] == proposals[3:0:-1]
        assert pane.border_title == "Approvals · 4 pending · newest 3 listed"


async def test_the_proposals_pending_at_start_stay_out_of_the_collectors_passes(
    tmp_path: Path,
) -> None:
    """Read once the app has started, they live as long as what start-up made, and are kept
    out of the collector's full passes as it is: thousands pending, each pass walked them all
    (a key held up for tens of milliseconds now and then)."""
    app = build_app(tmp_path)
    store = await ProposalStore.open(tmp_path / "data" / "diana.db")
    for n in range(3):
        await store.create(
            tool="obsidian_log",
            agent="obsidian",
            risk="reversible_with_delay",
            reason="test",
            origin="test",
            arguments={"entry": f"entry {n}"},
            confidence=None,
            correlation_id=f"c{n}",
            at=datetime(2026, 3, 14, 9, n, tzinfo=UTC),
        )
    await store.close()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.pause()
        pending = app.query_one(ApprovalsPane)._pending
        assert len(pending) == 3
        collected = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert not any(id(proposal) in collected for proposal in pending)
