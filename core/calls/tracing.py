"""Optional OpenTelemetry tracing.

Two kinds of span: ``agent_run``, one per chat turn (with ``task_description``, the message,
and ``result_type``, what the turn gave: AgentResponse, ToolGapReport, LLMProblem or
cancelled), and ``mcp_tool_call:{tool}``, one per tool call through the orchestrator (every
tool, not only MCP ones, keeps that span name), a child of its turn's span when the call is
made inside a turn. A span that failed has status ERROR and ``error_type`` and
``error_message``.

Tracing is on only when the package extra ``tracing`` is installed and
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and neither
OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise. Spans go over OTLP/HTTP,
or over gRPC when OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL is ``grpc`` and the extra
``tracing-grpc`` is installed. The service is OTEL_SERVICE_NAME, else ``tracing.service_name``;
OTEL_RESOURCE_ATTRIBUTES, the exporter's OTEL_EXPORTER_OTLP_* headers, timeout and
certificates, OTEL_TRACES_SAMPLER and OTEL_BSP_* are read as OpenTelemetry reads them. Spans
are sent within half a second of ending (OTEL_BSP_SCHEDULE_DELAY changes that). Otherwise
the module-level ``tracer`` stays None and the hot paths pay one attribute read and an
``is None`` test (bench/bench_tracing.py).

The provider is DIANA's own, never OpenTelemetry's global one, so installing it changes
nothing for other libraries (the MCP SDK has its own instrumentation) and tests can swap it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from ..config.settings import ConfigError
from ..models import ToolResult
from ..system.telemetry import redact

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
SERVICE_VARIABLE = "OTEL_SERVICE_NAME"
DELAY_VARIABLE = "OTEL_BSP_SCHEDULE_DELAY"
# Milliseconds a finished span may wait to be sent with others: a collector shows a call
# well within 2 s of its end (OpenTelemetry's own default is 5 s).
EXPORT_DELAY_MS = 500
# Each protocol's exporter module (the "tracing" and "tracing-grpc" extras).
EXPORTERS = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}
TASK_TEXT_LIMIT = 1000  # characters of a turn's message kept in its span
ERROR_TEXT_LIMIT = 1000  # characters of an error's message kept in a span
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
        error = None
        if not result.success:
            code = result.error_code.value if result.error_code else "failed"
            attributes["error_code"] = code
            error = (code, result.error or "failed")
        self._end(attributes, error)

    def finish_turn(
        self,
        tool_calls: int,
        confidence: float | None,
        result_type: str,
        error: tuple[str, str] | None = None,
    ) -> None:
        """``result_type``: what the turn gave; ``error``: (type, message) of its failure."""
        attributes: dict[str, Any] = {"tool_calls_count": tool_calls, "result_type": result_type}
        if confidence is not None:
            attributes["confidence_score"] = confidence
        self._end(attributes, error)

    def _end(self, attributes: dict[str, Any], error: tuple[str, str] | None) -> None:
        # Tracing must never turn a call's result, or a turn, into a crash.
        with contextlib.suppress(Exception):
            self._detach(self._token)
        with contextlib.suppress(Exception):
            if error is not None:
                from opentelemetry.trace import Status, StatusCode

                kind, message = error[0], shown_text(error[1], ERROR_TEXT_LIMIT)
                attributes.update(error_type=kind, error_message=message)
                self.span.set_status(Status(StatusCode.ERROR, message))
            self.span.set_attributes(attributes)
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
        """A provider that sends every span to ``exporter`` (in batches, for a network one,
        sent at most EXPORT_DELAY_MS after a span ends unless OTEL_BSP_SCHEDULE_DELAY says).
        The service is ``service_name`` unless OTEL_SERVICE_NAME names one."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; what is given
        # here would override them, so the configured name is given only in their absence.
        named = os.environ.get(SERVICE_VARIABLE, "").strip()
        given = {} if named else {"service.name": service_name}
        provider = TracerProvider(resource=Resource.create(given), shutdown_on_exit=False)
        if batch:
            delay = None if os.environ.get(DELAY_VARIABLE, "").strip() else EXPORT_DELAY_MS
            processor: Any = BatchSpanProcessor(exporter, schedule_delay_millis=delay)
        else:
            processor = SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        return cls(provider)

    def start_turn(self, correlation_id: str, model: str, task: str = "") -> ActiveSpan:
        """A turn's span; ``task`` is the person's message (secrets masked, cut short)."""
        return self._start(
            TURN_SPAN,
            {
                "correlation_id": correlation_id,
                "model": model,
                "task_description": shown_text(task, TASK_TEXT_LIMIT),
            },
        )

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


def shown_text(text: str, limit: int) -> str:
    """Text fit for a span, which leaves the machine: secrets masked, at most ``limit``."""
    masked = str(redact(text))
    return masked if len(masked) <= limit else masked[: limit - 1] + "…"


def _variable(*names: str) -> tuple[str, str] | None:
    """The first of ``names`` that is set, with its value."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def protocol_installed(chosen: str) -> bool:
    """Whether the exporter for protocol ``chosen`` (http/protobuf or grpc) is installed."""
    return _installed(EXPORTERS[chosen])


def protocol() -> str | None:
    """How spans are sent as the OTEL_* variables ask: "http/protobuf", "grpc", or None
    (tracing off, or OpenTelemetry not installed). ConfigError naming the variable for what
    diana cannot do: asked for by name, it is never dropped in silence."""
    if _variable(*ENDPOINT_VARIABLES) is None:
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = _variable("OTEL_TRACES_EXPORTER")
    if exporters is not None:
        chosen = {e.strip().lower() for e in exporters[1].split(",")} - {""}
        if chosen == {"none"}:
            return None
        if "otlp" not in chosen:
            raise ConfigError(exporters[0], f"{exporters[1]!r}: diana sends spans over otlp only")
    asked = _variable(*PROTOCOL_VARIABLES)
    chosen_protocol = asked[1] if asked else "http/protobuf"
    if chosen_protocol not in EXPORTERS:
        raise ConfigError(
            asked[0] if asked else PROTOCOL_VARIABLES[1],
            f"{chosen_protocol!r}: diana sends OTLP as http/protobuf or grpc",
        )
    if not protocol_installed(chosen_protocol):
        if chosen_protocol == "grpc":
            raise ConfigError(
                asked[0] if asked else PROTOCOL_VARIABLES[1],
                "grpc needs the OTLP gRPC exporter: install diana-tui[tracing-grpc]",
            )
        return None  # the "tracing" extra is not installed
    return chosen_protocol


def configure(service_name: str) -> Tracing | None:
    """Tracing as the OTEL_* variables ask (see the module's text and ``protocol``). The
    exporter reads the endpoint, headers, timeout and certificates from them itself."""
    chosen = protocol()
    if chosen is None:
        return None
    exporter: SpanExporter
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        exporter = GrpcSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    return Tracing.with_exporter(exporter, service_name, batch=True)


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
    "protocol",
    "protocol_installed",
    "result_count",
    "tracer",
    "uninstall",
]
