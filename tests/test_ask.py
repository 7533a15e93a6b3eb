"""`diana ask` as a person runs it, talking to a fake Ollama (over real HTTP, found through
OLLAMA_HOST) and to real MCP servers, with the exit codes scripts rely on: run through its
`main(argv)` here, or as a process of its own where the process is what is tested (a signal,
a terminal, another process deciding, output read while it runs)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from diana.core.chat.answer import AgentResponse
from diana.core.chat.gaps import ToolGapReport

from .commands import ask, diana, diana_here
from .commands import ask_command as command
from .commands import ask_environment as environment
from .configs import write_servers as with_servers
from .fixtures.fake_ollama import FakeOllama

ROOT = Path(__file__).parent.parent
FIXTURE = str(Path(__file__).parent / "fixtures" / "mcp_fixture.py")
MCP_SERVER_TIME = str(Path(sys.executable).parent / "mcp-server-time")
DELETE = {"tool_calls": [{"name": "files_delete_file", "arguments": {"path": "/tmp/notes.txt"}}]}


def files_server(config_dir: Path) -> None:
    with_servers(config_dir, {"files": {"command": sys.executable, "args": [FIXTURE]}})


def chat_requests(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r for r in fake.requests if not r.get("format")]


def told(fake: FakeOllama) -> Any:
    """What the last chat request told the model about its (one) tool call."""
    (message,) = [m for m in chat_requests(fake)[-1]["messages"] if m["role"] == "tool"]
    return json.loads(message["content"])


def ask_here(
    config_dir: Path, data_dir: Path, host: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`diana ask` against the Ollama at ``host``, through its ``main(argv)`` here, with no
    terminal on stdin."""
    return diana_here(config_dir, data_dir, "ask", *args, env={"OLLAMA_HOST": host})


def proposals(config_dir: Path, data_dir: Path) -> list[dict[str, Any]]:
    listed = diana_here(config_dir, data_dir, "proposals", "--json")
    assert listed.returncode == 0, listed.stderr
    result: list[dict[str, Any]] = json.loads(listed.stdout)
    return result


@pytest.mark.processes
def test_what_time_is_it_calls_mcp_server_time_and_prints_the_response(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    with_servers(
        config_dir,
        {"time": {"command": MCP_SERVER_TIME, "args": ["--local-timezone", "UTC"]}},
    )
    fake.add(
        {"tool_calls": [{"name": "time_get_current_time", "arguments": {"timezone": "UTC"}}]},
        {"content": ["It is ", "morning in UTC."]},
    )
    done = ask_here(config_dir, data_dir, fake.url, "what time is it in UTC?", "--json")
    assert done.returncode == 0, done.stderr
    response = AgentResponse.model_validate_json(done.stdout)  # stdout holds only the JSON
    assert response.answer == "It is morning in UTC."
    (record,) = response.tool_calls
    assert (record.name, record.arguments, record.status) == (
        "time_get_current_time",
        {"timezone": "UTC"},
        "succeeded",
    )
    assert record.result["timezone"] == "UTC"
    assert "datetime" in record.result
    assert response.confidence == 0.9
    assert told(fake) == {"ok": True, "result": record.result}  # the real result reached it
    assert "⚙ time_get_current_time" in done.stderr


def test_nothing_listening_exits_2_with_the_fix(config_dir: Path, data_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    host = f"http://127.0.0.1:{port}"
    done = ask_here(config_dir, data_dir, host, "hi", "--json")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f'diana: Ollama is not reachable at {host} — start it with "ollama serve"'
    )
    assert json.loads(done.stdout) == {
        "error": f'Ollama is not reachable at {host} — start it with "ollama serve"',
        "code": "ollama_unavailable",
    }


@pytest.mark.processes
def test_a_call_needing_approval_exits_3_and_leaves_the_proposal_pending(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": ["It is waiting ", "for your approval."]})
    done = ask_here(config_dir, data_dir, fake.url, "delete my notes")
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "It is waiting for your approval."  # streamed, not JSON
    (proposal,) = proposals(config_dir, data_dir)
    assert (proposal["tool"], proposal["status"]) == ("files_delete_file", "pending")
    assert proposal["arguments"] == {"path": "/tmp/notes.txt"}
    assert f"left pending — approve with `diana approve {proposal['id']}`" in done.stderr
    assert f"diana: waiting for approval: {proposal['id']}" in done.stderr
    assert told(fake)["status"] == "pending_approval"


@pytest.mark.processes
def test_wait_goes_on_when_another_process_approves(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add(DELETE, {"content": "Deleted."})
    asking = subprocess.Popen(
        command(config_dir, data_dir, "delete my notes", "--wait", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment(fake.url),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while not (pending := proposals(config_dir, data_dir)):
            assert asking.poll() is None, asking.communicate()
            assert time.monotonic() < deadline, "no proposal appeared"
            time.sleep(0.1)
        (proposal,) = pending
        assert asking.poll() is None  # still waiting for the decision
        # Another process decides: the waiting one learns of it through the database alone.
        approved = diana(config_dir, data_dir, "approve", proposal["id"])
        assert approved.returncode == 0, approved.stderr
        out, err = asking.communicate(timeout=30)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.communicate()
    assert asking.returncode == 0, err
    response = AgentResponse.model_validate_json(out)
    (record,) = response.tool_calls
    assert (record.status, record.result, record.proposal_id) == (
        "succeeded",
        "deleted /tmp/notes.txt",
        proposal["id"],
    )
    assert response.answer == "Deleted."
    assert told(fake) == {"ok": True, "result": "deleted /tmp/notes.txt"}
    assert f"waiting for a decision — `diana approve {proposal['id']}`" in err


def test_a_tool_gap_exits_4_with_the_report(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    prompt = "what is the ACME share price?"
    fake.add_gap(
        {
            "content": json.dumps({"capabilities": [{"name": "financial_data_api", "tool": None}]}),
            "after_chat": True,
        }
    )
    # The answer streams while the tools are checked: made up, it is dropped, its call not run.
    fake.add({"content": "ACME is at 42.", **DELETE})
    done = ask_here(config_dir, data_dir, fake.url, prompt, "--json")
    assert done.returncode == 4, done.stderr
    report = ToolGapReport.model_validate_json(done.stdout)
    assert report.missing_tools == ["financial_data_api"]
    assert report.attempted_task == prompt
    assert "get_current_time" in report.existing_tools_checked
    assert len(chat_requests(fake)) == 1
    assert "42" not in done.stdout and "files_delete_file" not in done.stderr


@pytest.mark.processes
def test_an_answer_a_gap_stops_after_it_was_printed_is_said_to_be_stopped(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    gap = json.dumps({"capabilities": [{"name": "financial_data_api", "tool": None}]})
    fake.add_gap({"content": gap, "hold": "gap check"})
    fake.add({"content": ["ACME ", "is at 42."]})
    # Its own process: its stdout is read while it still runs.
    asking = subprocess.Popen(
        command(config_dir, data_dir, "what is the ACME share price?"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(fake.url),
        cwd=ROOT,
    )
    try:
        assert asking.stdout is not None
        shown = b""
        deadline = time.monotonic() + 30
        while b"42." not in shown:  # the answer is out while the check is held back
            assert time.monotonic() < deadline, shown
            ready, _, _ = select.select([asking.stdout], [], [], 1)
            if ready:
                chunk = os.read(asking.stdout.fileno(), 4096)
                assert chunk, shown
                shown += chunk
        fake.release("gap check")
        out, err = asking.communicate(timeout=30)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
    assert asking.returncode == 4
    stdout = (shown + out).decode()
    assert stdout.startswith("ACME is at 42.\nI cannot do this: no available tool provides")
    assert "the answer above was stopped: no tool can do what it needs" in err.decode()


def test_a_model_that_is_not_installed_exits_2_with_the_pull_command(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    done = ask_here(config_dir, data_dir, fake.url, "hi", "--model", "x")
    assert done.returncode == 2
    assert done.stderr.strip() == 'diana: model "x" is not installed — "ollama pull x"'
    # Every request to the model named it (memory's embedding asks its own model).
    assert {r["model"] for r in fake.requests if "messages" in r} == {"x"}


ASK_COLOUR = {
    "tool_calls": [
        {
            "name": "request_human_input",
            "arguments": {"question": "Which colour?", "choices": ["red", "blue"]},
        }
    ]
}


@pytest.mark.parametrize(
    ("typed", "status", "result", "error"),
    [
        # On a terminal: diana's own process, with the pty as its stdin.
        pytest.param(
            b"blue\n",
            "succeeded",
            {"question": "Which colour?", "answer": "blue"},
            None,
            id="answered",
            marks=pytest.mark.processes,
        ),
        pytest.param(
            b"\x04",  # Ctrl-D
            "cancelled",
            None,
            "the person chose not to answer",
            id="ctrl-d",
            marks=pytest.mark.processes,
        ),
        pytest.param(
            None,
            "failed",
            None,
            "no person can answer here (no terminal or window is attached)",
            id="no-terminal",
        ),
    ],
)
def test_the_models_question_is_asked_on_the_terminal_and_stdout_stays_json(
    config_dir: Path,
    data_dir: Path,
    fake: FakeOllama,
    typed: bytes | None,
    status: str,
    result: Any,
    error: str | None,
) -> None:
    fake.add(ASK_COLOUR, {"content": "Noted."})
    person, tty = pty.openpty()
    try:
        if typed is not None:
            os.write(person, typed)  # typed ahead; the terminal keeps it until it is read
        done = (
            ask_here(config_dir, data_dir, fake.url, "paint it", "--json")
            if typed is None
            else ask(config_dir, data_dir, fake.url, "paint it", "--json", stdin=tty)
        )
    finally:
        os.close(person)
        os.close(tty)
    assert done.returncode == 0, done.stderr
    response = AgentResponse.model_validate_json(done.stdout)  # no prompt mixed into the JSON
    (record,) = response.tool_calls
    assert (record.status, record.result, record.error) == (status, result, error)
    asked = "? Which colour?\n  choices: red | blue\n> " in done.stderr
    assert asked is (typed is not None)
    expected = {"ok": True, "result": result} if result else {"ok": False, "status": status}
    assert told(fake) == expected | ({"error": error} if error else {})


@pytest.mark.processes
def test_stopping_ask_while_it_waits_for_an_answer_exits_at_once(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(ASK_COLOUR, {"content": "Noted."})
    person, tty = pty.openpty()
    asking = subprocess.Popen(
        command(config_dir, data_dir, "paint it", "--json"),
        stdin=tty,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(fake.url),
        cwd=ROOT,
    )
    try:
        assert asking.stderr is not None
        shown = b""
        deadline = time.monotonic() + 30
        while not shown.endswith(b"> "):  # the question is up and stdin is being read
            assert time.monotonic() < deadline, shown
            ready, _, _ = select.select([asking.stderr], [], [], 1)
            if ready:
                chunk = os.read(asking.stderr.fileno(), 4096)
                assert chunk, shown
                shown += chunk
        asking.send_signal(signal.SIGTERM)
        assert asking.wait(timeout=10) == 130  # not waiting for someone to press Enter
        _, rest = asking.communicate(timeout=10)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.communicate()
        os.close(person)
        os.close(tty)
    assert b"Fatal Python error" not in shown + rest


@pytest.mark.processes
def test_a_resource_named_in_the_prompt_goes_with_it(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    files_server(config_dir)
    fake.add({"content": ["Noted."]})
    done = ask_here(config_dir, data_dir, fake.url, "Summarise @files:fixture://greeting please")
    assert done.returncode == 0, done.stderr
    assert "📎 files:fixture://greeting (text/plain, 22 bytes)" in done.stderr
    (user,) = [m for m in chat_requests(fake)[-1]["messages"] if m["role"] == "user"]
    assert user["content"] == (
        "Summarise @files:fixture://greeting please\n\n"
        '<resource server="files" uri="fixture://greeting" mimeType="text/plain">\n'
        "hello from the fixture\n</resource>"
    )
    missing = ask_here(config_dir, data_dir, fake.url, "Read @files:fixture://nope")
    assert missing.returncode == 1
    assert missing.stderr == (
        "diana: not asked: MCP server files refused reading fixture://nope: "
        "Unknown resource: fixture://nope\n"
    )
    # A name that is no configured server is plain text: `@bob:10am` is left alone.
    fake.add({"content": ["Sure."]})
    plain = ask_here(config_dir, data_dir, fake.url, "Meet @bob:10am")
    assert plain.returncode == 0, plain.stderr
    (user,) = [m for m in chat_requests(fake)[-1]["messages"] if m["role"] == "user"]
    assert user["content"] == "Meet @bob:10am"
