"""One exposed name, one tool: across every MCP server and diana's own agents, whatever the
order they start in, and a policy rule bound to the server whose tool it was written for.

Server ``a`` with tool ``b_c`` and server ``a_b`` with tool ``c`` both come out as ``a_b_c``.
Neither may run under the other's name, nor under an allow written for the other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.policy import Rule
from diana.core.approvals.proposal import ProposalWithdrawn
from diana.core.calls.orchestrator import Orchestrator
from diana.core.events import Notice, Subscription
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime

from .agents_fixtures import echo_agent
from .commands import diana
from .conftest import stepping_clock

PREFIX_SERVER = str(Path(__file__).parent / "fixtures" / "prefix_server.py")
TOOL_OF = {"a": "b_c", "a_b": "c"}  # each server's own name for the tool exposed as a_b_c
PLAIN_ALLOW = {"tools": {"a_b_c": "allow"}}


def prefix_server(name: str, side_effects: Path, wait_for: Path | None = None) -> dict[str, Any]:
    args = [PREFIX_SERVER, "--tool", TOOL_OF[name], "--label", name]
    args += ["--side-effects", str(side_effects)]
    if wait_for is not None:
        args += ["--wait-for", str(wait_for)]
    return {"command": sys.executable, "args": args}


def write_servers(config_dir: Path, servers: dict[str, dict[str, Any]]) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


def write_server_alone(config_dir: Path, name: str, side_effects: Path) -> None:
    write_servers(config_dir, {name: prefix_server(name, side_effects)})


def write_policy(config_dir: Path, policy: dict[str, Any]) -> None:
    (config_dir / "policy.json").write_text(json.dumps(policy))


def effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def until(condition: Callable[[], bool], within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the registry's own state, nothing to await
            await asyncio.sleep(0.02)


async def notice_with(events: Subscription, *words: str, within: float = 20.0) -> str:
    """The next notice that says every one of ``words``."""
    async with asyncio.timeout(within):
        while True:
            event = await events.queue.get()
            if isinstance(event, Notice) and all(word in event.message for word in words):
                return event.message


def answering(runtime: Runtime) -> set[str]:
    return {definition.name for definition, _agent in runtime.orchestrator.tool_definitions()}


def server_answering(runtime: Runtime, name: str) -> str | None:
    """The MCP server whose tool the name leads to now, if any."""
    definition = runtime.orchestrator.definition(name)
    return None if definition is None else (definition.category or "").removeprefix("mcp:")


async def held_call(runtime: Runtime, value: str) -> str:
    """A call of a_b_c with ``value``, held for a person: its proposal's id."""
    held = await runtime.orchestrator.execute("a_b_c", {"value": value})
    return held.data["proposal_id"]


async def switch_to(runtime: Runtime, config_dir: Path, name: str, side_effects: Path) -> None:
    """Server ``name`` alone is configured now: reloaded, until a_b_c leads to its tool."""
    write_server_alone(config_dir, name, side_effects)
    assert await runtime.mcp.reload()
    await runtime.mcp.wait_ready()
    await until(lambda: server_answering(runtime, "a_b_c") == name)


# -- in the registry: whoever comes first ---------------------------------------------------


@pytest.mark.parametrize("first", ["mcp-a", "mcp-a-b"])
async def test_a_name_two_servers_offer_is_refused_to_both_whichever_starts_first(
    first: str,
) -> None:
    orchestrator = Orchestrator()
    events = orchestrator.bus.subscribe()
    calls: list[Any] = []
    servers = {"mcp-a": "a", "mcp-a-b": "a_b"}
    for agent_id, server in servers.items():
        agent = echo_agent(agent_id, "a_b_c", f"{server}_own", calls=calls)
        orchestrator.register_agent_factory(agent_id, lambda a=agent: a, server=server)
    second = next(agent_id for agent_id in servers if agent_id != first)

    await orchestrator.start_agent(first)
    assert orchestrator.owner("a_b_c") == first
    await orchestrator.start_agent(second)

    assert orchestrator.owner("a_b_c") is None
    refused = await orchestrator.execute("a_b_c", {})
    assert refused.error_code is ErrorCode.TOOL_NOT_FOUND
    assert "MCP servers a and a_b each offer a tool by that name" in (refused.error or "")
    assert calls == []
    warning = await notice_with(events, "a_b_c", "MCP servers a and a_b")
    assert "neither is offered" in warning
    # Their other tools are untouched; the one left offering the name gets it back.
    assert {orchestrator.owner("a_own"), orchestrator.owner("a_b_own")} == set(servers)
    await orchestrator.remove_agent(second)
    assert orchestrator.owner("a_b_c") == first
    assert "is offered again" in await notice_with(events, "a_b_c")
    await orchestrator.shutdown()


@pytest.mark.parametrize("server_first", [True, False])
async def test_a_server_never_takes_the_name_of_one_of_dianas_own_tools(
    server_first: bool,
) -> None:
    orchestrator = Orchestrator()
    events = orchestrator.bus.subscribe()
    ours: list[Any] = []
    theirs: list[Any] = []
    memory = echo_agent("memory", "save_fact", calls=ours)
    save = echo_agent("mcp-save", "save_fact", calls=theirs)
    orchestrator.register_agent_factory("memory", lambda: memory)
    orchestrator.register_agent_factory("mcp-save", lambda: save, server="save")
    order = ["mcp-save", "memory"] if server_first else ["memory", "mcp-save"]
    for agent_id in order:
        await orchestrator.start_agent(agent_id)

    assert orchestrator.owner("save_fact") == "memory"
    assert (await orchestrator.execute("save_fact", {})).success
    assert len(ours) == 1 and theirs == []
    assert "from MCP server save was rejected: agent memory provides it" in await notice_with(
        events, "save_fact"
    )
    await orchestrator.shutdown()


# -- real servers ---------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("first", ["a", "a_b"])
async def test_two_servers_whose_names_combine_into_one_are_both_refused_in_either_order(
    config_dir: Path, data_dir: Path, tmp_path: Path, first: str
) -> None:
    side_effects, go = tmp_path / "effects.txt", tmp_path / "go"
    slow = "a_b" if first == "a" else "a"
    write_servers(
        config_dir,
        {
            first: prefix_server(first, side_effects),
            slow: prefix_server(slow, side_effects, wait_for=go),  # ready when told
        },
    )
    write_policy(config_dir, PLAIN_ALLOW)  # what a person might write by hand
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        orchestrator = runtime.orchestrator
        await until(lambda: server_answering(runtime, "a_b_c") == first)
        go.touch()
        warning = await notice_with(events, "a_b_c", "MCP servers a and a_b")
        await runtime.mcp.wait_ready()

        assert "a_b_c" not in answering(runtime)
        refused = await orchestrator.execute("a_b_c", {"value": "x"})
        assert refused.error_code is ErrorCode.TOOL_NOT_FOUND, refused
        assert "MCP servers a and a_b" in (refused.error or "")
        assert "neither is offered" in warning
        for server, own in TOOL_OF.items():  # each server shows its tool as refused
            shown = runtime.mcp.diagnostics(server).tools
            assert [t.name for t in shown if t.server_tool == own] == [None]

        # A reconnect lists the same tools: still refused.
        await runtime.mcp.reconnect(first)
        await runtime.mcp.wait_reconnected([first])
        assert server_answering(runtime, "a_b_c") is None

        # The slow one leaves the config: the name goes back to the one left.
        write_server_alone(config_dir, first, side_effects)
        assert await runtime.mcp.reload()
        assert server_answering(runtime, "a_b_c") == first
        ran = await orchestrator.execute("a_b_c", {"value": "y"})
        assert ran.success, ran

    assert effects(side_effects) == [f"{first} {TOOL_OF[first]} y"]


@pytest.mark.processes
async def test_a_name_comes_back_when_the_other_server_stops_listing_it(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_servers(config_dir, {name: prefix_server(name, side_effects) for name in ("a", "a_b")})
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        await runtime.mcp.wait_ready()
        await until(lambda: {"a_retire", "a_b_retire"} <= answering(runtime))
        assert server_answering(runtime, "a_b_c") is None

        told = None
        for _attempt in range(20):  # until the client listens for the announcement
            retired = await runtime.orchestrator.execute("a_b_retire", {})
            assert retired.success, retired
            with contextlib.suppress(TimeoutError):
                told = await notice_with(events, "a_b_c", "offered again", within=2.0)
                break
        assert told is not None

        assert server_answering(runtime, "a_b_c") == "a"
        assert "MCP server a " in told


@pytest.mark.processes
async def test_an_allow_bound_to_one_server_never_allows_another_servers_tool(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_server_alone(config_dir, "a_b", side_effects)
    write_policy(config_dir, {"tools": {"a_b_c": {"rule": "allow", "server": "a"}}})
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        run = runtime.orchestrator.execute

        held = await run("a_b_c", {"value": "a_b's"})
        assert held.error_code is ErrorCode.PENDING_APPROVAL, held
        (proposal,) = await runtime.approvals.store.select()
        assert proposal.reason.startswith(
            "the policy allows a_b_c of MCP server a only, and this a_b_c is MCP server a_b's"
        )

        # A deny always wins, whoever's tool it was written for.
        write_policy(config_dir, {"tools": {"a_b_c": {"rule": "deny", "server": "a"}}})
        denied = await run("a_b_c", {"value": "a_b's"})
        assert denied.error_code is ErrorCode.DENIED_BY_POLICY, denied
        assert "written for MCP server a" in (denied.error or "")

        # The server it was written for: its tool is allowed.
        write_policy(config_dir, {"tools": {"a_b_c": {"rule": "allow", "server": "a"}}})
        await switch_to(runtime, config_dir, "a", side_effects)
        ran = await run("a_b_c", {"value": "a's"})
        assert ran.success, ran

    assert effects(side_effects) == ["a b_c a's"]


@pytest.mark.processes
async def test_always_allow_is_bound_to_the_tools_server_and_says_what_it_wrote(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_server_alone(config_dir, "a_b", side_effects)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        await runtime.mcp.wait_ready()
        proposal = await held_call(runtime, "once")

        decision = await runtime.approvals.always(proposal, Rule.ALLOW, by="test")

        assert decision.result is not None and decision.result.success
        told = await notice_with(events, "always allowed")
        assert told.startswith("a_b_c (MCP server a_b): always allowed from now on — written to ")
        assert str(config_dir / "policy.json") in told or "~/" in told
        # Bound to the tool's server, and to the program it runs (its launch identity).
        identity = runtime.mcp.identity_of("a_b")
    assert identity is not None
    written = json.loads((config_dir / "policy.json").read_text())
    assert written["tools"] == {"a_b_c": {"rule": "allow", "server": "a_b", "identity": identity}}
    assert effects(side_effects) == ["a_b c once"]


@pytest.mark.processes
async def test_an_approval_never_runs_another_servers_tool_of_that_name(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_server_alone(config_dir, "a", side_effects)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        proposal = await held_call(runtime, "seen")
        # Before anyone decides, the name comes to lead to another server's tool.
        await switch_to(runtime, config_dir, "a_b", side_effects)

        with pytest.raises(ProposalWithdrawn) as withdrawn:
            await runtime.approvals.approve(proposal, by="test")

    assert "the MCP server it was proposed for (agent mcp-a) is no longer running" in str(
        withdrawn.value
    )
    assert effects(side_effects) == []


@pytest.mark.processes
def test_the_cli_refuses_a_name_two_servers_offer_with_or_without_the_tool_cache(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_policy(config_dir, PLAIN_ALLOW)
    write_server_alone(config_dir, "a", side_effects)
    listed = diana(config_dir, data_dir, "tools", "--refresh")  # a's tools, cached
    assert listed.returncode == 0 and "a_b_c" in listed.stdout, listed.stderr

    both = {name: prefix_server(name, side_effects) for name in ("a", "a_b")}
    write_servers(config_dir, both)
    call = ("call", "a_b_c", "--args", '{"value": "x"}')
    # a from the cache, a_b connected; then both from the cache.
    for _attempt in range(2):
        refused = diana(config_dir, data_dir, *call)
        assert refused.returncode == 2, refused.stderr
        assert "MCP servers a and a_b each offer a tool by that name" in refused.stderr
    assert effects(side_effects) == []

    write_server_alone(config_dir, "a", side_effects)
    alone = diana(config_dir, data_dir, *call)
    assert alone.returncode == 0, alone.stderr
    assert effects(side_effects) == ["a b_c x"]
