"""The policy a person can see and undo: A and R in Approvals say what they wrote and where,
p opens every rule with whose tool it is bound to and where it came from, d takes one out;
`diana policy` lists the same and `diana policy remove` takes one out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.tui.app import DianaApp
from diana.tui.modals.dialogs import ConfirmDialog
from diana.tui.modals.policy import PolicyScreen
from textual.widgets import DataTable, Static

from .commands import diana
from .scenarios import FILES, build_app, settle, type_command
from .waits import settled, work_done

pytestmark = pytest.mark.processes  # every test here starts a process

SMALL = (80, 24)
RULES = {
    "tools": {
        "files_delete_file": {"rule": "allow", "server": "files"},
        "save_fact": "deny",
    },
    "servers": {"github": "ask"},
    "sampling": {"files": "allow"},
}


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the view's own state
            await asyncio.sleep(0.02)


def rows(screen: PolicyScreen) -> list[list[str]]:
    table = screen.query_one("#policy-table", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def said(app: DianaApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_always_allow_says_what_it_wrote_and_the_policy_view_takes_it_out(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, FILES)
    policy_file = tmp_path / "config" / "policy.json"
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await type_command(pilot, '/call files_delete_file {"path": "x"}')
        await pilot.press("f3", "A")
        await settled(app)
        await settled(app)
        assert app.core is not None
        store = app.core._runtime.approvals.store
        assert (await store.get("p000001")).status is ProposalStatus.SUCCEEDED
        assert any(
            message.startswith(
                "files_delete_file (MCP server files): always allowed from now on — written to "
            )
            and "policy.json" in message
            for message in said(app)
        ), said(app)

        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PolicyScreen)
        assert rows(screen) == [["tool", "files_delete_file", "allow", "MCP server files", "yours"]]

        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)  # asked first, as every removal is
        await pilot.press("y")
        await work_done(app, "policy")
        await pilot.pause()
        assert json.loads(policy_file.read_text())["tools"] == {}
        last = str(screen.query_one("#policy-last", Static).render())
        assert "Removed tool rule files_delete_file (allow, MCP server files)" in last
        assert "policy.json" in last
        assert rows(screen) == []
        assert screen.query_one("#policy-empty").display

        await pilot.press("escape")
        assert not isinstance(app.screen, PolicyScreen)
        # Without the rule, the next call waits for a person again.
        await type_command(pilot, '/call files_delete_file {"path": "y"}')
        assert (await store.get("p000002")).status is ProposalStatus.PENDING


async def test_the_policy_view_lists_every_rule_and_follows_the_file(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    policy_file = tmp_path / "config" / "policy.json"
    policy_file.write_text(json.dumps(RULES))
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("f3", "p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PolicyScreen)
        assert rows(screen) == [
            ["tool", "files_delete_file", "allow", "MCP server files", "yours"],
            ["tool", "save_fact", "deny", "any of that name", "yours"],
            ["server", "github", "ask", "all its tools", "yours"],
            ["sampling", "files", "allow", "asking the model", "yours"],
        ]
        # Taken out elsewhere (`diana policy remove`, an editor): the view follows.
        policy_file.write_text(json.dumps({**RULES, "servers": {}}))
        await until(lambda: len(rows(screen)) == 3)
        assert [row[1] for row in rows(screen)] == ["files_delete_file", "save_fact", "files"]


def test_diana_policy_lists_and_removes_rules(tmp_path: Path) -> None:
    config_dir, data_dir = tmp_path / "config", tmp_path / "data"
    config_dir.mkdir()
    policy_file = config_dir / "policy.json"

    shipped = diana(config_dir, data_dir, "policy")
    assert shipped.returncode == 0, shipped.stderr
    assert "(the shipped default)" in shipped.stdout
    assert "none: each call is judged by its risk" in shipped.stdout

    policy_file.write_text(json.dumps(RULES))
    listed = diana(config_dir, data_dir, "policy")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"Rules from {policy_file} (yours):"
    assert lines[1].split() == ["KIND", "NAME", "RULE", "APPLIES", "TO"]
    # No server named files is configured: its rule is kept, and said to be orphaned.
    orphaned = "orphaned: no MCP server files is configured now"
    assert lines[2].split() == [
        "tool",
        "files_delete_file",
        "allow",
        *f"files_delete_file of MCP server files — {orphaned}".split(),
    ]
    assert lines[3].split() == ["tool", "save_fact", "deny", *"any tool named save_fact".split()]

    as_json = diana(config_dir, data_dir, "policy", "--json")
    assert as_json.returncode == 0, as_json.stderr
    first, *rest = json.loads(as_json.stdout)
    assert first == {
        "kind": "tool",
        "name": "files_delete_file",
        "rule": "allow",
        "server": "files",
        "agent": None,
        "identity": None,
        "standing": "orphaned",
        "applies_to": f"files_delete_file of MCP server files — {orphaned}",
        "file": str(policy_file),
        "origin": "user",
    }
    assert [(r["kind"], r["name"], r["rule"]) for r in rest] == [
        ("tool", "save_fact", "deny"),
        ("server", "github", "ask"),
        ("sampling", "files", "allow"),
    ]

    unknown = diana(config_dir, data_dir, "policy", "remove", "nothing_here")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "diana: no rule named nothing_here in the policy (tools: files_delete_file, save_fact; "
        "servers: github; sampling: files)"
    )
    # Two rules of one name: it asks which, and changes nothing.
    both = {**RULES, "servers": {"files": "deny"}}
    policy_file.write_text(json.dumps(both))
    unclear = diana(config_dir, data_dir, "policy", "remove", "files")
    assert unclear.returncode == 2
    assert "say which with --kind server or --kind sampling" in unclear.stderr
    assert json.loads(policy_file.read_text()) == both

    removed = diana(config_dir, data_dir, "policy", "remove", "files_delete_file")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == (
        f"removed tool rule files_delete_file (allow, MCP server files) from {policy_file}"
    )
    assert json.loads(policy_file.read_text()) == {
        **both,
        "tools": {"save_fact": "deny"},
    }
    server = diana(config_dir, data_dir, "policy", "remove", "files", "--kind", "server")
    assert server.returncode == 0, server.stderr
    assert json.loads(policy_file.read_text())["servers"] == {}


async def test_d_in_the_policy_view_asks_before_it_removes_a_rule(tmp_path: Path) -> None:
    app = build_app(tmp_path, FILES)
    policy_file = tmp_path / "config" / "policy.json"
    policy_file.write_text(json.dumps(RULES))
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("f3", "p", "down")  # save_fact: a deny
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PolicyScreen)
        for key in ("d", "delete"):
            for answer in ("n", "escape"):
                await pilot.press(key)
                await pilot.pause()
                asked = app.screen
                assert isinstance(asked, ConfirmDialog)
                question = str(asked.query_one(".confirm-question", Static).render())
                assert "save_fact" in question and "deny" in question
                await pilot.press(answer)
                await pilot.pause()
                assert app.screen is screen
                await work_done(app, "policy")
                assert json.loads(policy_file.read_text()) == RULES  # kept
        await pilot.press("d", "y")
        await work_done(app, "policy")
        await pilot.pause()
        assert "save_fact" not in json.loads(policy_file.read_text())["tools"]
        assert [row[1] for row in rows(screen)] == ["files_delete_file", "github", "files"]
