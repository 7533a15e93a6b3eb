"""OpenTelemetry spans: a chat turn through a fake Ollama is an `agent_run` span whose tool call
is a child `mcp_tool_call:{tool}` span with the tool-call attributes; secrets never reach a span;
tracing is on only with an OTLP endpoint set, and off it makes no span. Through the real OTLP
exporters, over HTTP and gRPC, spans reach a local collector while the app runs, under the
service and resource the standard OTEL_* variables name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

# Spans need the tracing extra; without it this module is skipped, not an import error.
pytest.importorskip("opentelemetry.sdk", reason="tracing needs pip install diana-tui[tracing]")

from diana.core.calls import tracing
from diana.core.calls.tracing import Tracing
from diana.core.config.settings import ConfigError
from diana.core.runtime import Profile, Runtime
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .fixtures.otlp_receiver import OTLPReceiver


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for the length of the test."""
    exporter = InMemorySpanExporter()
    active = Tracing.with_exporter(exporter, "diana-test")
    tracing.install(active)
    try:
        yield exporter
    finally:
        tracing.uninstall(active)
        active.provider.shutdown()


OTEL_VARIABLES = (
    *tracing.ENDPOINT_VARIABLES,
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_BSP_SCHEDULE_DELAY",
)


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def configure_llm(config_dir: Path, host: str) -> None:
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["llm"] = {"host": host}
    path.write_text(json.dumps(settings))


def named(finished: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in finished if s.name == name]
    return span


async def test_a_turn_is_an_agent_run_span_with_a_child_span_per_tool_call(
    config_dir: Path, data_dir: Path, spans: InMemorySpanExporter
) -> None:
    with FakeOllama() as fake:
        fake.add(
            {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]},
            {"content": "It is 09:26 UTC."},
        )
        configure_llm(config_dir, fake.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            outcome = await runtime.chat.run_turn("what time is it?", lambda _event: None)
            (record,) = calls = await runtime.recent_calls()

    assert outcome.response is not None and outcome.response.confidence == 0.9
    finished = spans.get_finished_spans()
    assert sorted(s.name for s in finished) == ["agent_run", "mcp_tool_call:get_current_time"]
    turn = named(finished, "agent_run")
    tool = named(finished, "mcp_tool_call:get_current_time")
    assert turn.resource.attributes["service.name"] == "diana-test"
    assert dict(turn.attributes or {}) == {
        "correlation_id": outcome.correlation_id,
        "model": "qwen3:30b-a3b",
        "task_description": "what time is it?",
        "tool_calls_count": 1,
        "confidence_score": 0.9,
        "result_type": "AgentResponse",
    }
    assert turn.parent is None
    assert tool.parent is not None and turn.context is not None and tool.context is not None
    assert tool.parent.span_id == turn.context.span_id
    assert tool.context.trace_id == turn.context.trace_id
    attributes = dict(tool.attributes or {})
    assert attributes["tool_name"] == "get_current_time"
    assert json.loads(str(attributes["parameters"])) == {"timezone": "UTC"}
    result = outcome.response.tool_calls[0].result
    assert attributes["result_count"] == len(result) > 1
    assert attributes["execution_duration_ms"] == calls[0].latency_ms == record.latency_ms
    assert attributes["correlation_id"] == outcome.correlation_id
    assert "confidence_score" not in attributes  # the chat gives none for a call
    assert tool.status.status_code is StatusCode.UNSET


async def test_secrets_are_redacted_and_a_call_outside_a_turn_is_a_root_span(
    config_dir: Path, data_dir: Path, spans: InMemorySpanExporter
) -> None:
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        result = await runtime.orchestrator.execute(
            "get_current_time",
            {"timezone": "UTC", "api_key": "sk-live-123", "auth": {"password": "hunter2"}},
            confidence=0.7,
        )
    assert not result.success  # the schema allows no such arguments
    (span,) = spans.get_finished_spans()
    assert span.name == "mcp_tool_call:get_current_time" and span.parent is None
    attributes = dict(span.attributes or {})
    text = str(attributes["parameters"])
    assert "sk-live-123" not in text and "hunter2" not in text
    assert json.loads(text) == {"api_key": "***", "auth": {"password": "***"}, "timezone": "UTC"}
    assert attributes["confidence_score"] == 0.7
    assert attributes["result_count"] == 0
    assert attributes["error_code"] == attributes["error_type"] == "invalid_arguments"
    assert attributes["error_message"] == result.error == span.status.description
    assert span.status.status_code is StatusCode.ERROR


async def test_without_an_endpoint_tracing_is_off_and_makes_no_span(
    config_dir: Path, data_dir: Path
) -> None:
    exporter = InMemorySpanExporter()
    made = Tracing.with_exporter(exporter, "diana-test")
    tracing.install(made)
    tracing.uninstall(made)  # what a closing runtime does: nothing is traced any more
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        assert runtime.tracing is None and tracing.tracer is None
        assert (await runtime.orchestrator.execute("get_current_time", {})).success
    assert exporter.get_finished_spans() == ()


async def test_an_endpoint_turns_tracing_on_under_the_configured_service_name(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on the discard port; no span is made, so nothing is sent.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["tracing"] = {"service_name": "diana-on-my-laptop"}
    path.write_text(json.dumps(settings))
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        active = runtime.tracing
        assert active is not None and tracing.tracer is active
        assert active.provider.resource.attributes["service.name"] == "diana-on-my-laptop"
    assert tracing.tracer is None


def set_service_name(config_dir: Path, name: str) -> None:
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["tracing"] = {"service_name": name}
    path.write_text(json.dumps(settings))


# Spans are sent half a second after they end; OpenTelemetry's own default would be 5 s. The
# wait below is only how long a test may hang, well past the one and short of the other.
ARRIVAL = 4.0


async def test_spans_reach_a_local_collector_over_http_under_the_otel_service_name(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_service_name(config_dir, "diana-on-my-laptop")  # the variable wins over settings
    with OTLPReceiver("http") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "paias-agent-layer")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            failed = await runtime.orchestrator.execute("get_current_time", {"timezone": "Mars"})
            # Still running: the span is sent on its own, not by closing.
            span = await asyncio.to_thread(
                receiver.wait_for, "mcp_tool_call:get_current_time", ARRIVAL
            )
    assert span.service == "paias-agent-layer"
    assert span.resource["deployment.environment"] == "test"
    assert span.status_code == 2  # error
    assert span.attributes["error_type"] == "invalid_arguments"
    assert span.attributes["error_message"] == failed.error == span.status_message
    assert span.attributes["tool_name"] == "get_current_time"


async def test_a_turn_reaches_a_local_collector_over_grpc(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OTLPReceiver("grpc") as receiver, FakeOllama() as fake:
        fake.add(
            {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]},
            {"content": "It is 09:26 UTC."},
        )
        configure_llm(config_dir, fake.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.chat.run_turn("what time is it?", lambda _event: None)
            turn = await asyncio.to_thread(receiver.wait_for, "agent_run", ARRIVAL)
            tool = await asyncio.to_thread(
                receiver.wait_for, "mcp_tool_call:get_current_time", ARRIVAL
            )
    assert turn.service == "diana"
    assert turn.attributes["task_description"] == "what time is it?"
    assert turn.attributes["result_type"] == "AgentResponse"
    assert turn.attributes["tool_calls_count"] == 1
    assert tool.parent_span_id == turn.span_id and tool.trace_id == turn.trace_id


async def test_a_failed_turn_says_what_failed(
    config_dir: Path, data_dir: Path, spans: InMemorySpanExporter
) -> None:
    with FakeOllama() as fake:
        fake.add({"status": 500, "error": "the GPU caught fire"})
        configure_llm(config_dir, fake.url)
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            outcome = await runtime.chat.run_turn("summarise my day", lambda _event: None)
    assert outcome.problem is not None
    turn = named(spans.get_finished_spans(), "agent_run")
    attributes = dict(turn.attributes or {})
    assert attributes["result_type"] == "LLMProblem"
    assert attributes["error_type"] == outcome.problem.code.value
    assert attributes["error_message"] == outcome.problem.message
    assert turn.status.status_code is StatusCode.ERROR


async def test_otel_variables_turn_tracing_off_or_are_named_when_they_cannot_be_followed(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.configure("diana") is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.configure("diana") is None
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ConfigError) as caught:
        await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        )
    assert str(caught.value) == (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json': diana sends OTLP as http/protobuf or grpc"
    )
    assert not data_dir.exists()  # named before anything was written
