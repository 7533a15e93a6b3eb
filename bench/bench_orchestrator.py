"""Orchestrator dispatch overhead, its scaling with the registry, and bounded health checks.

Run from the repository root:  .venv/bin/python bench/bench_orchestrator.py
Every figure is measured in this run; ratios compare figures from the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.calls.agents import FunctionAgent, FunctionTool  # noqa: E402
from diana.core.calls.orchestrator import Orchestrator  # noqa: E402
from diana.core.models import AgentHealth, AgentManifest, AgentState, ToolDefinition, ToolResult  # noqa: E402
from diana.core.storage.execution_log import ExecutionLog  # noqa: E402
from diana.core.storage.schema import connect  # noqa: E402
from diana.core.system.clock import SystemClock  # noqa: E402
from diana.core.system.telemetry import StructuredLog  # noqa: E402

CALLS = 20_000
ROUNDS = 5
SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 100}, "n": {"type": "integer"}},
    "required": ["text"],
    "additionalProperties": False,
}
ARGS = {"text": "hello", "n": 3}


async def noop(params: dict[str, Any]) -> str:
    return "ok"


def agent(index: int, tools_per_agent: int) -> FunctionAgent:
    return FunctionAgent(
        f"agent-{index}",
        f"Agent {index}",
        [
            FunctionTool(
                ToolDefinition(name=f"tool_{index}_{j}", description="no-op", parameters=SCHEMA),
                noop,
            )
            for j in range(tools_per_agent)
        ],
    )


async def build(agents: int, tools_per_agent: int, tmp: Path) -> tuple[Orchestrator, Any, Any]:
    clock = SystemClock()
    db = await connect(tmp / f"bench-{agents}.db")
    log = StructuredLog(tmp / f"bench-{agents}.jsonl", clock)
    execution_log = ExecutionLog(db, log)
    execution_log.start()
    orch = Orchestrator(log=log, execution_log=execution_log, clock=clock)
    for i in range(agents):
        orch.register_agent_factory(f"agent-{i}", lambda i=i: agent(i, tools_per_agent))
    await orch.start_all()
    return orch, execution_log, db


async def per_call_ns(call: Any, calls: int) -> list[int]:
    """Time each call alone; let the log writer run between calls, untimed."""
    samples = []
    clock = time.perf_counter_ns
    for i in range(calls):
        start = clock()
        await call()
        samples.append(clock() - start)
        if i % 64 == 0:
            await asyncio.sleep(0)
    return samples


async def dispatch(agents: int, tools_per_agent: int, tmp: Path) -> dict[str, float]:
    orch, execution_log, db = await build(agents, tools_per_agent, tmp)
    # Call the last-registered tool, so lookups cannot profit from being first.
    tool_name = f"tool_{agents - 1}_{tools_per_agent - 1}"
    direct_agent = agent(agents - 1, tools_per_agent)

    async def through_orchestrator() -> None:
        await orch.execute(tool_name, ARGS)

    async def direct() -> None:
        await direct_agent.execute(tool_name, ARGS)

    medians_orch, medians_direct = [], []
    for _ in range(ROUNDS):
        medians_orch.append(statistics.median(await per_call_ns(through_orchestrator, CALLS)))
        medians_direct.append(statistics.median(await per_call_ns(direct, CALLS)))
        await execution_log.flush()
    # Throughput including the log writer's share: N calls, then wait for the log.
    start = time.perf_counter()
    for _ in range(CALLS):
        await orch.execute(tool_name, ARGS)
    await execution_log.flush()
    with_writer_us = (time.perf_counter() - start) / CALLS * 1e6
    await orch.shutdown()
    await execution_log.close()
    await db.close()
    total_ms = min(medians_orch) / 1000
    direct_ms = min(medians_direct) / 1000
    return {
        "execute_us": total_ms,
        "direct_us": direct_ms,
        "overhead_us": total_ms - direct_ms,
        "with_writer_us": with_writer_us,
    }


class HealthAgent:
    def __init__(self, agent_id: str, hang: bool) -> None:
        self.agent_id = agent_id
        self.hang = hang

    async def initialize(self) -> None:
        return None

    async def execute(self, tool_name: str, params: dict[str, Any]) -> ToolResult:
        return ToolResult.ok()

    async def shutdown(self) -> None:
        return None

    def get_manifest(self) -> AgentManifest:
        return AgentManifest(id=self.agent_id, name=self.agent_id)

    async def health(self) -> AgentHealth:
        if self.hang:
            await asyncio.Event().wait()
        await asyncio.sleep(0.01)  # a little real work per check
        from datetime import UTC, datetime

        return AgentHealth(
            agent_id=self.agent_id,
            status="healthy",
            state=AgentState.RUNNING,
            last_checked=datetime.now(UTC),
        )


async def health_with_one_hung() -> tuple[float, int]:
    orch = Orchestrator()
    for i in range(100):
        orch.register_agent_factory(f"h-{i}", lambda i=i: HealthAgent(f"h-{i}", hang=i == 50))
    await orch.start_all()
    start = time.perf_counter()
    reports = await orch.health()
    elapsed = time.perf_counter() - start
    return elapsed, sum(r.status == "unhealthy" for r in reports)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        one = await dispatch(1, 1, tmp)
        mid = await dispatch(10, 5, tmp)
        big = await dispatch(100, 50, tmp)
    print(
        f"dispatch, median of {CALLS:,} calls, best of {ROUNDS} rounds "
        "(no-op async tool, schema validation, correlation id, metrics, events, log):"
    )
    for label, figures in (
        ("1 agent / 1 tool", one),
        ("10 agents / 50 tools", mid),
        ("100 agents / 5,000 tools", big),
    ):
        print(
            f"  {label:<26} execute {figures['execute_us']:7.1f} µs   "
            f"direct agent call {figures['direct_us']:5.1f} µs   "
            f"overhead {figures['overhead_us']:6.1f} µs   "
            f"with log writer {figures['with_writer_us']:6.1f} µs/call"
        )
    print(
        f"  overhead ratio 10/50 vs 1/1:      {mid['overhead_us'] / one['overhead_us']:.2f}x"
        "  (goal <= 1.20x)"
    )
    print(
        f"  overhead ratio 100/5,000 vs 1/1:  {big['overhead_us'] / one['overhead_us']:.2f}x"
        "  (goal <= 1.20x)"
    )
    print(f"  goal: overhead <= 100 µs -> {'met' if one['overhead_us'] <= 100 else 'NOT met'}")
    elapsed, unhealthy = await health_with_one_hung()
    print(
        f"health of 100 agents, one hung: {elapsed:.3f} s, {unhealthy} reported unhealthy"
        "  (goal <= 1.1 s)"
    )


if __name__ == "__main__":
    asyncio.run(main())
