"""Optional OpenTelemetry tracing.

Two kinds of span: ``agent_run``, one per chat turn, and ``mcp_tool_call:{tool}``, one per
tool call through the orchestrator (every tool, not only MCP ones, keeps that span name),
a child of its turn's span when the call is made inside a turn.

Tracing is on only when the package extra ``tracing`` is installed and
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; spans then go over
OTLP/HTTP under ``tracing.service_name``. Otherwise the module-level ``tracer`` stays None and
the hot paths pay one attribute read and an ``is None`` test (bench/bench_tracing.py).

The provider is DIANA's own, never OpenTelemetry's global one, so installing it changes
nothing for other libraries (the MCP SDK has its own instrumentation) and tests can swap it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from .models import ToolResult
from .telemetry import redact

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SHUTDOWN_WAIT = 2.0  # seconds a closing runtime waits for the last spans to be sent
TURN_SPAN = "agent_run"
TOOL_SPAN_PREFIX = "mcp_tool_call:"

# The active tracing, read on every call; None means tracing is off.
tracer: Tracing | None = None


class ActiveSpan:
    """A span that is current (in this task's context) until it is finished."""

    __slots__ = ("_detach", "_token", "span")

    def __init__(self, span: Span, token: object, detach: Any) -> None:
        self.span = span
        self._token = token
        self._detach = detach

    def finish_tool_call(self, result: ToolResult, latency: float) -> None:
        attributes: dict[str, Any] = {
            "result_count": result_count(result),
            "execution_duration_ms": round(latency * 1000, 3),
            "success": result.success,
        }
        if not result.success:
            attributes["error_code"] = result.error_code.value if result.error_code else "failed"
        self._end(attributes, None if result.success else result.error or "failed")

    def finish_turn(self, tool_calls: int, confidence: float | None) -> None:
        attributes: dict[str, Any] = {"tool_calls_count": tool_calls}
        if confidence is not None:
            attributes["confidence_score"] = confidence
        self._end(attributes, None)

    def _end(self, attributes: dict[str, Any], error: str | None) -> None:
        # Tracing must never turn a call's result, or a turn, into a crash.
        with contextlib.suppress(Exception):
            self._detach(self._token)
        with contextlib.suppress(Exception):
            self.span.set_attributes(attributes)
            if error is not None:
                from opentelemetry.trace import Status, StatusCode

                self.span.set_status(Status(StatusCode.ERROR, redact(error)))
            self.span.end()


class Tracing:
    """Spans for turns and tool calls, through one TracerProvider of DIANA's own."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import context, trace

        self.provider = provider
        self._tracer = provider.get_tracer("diana")
        self._attach = context.attach
        self._detach = context.detach
        self._in_context = trace.set_span_in_context

    @classmethod
    def with_exporter(
        cls, exporter: SpanExporter, service_name: str, *, batch: bool = False
    ) -> Tracing:
        """A provider that sends every span to ``exporter`` (in batches, for a network one)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}), shutdown_on_exit=False
        )
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        return cls(provider)

    def start_turn(self, correlation_id: str, model: str) -> ActiveSpan:
        return self._start(TURN_SPAN, {"correlation_id": correlation_id, "model": model})

    def start_tool_call(
        self,
        tool_name: str,
        params: dict[str, Any],
        confidence: float | None,
        correlation_id: str,
    ) -> ActiveSpan:
        """A span for one call; ``params`` are its arguments as they may be shown (masked
        again here: a span leaves the machine, so nothing secret may reach one)."""
        attributes: dict[str, Any] = {
            "tool_name": tool_name,
            "parameters": parameters_text(redact(params)),
            "correlation_id": correlation_id,
        }
        if confidence is not None:
            attributes["confidence_score"] = confidence
        return self._start(TOOL_SPAN_PREFIX + tool_name, attributes)

    def _start(self, name: str, attributes: dict[str, Any]) -> ActiveSpan:
        span = self._tracer.start_span(name, attributes=attributes)
        return ActiveSpan(span, self._attach(self._in_context(span)), self._detach)

    async def close(self, within: float = SHUTDOWN_WAIT) -> None:
        """Send what is left and stop, waiting at most ``within`` seconds: a collector that
        is down must not hold up quitting. The sending goes on in a daemon thread."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def shut_down() -> None:
            with contextlib.suppress(Exception):
                self.provider.shutdown()
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(finished)

        threading.Thread(target=shut_down, name="tracing-shutdown", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done, within)


def parameters_text(shown: dict[str, Any]) -> str:
    """A call's arguments, as they may be shown (secrets already hidden), as JSON text."""
    try:
        return json.dumps(shown, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return repr(shown)


def result_count(result: ToolResult) -> int:
    """How many things a result holds: a list's or dict's length, 1 for a value, 0 for none."""
    data = result.data
    if data is None:
        return 0
    if isinstance(data, list | dict | tuple):
        return len(data)
    return 1


def configure(service_name: str) -> Tracing | None:
    """Tracing over OTLP/HTTP when an endpoint is set and OpenTelemetry is installed (the
    exporter reads the endpoint, headers and timeout from the OTEL_* variables itself)."""
    if not any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return Tracing.with_exporter(OTLPSpanExporter(), service_name, batch=True)
    except ImportError:  # the "tracing" extra is not installed
        return None


def install(tracing: Tracing | None) -> None:
    """Make ``tracing`` the active one (None turns tracing off)."""
    global tracer
    tracer = tracing


def uninstall(tracing: Tracing) -> None:
    """Turn tracing off if ``tracing`` is the active one (another runtime may have replaced
    it since)."""
    global tracer
    if tracer is tracing:
        tracer = None


__all__ = [
    "ActiveSpan",
    "Tracing",
    "configure",
    "install",
    "parameters_text",
    "result_count",
    "tracer",
    "uninstall",
]
