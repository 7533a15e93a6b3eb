"""Profiles: a runtime opens the parts its profile names, and a command opens (and imports)
only what it needs: a reading command the database and what it reads."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.calls.gate import GateRequest
from diana.core.calls.orchestrator import Orchestrator
from diana.core.events import EventBus
from diana.core.models import ErrorCode, ToolResult
from diana.core.runtime import NotOpened, Profile, Runtime
from diana.tui import cli

from .agents_fixtures import echo_agent
from .commands import diana_args
from .structured_log import log_events

DATABASE_ONLY = ["the database", "the log file", "the proposals"]
AGENT_PARTS = ("the orchestrator", "the MCP manager", "the MCP Registry client")
# What a reading command must not import: the MCP SDK, the ollama client, the argument
# checker, the HTTP client, the web page reader, and the core's agents and MCP parts.
NOT_IMPORTED = (
    "mcp",
    "ollama",
    "jsonschema",
    "httpx",
    "trafilatura",
    "opentelemetry",
    "diana.core.calls.orchestrator",
    "diana.core.mcp.manager",
    "diana.core.mcp.registry",
    "diana.core.tools.builtin",
    "diana.core.chat.session",
)


def opened(data_dir: Path) -> list[dict[str, Any]]:
    """What each runtime opened on this data dir, in order (the structured log says)."""
    return log_events(data_dir, "runtime.opened")


def run_cli(config_dir: Path, data_dir: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """`diana ARGS` in this process; its exit code and what its runtime opened."""
    before = len(opened(data_dir)) if (data_dir / "logs").exists() else 0
    code = cli.main([*args, "--config-dir", str(config_dir), "--data-dir", str(data_dir)])
    after = opened(data_dir)
    assert len(after) == before + 1, f"diana {' '.join(args)} opened no runtime"
    return code, after[-1]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    config_dir.mkdir()
    return config_dir, data_dir


@pytest.mark.parametrize(
    ("args", "expected", "profile"),
    [
        (("proposals",), DATABASE_ONLY, "read"),
        (("proposals", "--all", "--json"), DATABASE_ONLY, "read"),
        (("policy",), DATABASE_ONLY, "read"),
        (("log",), [*DATABASE_ONLY, "the execution log"], "read"),
        (("stats",), [*DATABASE_ONLY, "the execution log"], "read"),
        (("cost",), [*DATABASE_ONLY, "the cost ledger"], "read"),
        (("memory", "list"), [*DATABASE_ONLY, "the execution log", "the memory"], "read"),
    ],
)
def test_a_reading_command_opens_the_database_and_what_it_reads(
    dirs: tuple[Path, Path], args: tuple[str, ...], expected: list[str], profile: str
) -> None:
    config_dir, data_dir = dirs
    code, record = run_cli(config_dir, data_dir, *args)
    assert code == 0
    assert record["profile"] == profile
    assert record["parts"] == expected


def test_show_and_reject_open_the_proposals_only(dirs: tuple[Path, Path]) -> None:
    """A proposal made by a call, then shown and rejected: neither opens an agent."""
    config_dir, data_dir = dirs
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"get_current_time": "ask"}}))
    code, record = run_cli(config_dir, data_dir, "call", "get_current_time")
    assert code == 3  # waits for a person
    assert record["profile"] == "call"
    assert set(AGENT_PARTS) <= set(record["parts"])
    asyncio.run(_one_proposal_id(config_dir, data_dir))
    proposal = PROPOSAL[0]
    code, record = run_cli(config_dir, data_dir, "show", proposal)
    assert (code, record["profile"], record["parts"]) == (0, "read", DATABASE_ONLY)
    code, record = run_cli(config_dir, data_dir, "reject", proposal)
    assert (code, record["profile"], record["parts"]) == (0, "decide", DATABASE_ONLY)
    code, record = run_cli(config_dir, data_dir, "proposals", "--all")
    assert record["parts"] == DATABASE_ONLY


PROPOSAL: list[str] = []


async def _one_proposal_id(config_dir: Path, data_dir: Path) -> None:
    async with await Runtime.open(Profile.READ, config_dir, data_dir) as runtime:
        (proposal,) = await runtime.approvals.select(None)
        PROPOSAL[:] = [proposal.id]


def test_approve_opens_what_runs_the_call(dirs: tuple[Path, Path]) -> None:
    """`diana approve` runs the call it approves: the call profile, agents and all."""
    config_dir, data_dir = dirs
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"get_current_time": "ask"}}))
    assert run_cli(config_dir, data_dir, "call", "get_current_time")[0] == 3
    asyncio.run(_one_proposal_id(config_dir, data_dir))
    code, record = run_cli(config_dir, data_dir, "approve", PROPOSAL[0])
    assert code == 0
    assert record["profile"] == "call"
    assert set(AGENT_PARTS) <= set(record["parts"])


PROBE = """
import sys
from diana.tui.cli import main
code = main(sys.argv[1:])
print("IMPORTED", sorted(m for m in {names!r} if m in sys.modules))
sys.exit(code)
"""


@pytest.mark.processes
def test_diana_proposals_imports_none_of_what_it_does_not_open(
    dirs: tuple[Path, Path],
) -> None:
    config_dir, data_dir = dirs
    argv = diana_args(config_dir, data_dir, "proposals")
    probe = PROBE.format(names=NOT_IMPORTED)
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "No pending proposals." in done.stdout
    assert "IMPORTED []" in done.stdout


async def test_a_part_not_opened_is_a_clear_error(dirs: tuple[Path, Path]) -> None:
    config_dir, data_dir = dirs
    async with await Runtime.open(Profile.READ, config_dir, data_dir) as runtime:
        assert runtime.parts() == DATABASE_ONLY
        assert runtime.tracing is None
        with pytest.raises(NotOpened, match="the read runtime does not open the agents"):
            runtime.mcp  # noqa: B018
        with pytest.raises(NotOpened, match="does not open the memory"):
            runtime.memory  # noqa: B018
        assert await runtime.approvals.select() == []


async def test_the_gateway_opens_the_call_profile_watched_and_sharing_nothing(
    dirs: tuple[Path, Path],
) -> None:
    """What `diana serve` will open: every server, watched as the app does, no chat, and
    nothing shared (no other process sends it calls: it ends with its host); diana's own
    agents are the one list a reading command names too."""
    config_dir, data_dir = dirs
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {}}))
    async with await Runtime.open(Profile.GATEWAY, config_dir, data_dir) as runtime:
        parts = runtime.parts()
        assert set(AGENT_PARTS) <= set(parts)
        assert "the chat" not in parts
        assert "the config watchers" in parts and "what it shares with diana" not in parts
        assert not runtime.shared and runtime.mcp.watching
        assert await runtime.running_app() is None  # not taken for an app by anyone
        registered = [slot.name for slot in runtime.orchestrator.agent_slots()]
    async with await Runtime.open(Profile.READ, config_dir, data_dir) as reader:
        assert reader.own_agents() == registered


async def test_the_gate_is_given_to_the_orchestrator_when_it_is_made() -> None:
    asked: list[str] = []

    async def hold_every_call(request: GateRequest) -> ToolResult | None:
        asked.append(request.definition.name)
        return ToolResult.fail(ErrorCode.PENDING_APPROVAL, "held")

    def hint(name: str) -> tuple[ToolResult, str | None] | None:
        return ToolResult.fail(ErrorCode.AGENT_UNAVAILABLE, f"{name} comes later"), None

    orchestrator = Orchestrator(bus=EventBus(), gate=hold_every_call, missing_tool_hint=hint)
    orchestrator.register_agent_factory("echo", lambda: echo_agent("echo", "echo_ping"))
    await orchestrator.start_all()
    try:
        held = await orchestrator.execute("echo_ping", {})
        assert (held.error_code, asked) == (ErrorCode.PENDING_APPROVAL, ["echo_ping"])
        later = await orchestrator.execute("not_yet", {})
        assert later.error_code is ErrorCode.AGENT_UNAVAILABLE
        assert later.error == "not_yet comes later"
    finally:
        await orchestrator.shutdown()


@pytest.mark.parametrize("command", ["proposals", "reject"])
def test_a_reading_command_still_reads_the_whole_config_first(
    dirs: tuple[Path, Path], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opening less changes no answer: a broken tools.json is still one line and exit 2."""
    config_dir, data_dir = dirs
    (config_dir / "tools.json").write_text(json.dumps({"tools": [{"bad": 1}]}))
    args = [command, *(["p-1"] if command == "reject" else [])]
    code = cli.main([*args, "--config-dir", str(config_dir), "--data-dir", str(data_dir)])
    assert code == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"diana: config error in {config_dir / 'tools.json'}: tools[0].name: Field required\n"
    )
    assert not data_dir.exists()  # nothing written before the config was read
