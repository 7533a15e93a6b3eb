"""Local tools: what a call costs beyond starting a Python process (the goal: under 200 ms of
overhead between the request and the tool's own work).

Run from the repository root:  .venv/bin/python bench/bench_local_tools.py
Every figure is measured in this run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.runtime import Profile, Runtime  # noqa: E402
from diana.core.system.clock import SystemClock  # noqa: E402
from diana.core.tools.tool_process import run_process  # noqa: E402

CALLS = 30


async def bare_process() -> float:
    """The floor: starting a Python interpreter that does nothing, through the same helper."""
    start = time.perf_counter()
    await run_process([sys.executable, "-c", "pass"])
    return time.perf_counter() - start


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        config = tmp / "config"
        (config / "tools").mkdir(parents=True)
        (config / "mcp-servers.json").write_text("[]")
        (config / "settings.json").write_text(json.dumps({"obsidian": {"vault": str(tmp)}}))
        (config / "tools" / "echo.py").write_text("def run(arguments):\n    return arguments\n")
        entry = {"name": "echo", "description": "Echo.", "script": "echo.py", "risk": "reversible"}
        (config / "tools.json").write_text(json.dumps({"tools": [entry]}))
        runtime = await Runtime.open(
            Profile.APP.but(servers="none", share=False, watch=False),
            config,
            tmp / "data",
            clock=SystemClock(),
        )
        try:
            floor, calls = [], []
            for i in range(CALLS):
                floor.append(await bare_process())
                start = time.perf_counter()
                result = await runtime.orchestrator.execute("echo", {"n": i})
                calls.append(time.perf_counter() - start)
                assert result.success and result.data == {"n": i}
        finally:
            await runtime.close()
    bare, call = statistics.median(floor), statistics.median(calls)
    print(
        f"local tool call, median of {CALLS}: {call * 1000:.1f} ms; a bare Python start "
        f"{bare * 1000:.1f} ms; overhead beyond it {(call - bare) * 1000:.1f} ms "
        "(goal < 200 ms for the whole call)"
    )


if __name__ == "__main__":
    asyncio.run(main())
