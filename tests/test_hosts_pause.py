"""The kill switch for other agents: while hosts are paused, every call a host makes through
`diana serve` waits for a person whatever the policy allows (a deny still refuses it); calls
of the chat, `diana call` and the rest are as the policy says; resumed, hosts' calls pass
the policy again. Whatever is at the switch's path counts as paused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from diana.core.approvals.hosts_pause import PAUSE_FILE, hosts_paused, pause_hosts, resume_hosts
from diana.core.models import ErrorCode
from diana.core.profiles import Profile
from diana.core.runtime import Runtime
from diana.tui.cli import main

from .conftest import stepping_clock
from .sampling_server import pending

UTC_ARGS = {"timezone": "UTC"}


def switch(config_dir: Path, data_dir: Path, word: str) -> int:
    return main(["--config-dir", str(config_dir), "--data-dir", str(data_dir), "serve", word])


async def test_paused_hosts_wait_for_a_person_whatever_the_policy_allows(
    runtime: Runtime, config_dir: Path, data_dir: Path
) -> None:
    ran = await runtime.call_tool("get_current_time", UTC_ARGS, origin="host:claude-code")
    assert ran.success  # a call the policy lets run

    pause_hosts(data_dir, "`diana serve pause` (pid 1)", stepping_clock().now())
    held = await runtime.call_tool("get_current_time", UTC_ARGS, origin="host:claude-code")
    assert held.error_code is ErrorCode.PENDING_APPROVAL
    (proposal,) = await pending(runtime)
    assert proposal.origin == "host:claude-code" and "hosts are paused" in proposal.reason
    assert "`diana serve pause`" in proposal.reason  # who paused them
    mine = await runtime.call_tool("get_current_time", UTC_ARGS, origin="cli")
    assert mine.success  # the person's own calls are not held

    assert resume_hosts(data_dir)
    again = await runtime.call_tool("get_current_time", UTC_ARGS, origin="host:claude-code")
    assert again.success


async def test_a_deny_still_refuses_a_paused_hosts_call(config_dir: Path, data_dir: Path) -> None:
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"get_current_time": "deny"}}))
    pause_hosts(data_dir, "test", stepping_clock().now())
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        refused = await runtime.call_tool("get_current_time", UTC_ARGS, origin="host:x")
        assert refused.error_code is ErrorCode.DENIED_BY_POLICY
        assert await pending(runtime) == []


def test_anything_at_the_switchs_path_counts_as_paused(data_dir: Path) -> None:
    data_dir.mkdir()
    assert hosts_paused(data_dir) is None
    os.mkfifo(data_dir / PAUSE_FILE)  # never blocks the check
    assert hosts_paused(data_dir) is not None
    assert resume_hosts(data_dir) and hosts_paused(data_dir) is None
    (data_dir / PAUSE_FILE).symlink_to(data_dir / "nowhere")  # a dangling link
    assert hosts_paused(data_dir) is not None
    assert resume_hosts(data_dir) and not resume_hosts(data_dir)


def test_diana_serve_pause_and_resume_say_what_they_did(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert switch(config_dir, data_dir, "pause") == 0
    assert "Hosts paused" in capsys.readouterr().out
    assert "`diana serve pause`" in (hosts_paused(data_dir) or "")
    assert (data_dir / PAUSE_FILE).stat().st_mode & 0o077 == 0  # private, as all of the data dir
    assert switch(config_dir, data_dir, "pause") == 0
    assert "paused already" in capsys.readouterr().out
    assert switch(config_dir, data_dir, "resume") == 0
    assert "Hosts resumed" in capsys.readouterr().out and hosts_paused(data_dir) is None
    assert switch(config_dir, data_dir, "resume") == 0
    assert "were not paused" in capsys.readouterr().out
