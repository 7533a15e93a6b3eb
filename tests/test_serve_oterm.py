"""oterm (PyPI, in a venv of its own) as a real host of `diana serve`: configured from what
`diana serve --print-config oterm` prints, its model (the fake Ollama) calls a destructive tool
diana exposes; the call waits as a proposal naming oterm's client, runs once on `diana
approve`, and its result goes back to the model in oterm's next request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .commands import diana_here
from .database import any_pending
from .fixtures.fake_ollama import FakeOllama
from .serving import configure, lines, running_with
from .serving import pending_proposals as pending
from .waits import until

pytestmark = pytest.mark.processes  # oterm, diana serve, an MCP server, diana commands

OTERM_VERSION = "0.26.1"
# oterm's interpreter, in a venv of its own (its dependencies conflict with ours): the one
# `sh .ci/dev test` makes in ours (`oterm/`) and names in OTERM_PYTHON.
OTERM_PYTHON = Path(os.environ.get("OTERM_PYTHON") or Path(sys.prefix) / "oterm" / "bin" / "python")
HOST_SCRIPT = Path(__file__).parent / "fixtures" / "oterm_host.py"
MODEL = "qwen3:30b-a3b"
START = 120.0  # seconds for oterm to start diana serve, list its tools and send the prompt


def oterm_version() -> str | None:
    if not OTERM_PYTHON.is_file():
        return None
    asked = subprocess.run(
        [str(OTERM_PYTHON), "-c", "import importlib.metadata as m; print(m.version('oterm'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return asked.stdout.strip() if asked.returncode == 0 else None


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [
        str(message.get("content"))
        for message in request.get("messages", [])
        if message.get("role") == "tool"
    ]


def test_oterm_as_a_host_its_model_s_destructive_call_waits_and_runs_once_approved(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    version = oterm_version()
    if version != OTERM_VERSION:
        pytest.skip(
            f"needs oterm {OTERM_VERSION} in its own venv at {OTERM_PYTHON} (found "
            f"{version or 'none'}): `sh .ci/dev test` makes it; or set OTERM_PYTHON to one"
        )
    marks = tmp_path / "marks"
    configure(config_dir, marks)
    printed = diana_here(config_dir, data_dir, "serve", "--print-config", "oterm")
    assert printed.returncode == 0, printed.stderr
    oterm_data = tmp_path / "oterm"
    oterm_data.mkdir()
    config = {**json.loads(printed.stdout), "splash-screen": False}
    # As printed, plus the suite's $TMPDIR, which an MCP client does not pass on to the servers
    # it starts: diana serve then forks its own MCP server from the suite's fork server.
    config["mcpServers"]["diana"]["env"] = {"TMPDIR": os.environ["TMPDIR"]}
    (oterm_data / "config.json").write_text(json.dumps(config))

    with FakeOllama(models=[MODEL]) as fake:
        fake.add(
            {"tool_calls": [{"name": "diana_append_append", "arguments": {"mark": "from-oterm"}}]},
            {"content": "Appended."},
        )
        env = dict(
            os.environ,
            OTERM_DATA_DIR=str(oterm_data),
            OLLAMA_HOST=fake.url.removeprefix("http://"),
            TEXTUAL_ANIMATIONS="none",
        )
        env.pop("OLLAMA_URL", None)
        argv = [str(OTERM_PYTHON), str(HOST_SCRIPT), MODEL, "append a mark", "diana_append_append"]
        child = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        try:
            # The model's first request (in this process), then the proposal (in the
            # database): both cheap to watch.
            until(lambda: bool(fake.requests) or child.poll() is not None, within=START)
            until(lambda: child.poll() is not None or any_pending(data_dir), START)
            assert child.poll() is None, child.communicate()
            (waiting,) = pending(config_dir, data_dir)
            assert waiting["tool"] == "append_append"
            # oterm 0.26.1 names no client of its own: its MCP client (pydantic-ai over
            # fastmcp) introduces itself with fastmcp's default clientInfo name.
            assert waiting["origin"] == "host:fastmcp"
            assert lines(marks) == []  # held: nothing appended yet
            assert len(fake.requests) == 1  # the model has not heard back

            approved = diana_here(config_dir, data_dir, "approve", waiting["id"])
            assert approved.returncode == 0, approved.stderr
            out, err = child.communicate(timeout=120)
        finally:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    shown = json.loads(out.splitlines()[-1])
    assert lines(marks) == ["from-oterm"]  # run exactly once
    first, second = fake.requests
    assert "diana_append_append" in {tool["function"]["name"] for tool in first["tools"]}
    assert tool_messages(second) == ["appended from-oterm"]
    assert shown["answers"] == ["Appended."]
    assert shown["results"] == ["appended from-oterm"]
    until(lambda: running_with(str(marks)) == [], within=30)  # diana serve ended with oterm
