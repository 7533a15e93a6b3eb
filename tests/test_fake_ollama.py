"""The fake Ollama server, driven by the real `ollama` client over real HTTP."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from .fixtures.fake_ollama import NO_REPLY_LEFT, FakeOllama

SCRIPT = Path(__file__).parent / "fixtures" / "fake_ollama.py"
MODEL = "qwen3:30b-a3b"
USER = [{"role": "user", "content": "hi"}]


async def aclose(client: ollama.AsyncClient) -> None:
    """Close the client's HTTP connections."""
    close: Callable[[], Awaitable[object]] = client.close
    await close()


def sclose(client: ollama.Client) -> None:
    """Close the client's HTTP connections."""
    close: Callable[[], object] = client.close
    close()


@pytest.fixture
def server() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
async def client(server: FakeOllama) -> AsyncIterator[ollama.AsyncClient]:
    c = ollama.AsyncClient(host=server.url, timeout=httpx.Timeout(5.0))
    yield c
    await aclose(c)


async def test_streamed_chunks_arrive_in_order_and_one_by_one(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": ["Hel", "lo", " world"], "delay": 0.15})
    arrivals: list[tuple[float, str]] = []
    stream = await client.chat(model=MODEL, messages=USER, stream=True)
    async for part in stream:
        arrivals.append((time.monotonic(), part.message.content or ""))
        last = part
    assert [text for _, text in arrivals] == ["Hel", "lo", " world", ""]
    assert arrivals[2][0] - arrivals[0][0] >= 0.25
    assert last.done and last.done_reason == "stop" and last.eval_count == 3
    assert last.prompt_eval_count == 1


async def test_first_delay_holds_the_first_chunk(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": "late", "first_delay": 0.2})
    started = time.monotonic()
    stream = await client.chat(model=MODEL, messages=USER, stream=True)
    parts = [part async for part in stream]
    assert time.monotonic() - started >= 0.2
    assert "".join(p.message.content or "" for p in parts) == "late"


async def test_thinking_streams_before_content(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"thinking": ["hmm ", "ok"], "content": ["An", "swer"]})
    stream = await client.chat(model=MODEL, messages=USER, stream=True, think=True)
    parts = [(p.message.thinking, p.message.content) async for p in stream]
    assert parts == [("hmm ", ""), ("ok", ""), (None, "An"), (None, "swer"), (None, "")]


async def test_tool_calls_parse(server: FakeOllama, client: ollama.AsyncClient) -> None:
    call = {"name": "get_current_time", "arguments": {"timezone": "UTC"}}
    server.add({"content": "Let me check.", "tool_calls": [call]})
    stream = await client.chat(model=MODEL, messages=USER, stream=True)
    parts = [p async for p in stream]
    assert [p.message.content for p in parts] == ["Let me check.", "", ""]
    calls = parts[1].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_current_time"
    assert calls[0].function.arguments == {"timezone": "UTC"}
    assert parts[0].message.tool_calls is None and parts[2].done


async def test_non_streamed_reply_joins_everything(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    call = {"name": "echo", "arguments": {"text": "x"}}
    server.add({"thinking": ["a", "b"], "content": ["c", "d"], "tool_calls": [call]})
    response = await client.chat(model=MODEL, messages=USER, stream=False)
    assert response.done and response.message.content == "cd"
    assert response.message.thinking == "ab"
    assert response.message.tool_calls is not None
    assert response.message.tool_calls[0].function.name == "echo"


async def test_format_takes_from_the_gap_queue(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": "chat"})
    server.add_gap({"content": '{"capabilities": ["search"]}'})
    schema = {"type": "object", "properties": {"capabilities": {"type": "array"}}}
    first = await client.chat(model=MODEL, messages=USER, format=schema)
    second = await client.chat(model=MODEL, messages=USER, format="json")
    chat = await client.chat(model=MODEL, messages=USER)
    assert json.loads(first.message.content or "") == {"capabilities": ["search"]}
    assert json.loads(second.message.content or "") == {"capabilities": []}
    assert chat.message.content == "chat"
    assert server.requests[0]["format"] == schema and server.requests[0]["stream"] is False


async def test_empty_chat_queue_is_a_500(client: ollama.AsyncClient) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        await client.chat(model=MODEL, messages=USER)
    assert caught.value.status_code == 500 and caught.value.error == NO_REPLY_LEFT


async def test_error_line_raises_after_the_content(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": ["partial"], "error": "model runner crashed"}, {"content": "next"})
    seen: list[str] = []
    stream = await client.chat(model=MODEL, messages=USER, stream=True)
    with pytest.raises(ollama.ResponseError) as caught:
        async for part in stream:
            seen.append(part.message.content or "")
    assert seen == ["partial"] and caught.value.error == "model runner crashed"
    after = await client.chat(model=MODEL, messages=USER)
    assert after.message.content == "next"


async def test_unknown_model_is_the_real_404(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": "unused"})
    stream = await client.chat(model="llama9", messages=USER, stream=True)
    with pytest.raises(ollama.ResponseError) as caught:
        async for _ in stream:
            pass
    assert caught.value.status_code == 404
    assert caught.value.error == 'model "llama9" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as again:
        await client.chat(model="llama9", messages=USER)
    assert again.value.status_code == 404
    assert (await client.chat(model=MODEL, messages=USER)).message.content == "unused"


async def test_status_reply_is_a_transient_failure(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"status": 503, "error": "server busy"}, {"status": 500}, {"content": "ok"})
    stream = await client.chat(model=MODEL, messages=USER, stream=True)
    with pytest.raises(ollama.ResponseError) as busy:
        async for _ in stream:
            pass
    assert busy.value.status_code == 503 and busy.value.error == "server busy"
    with pytest.raises(ollama.ResponseError) as failed:
        await client.chat(model=MODEL, messages=USER)
    assert failed.value.status_code == 500 and failed.value.error == "fake failure"
    assert (await client.chat(model=MODEL, messages=USER)).message.content == "ok"


async def test_hang_times_out_and_stop_still_returns() -> None:
    fake = FakeOllama([{"hang": True}]).start()
    client = ollama.AsyncClient(host=fake.url, timeout=httpx.Timeout(5.0, read=0.5))
    try:
        stream = await client.chat(model=MODEL, messages=USER, stream=True)
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            async for _ in stream:
                pass
        assert time.monotonic() - started < 2
    finally:
        await aclose(client)
        began = time.monotonic()
        fake.stop()
    assert time.monotonic() - began < 1


def test_stop_releases_a_hang_while_the_client_still_waits() -> None:
    fake = FakeOllama([{"hang": True}]).start()
    with httpx.Client(base_url=fake.url, timeout=5.0) as http:
        began = 0.0

        def stop_soon() -> None:
            nonlocal began
            deadline = time.monotonic() + 10
            while not fake.requests and time.monotonic() < deadline:  # hanging, once asked
                time.sleep(0.01)
            began = time.monotonic()
            fake.stop()

        stopper = threading.Thread(target=stop_soon)
        stopper.start()
        with pytest.raises(httpx.RemoteProtocolError):
            http.post("/api/chat", json={"model": MODEL, "messages": USER, "stream": True})
        stopper.join()
    assert time.monotonic() - began < 1


async def test_list_version_and_root(server: FakeOllama, client: ollama.AsyncClient) -> None:
    server.models.append("llama3.2:3b")
    listed = await client.list()
    assert [m.model for m in listed.models] == [MODEL, "llama3.2:3b"]
    assert listed.models[0].details is not None and listed.models[0].details.format == "gguf"
    async with httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get("/api/version")).json() == {"version": "0.12.0"}
        root = await http.get("/")
        assert root.status_code == 200 and root.text == "Ollama is running"
        head = await http.head("/")
        assert head.status_code == 200 and head.content == b""
        missing = await http.post("/api/generate", json={"model": MODEL})
        assert missing.status_code == 404 and missing.json() == {"error": "not found"}


async def test_show_and_ps_answer_as_ollama_does(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    shown = await client.show(MODEL)
    assert shown.capabilities == ["completion", "tools", "thinking"]
    assert shown.details is not None and shown.details.family == "qwen"
    assert shown.parameters == "temperature 0.7"
    with pytest.raises(ollama.ResponseError) as caught:
        await client.show("llama9")
    assert caught.value.status_code == 404 and caught.value.error == "model 'llama9' not found"
    assert list((await client.ps()).models) == []


async def test_requests_records_bodies(server: FakeOllama, client: ollama.AsyncClient) -> None:
    server.add({"content": "a"}, {"content": "b"})
    tool = {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo the text back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
    stream = await client.chat(model=MODEL, messages=USER, tools=[tool], stream=True)
    _ = [p async for p in stream]
    history = [*USER, {"role": "assistant", "content": "a"}, {"role": "user", "content": "again"}]
    await client.chat(model=MODEL, messages=history)
    assert len(server.requests) == 2
    first, second = server.requests
    assert first["model"] == MODEL and first["stream"] is True
    assert first["tools"][0]["function"]["name"] == "echo"
    assert first["messages"] == [{"role": "user", "content": "hi"}]
    assert [m["content"] for m in second["messages"]] == ["hi", "a", "again"]
    assert not second.get("tools")


async def test_keep_alive_reuses_one_connection(
    server: FakeOllama, client: ollama.AsyncClient
) -> None:
    server.add({"content": ["a", "b"]}, {"content": "c"}, {"content": ["d"]}, {"content": "e"})
    for _ in range(2):
        stream = await client.chat(model=MODEL, messages=USER, stream=True)
        _ = [p async for p in stream]
        await client.chat(model=MODEL, messages=USER, stream=False)
        await client.list()
    assert server.connections == 1


def test_sync_client_and_runtime_add() -> None:
    with FakeOllama(models=["m1"]) as fake:
        client = ollama.Client(host=fake.url, timeout=httpx.Timeout(5.0))
        fake.add({"content": ["x", "y"]})
        parts = client.chat(model="m1", messages=USER, stream=True)
        assert [p.message.content for p in parts] == ["x", "y", ""]
        assert [m.model for m in client.list().models] == ["m1"]
        sclose(client)


@pytest.mark.processes
def test_standalone_prints_its_url_and_serves(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"models": ["a:1", "b:2"], "replies": [{"content": "hey"}]}))
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 5)
        assert ready, "no output from the standalone server"
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.removeprefix("listening on ")
        tags = httpx.get(f"{url}/api/tags", timeout=5).json()
        assert [m["name"] for m in tags["models"]] == ["a:1", "b:2"]
        client = ollama.Client(host=url, timeout=httpx.Timeout(5.0))
        assert client.chat(model="a:1", messages=USER).message.content == "hey"
        sclose(client)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=5)
    assert proc.returncode == 0, err
    assert err == ""


def test_the_openai_compatible_chat_streams_text_and_tool_calls_as_openai_chunks(
    server: FakeOllama,
) -> None:
    """`/v1/chat/completions`, as oterm's client reads it: server-sent chunks, a tool call's
    arguments as a JSON string, `finish_reason`, a usage chunk when asked, `[DONE]`."""
    server.add(
        {"content": ["Let me ", "check."], "tool_calls": [{"name": "t", "arguments": {"a": 1}}]},
        {"content": "Done."},
    )
    asked = {
        "model": MODEL,
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client(base_url=server.url, timeout=5.0) as http:
        answered = http.post("/v1/chat/completions", json=asked)
        assert answered.headers["content-type"] == "text/event-stream"
        events = [line.removeprefix("data: ") for line in answered.text.split("\n\n") if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
        assert "".join(delta.get("content") or "" for delta in deltas) == "Let me check."
        (call,) = deltas[-1]["tool_calls"]
        assert call["function"] == {"name": "t", "arguments": '{"a": 1}'}
        assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 2

        result = {"role": "tool", "tool_call_id": call["id"], "content": "42"}
        whole = http.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [*USER, result]}
        ).json()
        assert whole["choices"][0]["message"]["content"] == "Done."
        assert whole["choices"][0]["finish_reason"] == "stop"
        missing = http.post("/v1/chat/completions", json={"model": "nope", "messages": USER})
        assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    assert server.requests[1]["messages"][-1] == result  # recorded as sent
