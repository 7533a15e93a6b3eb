"""categorize_action_risk and requires_approval: the table of well-known names and its additions."""

from __future__ import annotations

import pytest
from diana.core.approvals.risk import categorize_action_risk, requires_approval
from diana.core.mcp.server_agent import definition_for
from diana.core.models import RiskLevel

R, D, X = RiskLevel.REVERSIBLE, RiskLevel.REVERSIBLE_WITH_DELAY, RiskLevel.IRREVERSIBLE


@pytest.mark.parametrize(
    ("tool", "level"),
    [
        ("web_search", R),
        ("read_file", R),
        ("get_current_time", R),
        ("search_memory", R),
        ("send_email", D),
        ("create_calendar_event", D),
        ("schedule_task", D),
        ("delete_file", X),
        ("make_purchase", X),
        ("send_money", X),
        ("modify_production", X),
        ("unknown_tool", X),
        ("files_read_file", R),
        ("mail_send_email", D),
        ("fs_delete_file", X),
        ("time_get_current_time", R),
    ],
)
def test_the_well_known_names_and_namespaced_names(tool: str, level: RiskLevel) -> None:
    assert categorize_action_risk(tool, {}).level is level


@pytest.mark.parametrize(
    ("level", "confidence", "needed"),
    [
        (R, 0.7, False),
        (R, None, False),
        (D, 0.80, True),
        (D, 0.85, False),
        (D, 0.95, False),
        (D, None, True),
        (X, 0.95, True),
        (X, 1.0, True),
    ],
)
def test_requires_approval(level: RiskLevel, confidence: float | None, needed: bool) -> None:
    assert requires_approval(level, confidence) is needed


@pytest.mark.parametrize(
    "path",
    [
        "~/.ssh/config",
        "/home/ada/.ssh/authorized_keys",
        "/etc/shadow",
        "server.pem",
        "certs/site.KEY",
        "/srv/app/.env",
        ".env.production",
        "/home/ada/.aws/credentials",
        "gcp-credentials.json",
        "~/.ssh/id_ed25519",
    ],
)
def test_sensitive_targets_escalate_a_reversible_read(path: str) -> None:
    assessment = categorize_action_risk("read_file", {"path": path})
    assert assessment.level is X
    assert path in assessment.reason


def test_ordinary_paths_stay_reversible() -> None:
    assert categorize_action_risk("read_file", {"path": "notes/keyboard.md"}).level is R


def _mcp_tool(name: str, **hints: bool) -> object:
    import mcp_types as types

    return types.Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(**hints) if hints else None,
    )


def test_annotations_inform_the_risk_with_a_reason() -> None:
    destructive = definition_for("filesystem", _mcp_tool("wipe", destructive_hint=True), None)
    read_only = definition_for("filesystem", _mcp_tool("stat", read_only_hint=True), None)
    silent = definition_for("filesystem", _mcp_tool("frob"), None)
    assert (
        categorize_action_risk(destructive.name, {}, destructive).reason
        == "destructiveHint set by server filesystem"
    )
    assert categorize_action_risk(read_only.name, {}, read_only).level is R
    assert categorize_action_risk(silent.name, {}, silent).level is X


def test_a_server_cannot_talk_a_known_destructive_tool_down() -> None:
    lying = definition_for("fs", _mcp_tool("delete_file", read_only_hint=True), None)
    assessment = categorize_action_risk(lying.name, {"path": "a.txt"}, lying)
    assert assessment.level is X and "delete_file" in assessment.reason
