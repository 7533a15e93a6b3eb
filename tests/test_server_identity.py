"""Rules and proposals bound to what a server runs, not to its name.

An "always allow" written for MCP server ``srva``'s tool allows that tool while ``srva`` runs
the program it ran then (its command, arguments, folder and URL as written). Renamed, edited
or re-pointed, ``srva`` runs another program, and its calls ask first, saying why; a proposal
made before the change is withdrawn when approved, never run; a removed server's rules are
shown as orphaned and never allow another program put under its name. The gate server writes
a side-effect file for every call that ran: nothing a person did not allow is in it."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.policy import Policy, Rule, Standing
from diana.core.config.mcp_servers import MCPServerConfig, launch_identity, load_servers
from diana.core.events import Notice
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.modals.policy import PolicyScreen
from textual.widgets import DataTable

from .commands import diana_here_async
from .conftest import stepping_clock
from .scenarios import build_app, settle, type_command, until
from .waits import listening, settled

FIXTURES = Path(__file__).parent / "fixtures"
GATE_SERVER = str(FIXTURES / "gate_server.py")
APPEND_SERVER = str(FIXTURES / "append_server.py")


def gate(side_effects: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [GATE_SERVER, "--side-effects", str(side_effects)]}


def write_servers(config_dir: Path, servers: dict[str, dict[str, Any]]) -> None:
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": servers}))


def effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def policy_of(config_dir: Path) -> dict[str, Any]:
    policy: dict[str, Any] = json.loads((config_dir / "policy.json").read_text())
    return policy


async def allow_always(
    config_dir: Path, data_dir: Path, tool: str, arguments: dict[str, Any]
) -> None:
    """A person's "always allow" for ``tool``, given in the app's way (A on its proposal): the
    call runs, and the rule is written."""
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        held = await runtime.orchestrator.execute(tool, arguments)
        assert held.error_code is ErrorCode.PENDING_APPROVAL, held
        (proposal,) = await runtime.approvals.store.select()
        decision = await runtime.approvals.always(proposal.id, Rule.ALLOW, by="test")
        assert decision.result is not None and decision.result.success, decision


async def call(
    config_dir: Path, data_dir: Path, tool: str, **arguments: str
) -> subprocess.CompletedProcess[str]:
    return await diana_here_async(
        config_dir, data_dir, "call", tool, "--args", json.dumps(arguments)
    )


def proposal_row(data_dir: Path, proposal_id: str) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(data_dir / "diana.db")) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM proposals WHERE id = ?", (proposal_id,)).fetchone()
    return dict(row)


# -- what a server's identity is ----------------------------------------------------------------


def test_a_servers_identity_is_its_program_as_written_not_its_name_nor_its_secrets() -> None:
    one = MCPServerConfig(name="srva", command="python", args=["a.py"], env={"TOKEN": "s1"})
    assert launch_identity(one) == launch_identity(
        one.model_copy(update={"name": "other", "env": {"TOKEN": "s2"}, "timeout": 5.0})
    )
    changed = [
        one.model_copy(update={"args": ["b.py"]}),
        one.model_copy(update={"command": "/usr/bin/python3"}),
        one.model_copy(update={"cwd": "/elsewhere"}),
    ]
    assert len({launch_identity(c) for c in [one, *changed]}) == 4
    far = MCPServerConfig(name="far", url="https://a.example/mcp", transport="streamable-http")
    assert launch_identity(far) != launch_identity(
        far.model_copy(update={"url": "https://b.example/mcp"})
    )
    # A key in the URL's user part or query string is not part of it: keys change, and
    # they are secrets.
    assert launch_identity(far) == launch_identity(
        far.model_copy(update={"url": "https://user:key@a.example/mcp?key=1"})
    )


def test_an_identity_is_taken_from_the_entry_as_written_not_from_expanded_values(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp-servers.json"
    path.write_text(json.dumps({"mcpServers": {"s": {"command": "run", "args": ["${KEY}"]}}}))
    (first,) = load_servers(path, {"KEY": "secret-one"})
    (second,) = load_servers(path, {"KEY": "secret-two"})
    assert launch_identity(first) == launch_identity(second)
    assert "secret" not in launch_identity(first)


def test_each_rule_says_how_it_stands_against_the_servers_configured_now(tmp_path: Path) -> None:
    rules = {
        "srva_a": {"rule": "allow", "server": "srva", "identity": "1" * 32},
        "srva_b": {"rule": "allow", "server": "srva", "identity": "2" * 32},
        "srva_c": {"rule": "allow", "server": "srva"},
        "srva_d": {"rule": "deny", "server": "srva", "identity": "2" * 32},
        "gone_e": {"rule": "allow", "server": "gone", "identity": "1" * 32},
        "save_fact": "deny",
    }
    (tmp_path / "policy.json").write_text(json.dumps({"tools": rules}))
    policy = Policy(lambda: tmp_path / "policy.json", tmp_path / "policy.json")
    policy.configured = lambda: {"srva": "1" * 32}

    standing = {entry.name: entry.standing for entry in policy.entries()}

    assert standing == {
        "srva_a": None,
        "srva_b": Standing.MOVED,
        "srva_c": Standing.UNBOUND,
        "srva_d": None,  # a deny holds back any tool of the name, whatever runs it
        "gone_e": Standing.ORPHANED,
        "save_fact": None,
    }
    assert policy.rule_for("srva_a", "srva", identity="1" * 32) is not None
    assert policy.rule_for("srva_b", "srva", identity="1" * 32) is None
    assert policy.set_aside("srva_b", "srva", identity="1" * 32) == (
        "srva now runs a different program than when the rule was written: the policy's "
        "allow for srva_b does not apply"
    )


# -- an allow rule follows the program ------------------------------------------------------------


def re_pointed(change: str, side_effects: Path, other: Path) -> dict[str, dict[str, Any]]:
    """mcp-servers.json after ``change``: srva (and srvb) as they are now."""
    if change == "args":  # the same command, other arguments
        return {"srva": gate(other)}
    if change == "command":  # another command starting it
        env = shutil.which("env")
        assert env is not None
        return {"srva": {"command": env, "args": [sys.executable, *gate(other)["args"]]}}
    # Two servers' names swapped: srva now runs what srvb ran.
    assert change == "swap"
    return {"srva": gate(other), "srvb": gate(side_effects)}


@pytest.mark.processes
@pytest.mark.parametrize("change", ["args", "command", "swap"])
async def test_an_allow_does_not_follow_a_servers_name_to_another_program(
    config_dir: Path, data_dir: Path, tmp_path: Path, change: str
) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    first = {"srva": gate(side_effects)}
    if change == "swap":
        first["srvb"] = gate(other)
    write_servers(config_dir, first)
    await allow_always(config_dir, data_dir, "srva_append_line", {"line": "allowed"})
    rule = policy_of(config_dir)["tools"]["srva_append_line"]

    write_servers(config_dir, re_pointed(change, side_effects, other))
    made = await call(config_dir, data_dir, "srva_append_line", line="unasked")

    assert made.returncode == 3, (made.stdout, effects(other))
    assert (
        "srva now runs a different program than when the rule was written: the policy's allow "
        "for srva_append_line does not apply" in made.stdout + made.stderr
    )
    assert effects(side_effects) == ["allowed"]
    assert effects(other) == []
    assert (rule["rule"], rule["server"]) == ("allow", "srva") and len(rule["identity"]) == 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def append_over_http(file: Path) -> Iterator[str]:
    """The append fixture server over streamable HTTP on 127.0.0.1: its URL."""
    port = free_port()
    argv = [sys.executable, APPEND_SERVER, "--file", str(file), "--transport", "http"]
    process = subprocess.Popen(
        [*argv, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.processes
async def test_an_allow_does_not_follow_a_re_pointed_url(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    mine, theirs = tmp_path / "mine.txt", tmp_path / "theirs.txt"
    with append_over_http(mine) as url, append_over_http(theirs) as other_url:
        write_servers(config_dir, {"srva": {"url": url}})
        await allow_always(config_dir, data_dir, "srva_append", {"mark": "allowed"})

        write_servers(config_dir, {"srva": {"url": other_url}})
        made = await call(config_dir, data_dir, "srva_append", mark="unasked")

        assert made.returncode == 3, (made.stdout, effects(theirs))
        assert "srva now runs a different program" in made.stdout + made.stderr
        assert effects(mine) == ["allowed"]
        assert effects(theirs) == []


@pytest.mark.processes
async def test_an_unchanged_server_keeps_its_rule_across_restarts(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    await allow_always(config_dir, data_dir, "srva_append_line", {"line": "allowed"})

    # The same entry written again, its env changed: the same program.
    write_servers(config_dir, {"srva": {**gate(side_effects), "env": {"ANY": "value"}}})
    made = await call(config_dir, data_dir, "srva_append_line", line="again")

    assert made.returncode == 0, made.stderr
    assert effects(side_effects) == ["allowed", "again"]


@pytest.mark.processes
async def test_a_rule_written_before_identities_is_bound_at_its_first_use_and_says_so(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    older = {"tools": {"srva_append_line": {"rule": "allow", "server": "srva"}}}
    (config_dir / "policy.json").write_text(json.dumps(older))
    listed = await diana_here_async(config_dir, data_dir, "policy")
    assert listed.returncode == 0, listed.stderr
    assert "bound to the program MCP server srva runs at its next use" in listed.stdout

    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        events = runtime.bus.subscribe()
        await runtime.mcp.wait_ready()
        ran = await runtime.orchestrator.execute("srva_append_line", {"line": "first use"})
        assert ran.success, ran
        told = []
        while not events.queue.empty():
            event = events.queue.get_nowait()
            if isinstance(event, Notice):
                told.append(event.message)
    assert any("is bound from now on to the program srva runs now" in t for t in told), told
    rule = policy_of(config_dir)["tools"]["srva_append_line"]
    assert rule["server"] == "srva" and len(rule["identity"]) == 32

    write_servers(config_dir, {"srva": gate(other)})
    made = await call(config_dir, data_dir, "srva_append_line", line="unasked")
    assert made.returncode == 3, made.stderr
    assert effects(side_effects) == ["first use"]
    assert effects(other) == []


# -- a proposal follows the program ----------------------------------------------------------


@pytest.mark.processes
async def test_a_proposal_approved_after_its_server_was_re_pointed_is_withdrawn_never_run(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    made = await call(config_dir, data_dir, "srva_append_line", line="proposed")
    assert made.returncode == 3, made.stderr
    proposal_id = made.stdout.split()[-1]

    write_servers(config_dir, {"srva": gate(other)})
    approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)

    assert approved.returncode == 2, approved.stderr
    assert approved.stderr.startswith(
        f"diana: proposal {proposal_id} was withdrawn without running: srva now runs a "
        "different program than when the call was proposed: not run; to run it, make the "
        "call again"
    ), approved.stderr
    assert len(approved.stderr.strip().splitlines()) == 1
    row = proposal_row(data_dir, proposal_id)
    assert row["status"] == "withdrawn" and "different program" in row["error"]
    assert effects(side_effects) == [] and effects(other) == []

    # Put back as it was, the proposal is still withdrawn: never run.
    write_servers(config_dir, {"srva": gate(side_effects)})
    again = await diana_here_async(config_dir, data_dir, "approve", proposal_id)
    assert again.returncode == 2 and "withdrawn" in again.stderr
    assert effects(side_effects) == []


@pytest.mark.processes
async def test_a_proposal_whose_server_is_unchanged_runs_when_approved(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects = tmp_path / "effects.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    made = await call(config_dir, data_dir, "srva_append_line", line="proposed")
    proposal_id = made.stdout.split()[-1]
    # Another server added, this one's env changed: srva runs the same program.
    write_servers(
        config_dir,
        {"srva": {**gate(side_effects), "env": {"X": "1"}}, "srvb": gate(tmp_path / "b.txt")},
    )

    approved = await diana_here_async(config_dir, data_dir, "approve", proposal_id)

    assert approved.returncode == 0, approved.stderr
    assert effects(side_effects) == ["proposed"]


# -- a removed server's rules ------------------------------------------------------------------


@pytest.mark.processes
async def test_a_removed_servers_rules_show_as_orphaned_and_never_allow_a_new_program(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    await allow_always(config_dir, data_dir, "srva_append_line", {"line": "allowed"})

    removed = await diana_here_async(config_dir, data_dir, "servers", "remove", "srva")
    assert removed.returncode == 0, removed.stderr
    listed = await diana_here_async(config_dir, data_dir, "policy")
    assert "srva_append_line of MCP server srva — orphaned: no MCP server srva is configured" in (
        listed.stdout
    ), listed.stdout
    (entry,) = json.loads((await diana_here_async(config_dir, data_dir, "policy", "--json")).stdout)
    assert entry["standing"] == "orphaned"

    # Another program put under the name: asked, never allowed by the orphaned rule.
    write_servers(config_dir, {"srva": gate(other)})
    made = await call(config_dir, data_dir, "srva_append_line", line="unasked")
    assert made.returncode == 3, made.stderr
    assert effects(other) == []
    (entry,) = json.loads((await diana_here_async(config_dir, data_dir, "policy", "--json")).stdout)
    assert entry["standing"] == "another program now"


# -- in the app ----------------------------------------------------------------------------------


@pytest.mark.processes
async def test_in_the_app_call_asks_again_once_the_server_is_re_pointed(tmp_path: Path) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    app = build_app(tmp_path, {"srva": gate(side_effects)})
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        runtime = app.core._runtime
        await type_command(pilot, '/call srva_append_line {"line": "allowed"}')
        await pilot.press("f3", "A")  # always allow
        await settled(app)
        await until(lambda: effects(side_effects) == ["allowed"])
        before = runtime.mcp.identity_of("srva")

        write_servers(tmp_path / "config", {"srva": gate(other)})
        await until(lambda: runtime.mcp.identity_of("srva") not in (before, None), within=20)
        await runtime.mcp.wait_ready()
        await type_command(pilot, '/call srva_append_line {"line": "unasked"}')

        (held,) = await runtime.approvals.store.select()
        assert held.reason.startswith(
            "srva now runs a different program than when the rule was written"
        ), held.reason
        assert effects(other) == []

        await pilot.press("f3", "p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PolicyScreen)
        table = screen.query_one("#policy-table", DataTable)
        assert [str(cell) for cell in table.get_row_at(0)] == [
            "tool",
            "srva_append_line",
            "allow",
            "MCP server srva (re-pointed)",
            "yours",
        ]
    assert effects(side_effects) == ["allowed"] and effects(other) == []


@pytest.mark.processes
async def test_a_server_re_pointed_between_approval_and_run_is_not_run(
    config_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    side_effects, other = tmp_path / "effects.txt", tmp_path / "other.txt"
    write_servers(config_dir, {"srva": gate(side_effects)})
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        held = await runtime.orchestrator.execute("srva_append_line", {"line": "seen"})
        assert held.error_code is ErrorCode.PENDING_APPROVAL, held
        (proposal,) = await runtime.approvals.store.select()
        store = runtime.approvals.store
        mark_executing = store.mark_executing

        async def re_pointed_first(proposal_id: str, at: Any) -> Any:
            # The edit lands after the approval was checked, before the call runs.
            write_servers(config_dir, {"srva": gate(other)})
            await runtime.mcp.reload()
            await runtime.mcp.wait_ready()
            return await mark_executing(proposal_id, at)

        store.mark_executing = re_pointed_first  # type: ignore[method-assign]
        decision = await runtime.approvals.approve(proposal.id, by="test")

    assert decision.result is not None and not decision.result.success
    assert "srva now runs a different program than when the call was proposed" in (
        decision.result.error or ""
    )
    assert effects(side_effects) == [] and effects(other) == []
