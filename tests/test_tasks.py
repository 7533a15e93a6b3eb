"""A tool that runs as a task (protocol 2025-11-25) is watched at a bounded pace whatever
pollInterval the server sends, and a task call that fails for any reason cancels the task on
the server (tasks/cancel)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from diana.core.mcp.tasks import TASK_POLL_DEFAULT, TASK_POLL_MAX, TASK_POLL_MIN, poll_seconds
from diana.core.models import ErrorCode, ToolResult
from diana.core.runtime import Profile, Runtime

from .conftest import stepping_clock
from .scenarios import until

TASK_SERVER = str(Path(__file__).parent / "fixtures" / "task_server.py")
WORKS_FOR = 0.5  # seconds a task works before it completes
# tasks/get a WORKS_FOR task may take at the fastest pace allowed, and some to spare.
MOST_POLLS = int(WORKS_FOR / TASK_POLL_MIN) + 5


def configure(config_dir: Path, requests: Path, **entry: Any) -> None:
    server = {"command": sys.executable, "args": [TASK_SERVER, "--requests", str(requests)]}
    (config_dir / "mcp-servers.json").write_text(
        json.dumps({"mcpServers": {"tk": {**server, **entry}}})
    )
    (config_dir / "policy.json").write_text(json.dumps({"servers": {"tk": "allow"}}))


async def work(
    config_dir: Path, data_dir: Path, requests: Path, arguments: dict[str, Any], **entry: Any
) -> ToolResult:
    """One call of `tk_work` with these arguments, the server configured with ``entry`` and
    writing the requests it gets to ``requests``."""
    configure(config_dir, requests, **entry)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        return await runtime.call_tool("tk_work", arguments, origin="test")


def requests_of(path: Path, method: str) -> list[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == method]


@pytest.mark.processes
@pytest.mark.parametrize(
    "poll",
    [-1, 0, -1e9, "NaN", "fast", "250", 37.5, None, True, [1], {"ms": 5}],
    ids=repr,
)
async def test_any_poll_interval_is_waited_within_bounds(
    tmp_path: Path, config_dir: Path, data_dir: Path, poll: Any
) -> None:
    requests = tmp_path / "requests"
    done = await work(config_dir, data_dir, requests, {"seconds": WORKS_FOR, "poll": poll})

    assert done.success, done.error
    assert done.data == "task-1 completed"
    polls = requests_of(requests, "tasks/get")
    assert 1 <= len(polls) <= MOST_POLLS, len(polls)
    assert requests_of(requests, "tasks/cancel") == []


def test_a_poll_interval_becomes_seconds_between_the_bounds() -> None:
    assert poll_seconds(250) == 0.25
    assert poll_seconds("250") == 0.25
    assert poll_seconds(" 2500.5 ") == 2.5005
    for too_fast in (0, -1, -math.inf, 1, "0", "-20"):
        assert poll_seconds(too_fast) == TASK_POLL_MIN
    for too_slow in (10**12, math.inf, "1e300", 3_600_000):
        assert poll_seconds(too_slow) == TASK_POLL_MAX
    for unreadable in (None, math.nan, "NaN", "soon", True, [], {}):
        assert poll_seconds(unreadable) == TASK_POLL_DEFAULT


@pytest.mark.processes
@pytest.mark.parametrize(
    ("then", "said"),
    [
        ("error", "the task store is down"),
        ("bad_status", "task status 'sleeping', not one of working"),
        ("not_a_task", "answered tasks/get with no task 'task-1'"),
    ],
)
async def test_a_task_whose_server_answers_wrongly_is_cancelled(
    tmp_path: Path, config_dir: Path, data_dir: Path, then: str, said: str
) -> None:
    requests = tmp_path / "requests"
    done = await work(config_dir, data_dir, requests, {"seconds": 30, "then": then})

    assert not done.success
    assert said in (done.error or ""), done.error
    assert requests_of(requests, "tasks/cancel") == ["task-1"]


@pytest.mark.processes
async def test_a_task_out_of_time_is_cancelled_even_with_a_huge_poll_interval(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    requests = tmp_path / "requests"
    done = await work(config_dir, data_dir, requests, {"seconds": 60, "poll": 1e300}, toolTimeout=1)

    assert done.error_code is ErrorCode.TOOL_EXECUTION_TIMEOUT, done.error
    assert requests_of(requests, "tasks/get") == []  # the first look was to be in 30 s
    assert requests_of(requests, "tasks/cancel") == ["task-1"]


@pytest.mark.processes
async def test_a_task_call_cancelled_cancels_the_task(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    requests = tmp_path / "requests"
    configure(config_dir, requests)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        call = asyncio.create_task(runtime.call_tool("tk_work", {"seconds": 60}, origin="test"))
        await until(lambda: requests_of(requests, "tasks/get") != [], within=10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: requests_of(requests, "tasks/cancel") == ["task-1"], within=10)


@pytest.mark.processes
async def test_a_server_that_goes_away_mid_task_ends_the_call_with_why(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    requests = tmp_path / "requests"
    done = await work(config_dir, data_dir, requests, {"seconds": 60, "then": "exit"})

    assert done.error_code is ErrorCode.AGENT_UNAVAILABLE, done.error
    assert "went down during the call" in (done.error or "")
