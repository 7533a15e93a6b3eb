"""A config file is re-read when what it says changes, not when its size or time does: one
copied over another with its time kept (`cp -p`) and the same size is a new file all the
same, for policy.json, tools.json and mcp-servers.json alike."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from diana.core.config.watch import file_stamp
from diana.core.events import Notice
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .configs import WORD_COUNT
from .conftest import stepping_clock

# Two policies of one size: obsidian_log (reversible with delay) otherwise waits for a person.
DENY = '{"tools": {"obsidian_log": "deny" }}'
ALLOW = '{"tools": {"obsidian_log": "allow"}}'


def replace_keeping_size_and_time(path: Path, text: str) -> None:
    """What `cp -p` of a file of the same size does: new content, the old time."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the watcher polls; so does the test
            await asyncio.sleep(0.05)


def test_a_file_with_the_same_size_and_time_but_other_content_is_another_stamp(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(DENY)
    before = file_stamp(path)
    replace_keeping_size_and_time(path, ALLOW)
    assert file_stamp(path) != before
    assert file_stamp(path) == file_stamp(path)
    assert file_stamp(tmp_path / "missing.json") is None


@pytest.mark.parametrize(("first", "then"), [(DENY, ALLOW), (ALLOW, DENY)])
async def test_a_policy_replaced_with_the_same_size_and_time_applies_at_once(
    config_dir: Path, data_dir: Path, first: str, then: str
) -> None:
    policy = config_dir / "policy.json"
    policy.write_text(first)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        run = runtime.orchestrator.execute
        before = await run("obsidian_log", {"entry": "before"})
        assert (before.error_code is ErrorCode.DENIED_BY_POLICY) == (first == DENY), before

        replace_keeping_size_and_time(policy, then)
        after = await run("obsidian_log", {"entry": "after"})

        if then == DENY:
            assert after.error_code is ErrorCode.DENIED_BY_POLICY, after
        else:
            assert after.success, after


async def test_tools_and_servers_replaced_with_the_same_size_and_time_are_applied(
    config_dir: Path, data_dir: Path
) -> None:
    tools = config_dir / "tools.json"
    tools.write_text(json.dumps({"tools": [WORD_COUNT]}))
    servers = config_dir / "mcp-servers.json"
    # Disabled: listed, never started; only the name changes.
    servers.write_text(json.dumps({"mcpServers": {"aa": {"command": "x", "disabled": True}}}))
    async with await Runtime.open(
        Profile.APP.but(share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        assert runtime.orchestrator.definition("word_count") is not None
        assert list(runtime.mcp.disabled) == ["aa"]

        replace_keeping_size_and_time(tools, tools.read_text().replace("word_count", "word_kount"))
        replace_keeping_size_and_time(servers, servers.read_text().replace('"aa"', '"bb"'))

        await until(lambda: runtime.orchestrator.definition("word_kount") is not None)
        await until(lambda: list(runtime.mcp.disabled) == ["bb"])
        assert runtime.orchestrator.definition("word_count") is None


async def test_a_setting_that_applies_after_a_restart_says_so_and_live_ones_apply_quietly(
    config_dir: Path, data_dir: Path
) -> None:
    path = config_dir / "settings.json"

    def edit(**sections: dict[str, object] | str) -> None:
        settings = json.loads(path.read_text())
        for section, value in sections.items():
            if isinstance(value, dict):
                settings[section] = {**settings.get(section, {}), **value}
            else:
                settings[section] = value
        path.write_text(json.dumps(settings))

    async with await Runtime.open(
        Profile.APP.but(servers="none", share=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()

        async def next_notice() -> Notice:
            async with asyncio.timeout(10):
                while True:
                    event = await events.get()
                    if isinstance(event, Notice):
                        return event

        # Live: the budget and how proposals are told apply at once, with no notice.
        edit(cost={"daily_budget": 5}, notify="bell")
        await until(lambda: runtime.cost.budget == 5)
        assert runtime.settings.notify == "bell"
        # Not live: each changed key is named, with the file and that it needs a restart.
        edit(web={"backend": "searxng", "url": "http://127.0.0.1:9", "timeout": 5})
        notice = await next_notice()
        assert notice.level == "warning"
        assert notice.message == (
            "settings.json: web.backend, web.url, web.timeout changed; they apply after a "
            "restart of diana"
        )
        assert runtime.settings.web.backend == "none"  # what is in force says so
        edit(registry={"url": "http://127.0.0.1:9"}, cost={"daily_budget": 6})
        notice = await next_notice()  # the web keys are not told again
        assert notice.message == (
            "settings.json: registry.url changed; it applies after a restart of diana"
        )
        assert runtime.cost.budget == 6
        runtime.bus.unsubscribe(events)
