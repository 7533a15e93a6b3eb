"""OpenTelemetry spans: a chat turn through a fake Ollama is an `agent_run` span whose tool call
is a child `mcp_tool_call:{tool}` span with the tool-call attributes; secrets never reach a span;
tracing is on only with an OTLP endpoint set, and off it makes no span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from core import tracing
from core.runtime import Runtime
from core.tracing import Tracing

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama


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


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in tracing.ENDPOINT_VARIABLES:
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
        async with await Runtime.open(config_dir, data_dir, clock=stepping_clock()) as runtime:
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
        "tool_calls_count": 1,
        "confidence_score": 0.9,
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
    async with await Runtime.open(config_dir, data_dir, clock=stepping_clock()) as runtime:
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
    assert attributes["error_code"] == "invalid_arguments"
    assert span.status.status_code is StatusCode.ERROR


async def test_without_an_endpoint_tracing_is_off_and_makes_no_span(
    config_dir: Path, data_dir: Path
) -> None:
    exporter = InMemorySpanExporter()
    made = Tracing.with_exporter(exporter, "diana-test")
    tracing.install(made)
    tracing.uninstall(made)  # what a closing runtime does: nothing is traced any more
    async with await Runtime.open(config_dir, data_dir, clock=stepping_clock()) as runtime:
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
    async with await Runtime.open(config_dir, data_dir, clock=stepping_clock()) as runtime:
        active = runtime.tracing
        assert active is not None and tracing.tracer is active
        assert active.provider.resource.attributes["service.name"] == "diana-on-my-laptop"
    assert tracing.tracer is None
