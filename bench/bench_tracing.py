"""What tracing costs a tool call: `orchestrator.execute` on a trivial tool with tracing off (the
module-level tracer is None), on (spans into an in-memory exporter), and, as the baseline, an
orchestrator whose `_execute` has the tracing lines taken out of its source. Then how soon a
call's span reaches a collector: through the real OTLP exporters (HTTP, and gRPC when its
extra is installed) to a local receiver, with the export delay diana sets, from the end of
the call to the span's arrival, the runtime left running (goal: under 2 s).

Run from the repository root:  .venv/bin/python bench/bench_tracing.py
Every figure is measured in this run; the variants take turns, round by round, so drift in
the machine's speed falls on all of them alike.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.calls import orchestrator as orchestrator_module  # noqa: E402
from diana.core.calls import tracing  # noqa: E402
from diana.core.calls.agents import FunctionAgent, FunctionTool  # noqa: E402
from diana.core.calls.orchestrator import Orchestrator  # noqa: E402
from diana.core.models import ToolDefinition  # noqa: E402

CALLS = 20_000
ROUNDS = 7
ARRIVALS = 10  # calls whose span is waited for at the collector, per protocol
TRACING_LINES = [
    "tracer = tracing.tracer",
    "span = tracer.start_tool_call(tool_name, params, confidence, cid) if tracer else None",
    "if span is not None:",
    "span.finish_tool_call(result, latency)",
]


async def noop(params: dict[str, Any]) -> str:
    return "ok"


def without_tracing() -> type[Orchestrator]:
    """Orchestrator with the tracing lines removed from `_execute` (fails loudly if they moved)."""
    lines = inspect.getsource(Orchestrator._execute).splitlines(keepends=True)
    kept = [line for line in lines if line.strip() not in TRACING_LINES]
    if len(lines) - len(kept) != len(TRACING_LINES):
        raise SystemExit("bench_tracing: _execute changed; update TRACING_LINES")
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent("".join(kept)), vars(orchestrator_module), namespace)
    return type("UntracedOrchestrator", (Orchestrator,), {"_execute": namespace["_execute"]})


async def build(kind: type[Orchestrator]) -> Orchestrator:
    orchestrator = kind()
    definition = ToolDefinition(
        name="noop", description="no-op", parameters={"type": "object", "properties": {}}
    )
    orchestrator.register_agent_factory(
        "bench", lambda: FunctionAgent("bench", "Bench", [FunctionTool(definition, noop)])
    )
    await orchestrator.start_all()
    return orchestrator


async def per_call_us(orchestrator: Orchestrator, calls: int) -> float:
    """Median of per-call times over ``calls`` calls, in microseconds."""
    samples = []
    clock = time.perf_counter_ns
    execute = orchestrator.execute
    for _ in range(calls):
        start = clock()
        await execute("noop", {})
        samples.append(clock() - start)
    return statistics.median(samples) / 1000


async def main() -> None:
    try:
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        print("bench_tracing: needs the tracing extra (pip install -e '.[tracing]')")
        return

    baseline = await build(without_tracing())
    traced = await build(Orchestrator)
    exporter = InMemorySpanExporter()
    on = tracing.Tracing.with_exporter(exporter, "bench")
    figures: dict[str, list[float]] = {"no hook": [], "off": [], "on": []}
    for _ in range(ROUNDS):
        tracing.install(None)
        figures["no hook"].append(await per_call_us(baseline, CALLS))
        figures["off"].append(await per_call_us(traced, CALLS))
        tracing.install(on)
        figures["on"].append(await per_call_us(traced, CALLS))
        tracing.install(None)
        exporter.clear()
    on.provider.shutdown()

    best = {name: min(values) for name, values in figures.items()}
    spread = {name: max(v) - min(v) for name, v in figures.items()}
    print(f"orchestrator.execute on a no-op tool, median per call, best of {ROUNDS} rounds")
    print(f"  of {CALLS:,} calls (spread between rounds in brackets):")
    for name in ("no hook", "off", "on"):
        print(f"  tracing {name:<8} {best[name]:7.2f} µs  [{spread[name]:.2f}]")
    print(f"  off - no hook: {best['off'] - best['no hook']:+.2f} µs per call")
    print(
        f"  on - off:      {best['on'] - best['off']:+.2f} µs per call "
        f"({best['on'] / best['off']:.2f}x)"
    )


async def arrival_ms(protocol: str) -> list[float] | None:
    """Milliseconds from the end of a call to its span's arrival at a local collector, for
    ARRIVALS calls one after another; None when the protocol's exporter is not installed."""
    if not tracing.protocol_installed(protocol):
        return None
    from tests.fixtures.otlp_receiver import OTLPReceiver  # with the tracing extra only

    orchestrator = await build(Orchestrator)
    figures: list[float] = []
    with OTLPReceiver("grpc" if protocol == "grpc" else "http") as receiver:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
        active = tracing.configure("bench")
        assert active is not None
        tracing.install(active)
        try:
            for index in range(ARRIVALS):
                await orchestrator.execute("noop", {})
                ended = time.monotonic()
                await asyncio.to_thread(receiver.wait_for_count, index + 1, 10.0)
                figures.append((receiver.spans[index].received_at - ended) * 1000)
        finally:
            tracing.uninstall(active)
            await active.close()
            for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"):
                os.environ.pop(name, None)
    return figures


async def arrivals() -> None:
    if not tracing.protocol_installed("http/protobuf"):
        return  # main() said what is missing
    print(f"a call's span at a local collector, {ARRIVALS} calls, the runtime running")
    print(f"  (export delay {tracing.EXPORT_DELAY_MS} ms; goal: within 2,000 ms of the call):")
    for protocol in ("http/protobuf", "grpc"):
        figures = await arrival_ms(protocol)
        if figures is None:
            print(f"  {protocol:<14} not installed (the tracing-grpc extra)")
            continue
        print(
            f"  {protocol:<14} median {statistics.median(figures):6.0f} ms, "
            f"max {max(figures):6.0f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
    asyncio.run(arrivals())
