"""Approvals: creating a proposal, listing many, and keypress-to-execution in the app.

Run from the repository root:  .venv/bin/python bench/bench_approvals.py
Every figure is measured in this run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.events import Key  # noqa: E402

from core.approvals.store import ProposalStore  # noqa: E402
from core.events import CallStarted  # noqa: E402
from tests.waits import settled, started  # noqa: E402
from tui.app import make_app  # noqa: E402

CREATES = 500
PENDING = 10_000
KEYPRESSES = 20
NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


async def create_and_list(tmp: Path) -> tuple[float, float]:
    store = await ProposalStore.open(tmp / "bench.db")
    try:

        async def create(path: str) -> None:
            await store.create(
                tool="files_delete_file",
                agent="mcp-files",
                arguments={"path": path},
                risk="irreversible",
                reason="bench",
                confidence=None,
                correlation_id="c",
                origin="bench",
                at=NOW,
            )

        samples = []
        for i in range(CREATES):
            start = time.perf_counter()
            await create(f"/tmp/{i}")
            samples.append(time.perf_counter() - start)
        for i in range(PENDING - CREATES):
            await create(f"/tmp/more-{i}")
        listing = []
        for _ in range(5):
            start = time.perf_counter()
            rows = await store.select(limit=PENDING)
            listing.append(time.perf_counter() - start)
            assert len(rows) == PENDING
        return statistics.median(samples), statistics.median(listing)
    finally:
        await store.close()


async def keypress_to_execution(tmp: Path) -> list[float]:
    """In the app: press `a` on a pending proposal; time until its call starts."""
    config, data = tmp / "app-config", tmp / "app-data"
    config.mkdir()
    (config / "mcp-servers.json").write_text("[]")
    (config / "settings.json").write_text(json.dumps({"obsidian": {"vault": str(tmp / "v")}}))
    app = make_app(config, data)
    samples = []
    async with app.run_test(size=(160, 48)) as pilot:
        await started(app)
        assert app.runtime is not None
        events = app.runtime.bus.subscribe()
        for i in range(KEYPRESSES):
            held = await app.runtime.orchestrator.execute("obsidian_log", {"entry": f"e{i}"})
            assert held.data and "proposal_id" in held.data
            await settled(app)
            await pilot.press("f3")
            await pilot.pause()
            while not events.queue.empty():
                events.queue.get_nowait()
            # The key enters where a terminal's would: the driver, not the test pilot
            # (whose press() also waits for the screen to settle).
            key = Key("a", "a")
            key.set_sender(app)
            assert app._driver is not None
            start = time.perf_counter()
            app._driver.send_message(key)
            while not isinstance(await events.get(), CallStarted):
                pass
            samples.append(time.perf_counter() - start)
            await settled(app)
            await settled(app)
    return samples


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        create, listing = await create_and_list(tmp)
        presses = await keypress_to_execution(tmp)
    print(
        f"create and persist a proposal, median of {CREATES}: {create * 1000:.2f} ms"
        "  (goal <= 5 ms)"
    )
    print(
        f"list {PENDING:,} pending proposals, median of 5: {listing * 1000:.1f} ms"
        "  (goal <= 200 ms)"
    )
    print(
        f"keypress `a` to execution start in the app, median of {KEYPRESSES}: "
        f"{statistics.median(presses) * 1000:.1f} ms, max {max(presses) * 1000:.1f} ms"
        "  (goal <= 50 ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
