"""How undoable a call is: categorize_action_risk and requires_approval.

The level is the strictest of what is known about the tool: the table of well-known
tool names (matched on our namespaced names too, so `files_delete_file` is a delete_file),
what the tool declares (MCP annotations for server tools, an honest declaration for built-in
ones) and what its arguments point at (~/.ssh, /etc/shadow, keys, .env, credentials). A tool
nothing is known about is IRREVERSIBLE. Every assessment carries a reason a person can read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..models import RiskLevel, ToolDefinition

APPROVAL_CONFIDENCE = 0.85

KNOWN_TOOLS: dict[str, RiskLevel] = {
    "web_search": RiskLevel.REVERSIBLE,
    "read_file": RiskLevel.REVERSIBLE,
    "get_current_time": RiskLevel.REVERSIBLE,
    "search_memory": RiskLevel.REVERSIBLE,
    "memory_search": RiskLevel.REVERSIBLE,
    "send_email": RiskLevel.REVERSIBLE_WITH_DELAY,
    "create_calendar_event": RiskLevel.REVERSIBLE_WITH_DELAY,
    "schedule_task": RiskLevel.REVERSIBLE_WITH_DELAY,
    "delete_file": RiskLevel.IRREVERSIBLE,
    "make_purchase": RiskLevel.IRREVERSIBLE,
    "send_money": RiskLevel.IRREVERSIBLE,
    "modify_production": RiskLevel.IRREVERSIBLE,
}

_SEVERITY = {RiskLevel.REVERSIBLE: 0, RiskLevel.REVERSIBLE_WITH_DELAY: 1, RiskLevel.IRREVERSIBLE: 2}

SENSITIVE_TARGETS = [
    (re.compile(r"(^|/)\.ssh(/|$)"), "an SSH directory"),
    (re.compile(r"(^|/)etc/(shadow|gshadow|sudoers)\b"), "a system password file"),
    (re.compile(r"\.(pem|key|p12|pfx|keystore|jks)$", re.IGNORECASE), "a key file"),
    (re.compile(r"(^|/)\.env(\.[\w-]+)?$"), "an environment file"),
    (
        re.compile(
            r"(^|/)(\.aws/credentials|\.netrc|\.pgpass|\.git-credentials|"
            r"\.docker/config\.json|\.kube/config)$"
        ),
        "a credentials file",
    ),
    (re.compile(r"(^|/)[^/]*credentials?[^/]*$", re.IGNORECASE), "a credentials file"),
    (re.compile(r"(^|/)id_(rsa|dsa|ecdsa|ed25519)(\.pub)?$"), "an SSH key"),
]


@dataclass(frozen=True)
class RiskAssessment:
    level: RiskLevel
    reason: str


def known_risk(tool_name: str) -> tuple[str, RiskLevel] | None:
    """The well-known names' table, matched on the whole name or its `{namespace}_` suffix."""
    for known, level in KNOWN_TOOLS.items():
        if tool_name == known or tool_name.endswith("_" + known):
            return known, level
    return None


def sensitive_target(params: Any) -> tuple[str, str] | None:
    """The first string argument that points at something sensitive: (value, what it is)."""
    for value in _strings(params):
        text = value.strip().replace("\\", "/")
        for pattern, what in SENSITIVE_TARGETS:
            if pattern.search(text):
                return value, what
    return None


def categorize_action_risk(
    tool_name: str,
    params: dict[str, Any] | None = None,
    definition: ToolDefinition | None = None,
) -> RiskAssessment:
    found: list[RiskAssessment] = []
    known = known_risk(tool_name)
    if known is not None:
        found.append(RiskAssessment(known[1], f"{known[0]} is {_word(known[1])} by nature"))
    if definition is not None:
        found.append(_declared(definition))
    target = sensitive_target(params or {})
    if target is not None:
        found.append(
            RiskAssessment(
                RiskLevel.IRREVERSIBLE, f"an argument points at {target[1]}: {target[0]}"
            )
        )
    if not found:
        return RiskAssessment(
            RiskLevel.IRREVERSIBLE, f"{tool_name} is unknown, so it is treated as irreversible"
        )
    worst = max(_SEVERITY[a.level] for a in found)
    top = [a for a in found if _SEVERITY[a.level] == worst]
    return RiskAssessment(top[0].level, "; ".join(dict.fromkeys(a.reason for a in top)))


def requires_approval(level: RiskLevel, confidence: float | None = None) -> bool:
    """IRREVERSIBLE always; REVERSIBLE_WITH_DELAY below 0.85 confidence (none counts as 0);
    REVERSIBLE never."""
    if level is RiskLevel.IRREVERSIBLE:
        return True
    if level is RiskLevel.REVERSIBLE_WITH_DELAY:
        return (confidence or 0.0) < APPROVAL_CONFIDENCE
    return False


def _declared(definition: ToolDefinition) -> RiskAssessment:
    hints = definition.annotations
    category = definition.category or ""
    server = category.removeprefix("mcp:") if category.startswith("mcp:") else None
    if server is None:
        return RiskAssessment(
            definition.risk, f"{definition.name} declares itself {_word(definition.risk)}"
        )
    if hints.destructive:
        return RiskAssessment(RiskLevel.IRREVERSIBLE, f"destructiveHint set by server {server}")
    if hints.read_only:
        return RiskAssessment(RiskLevel.REVERSIBLE, f"readOnlyHint set by server {server}")
    if hints.destructive is False:
        return RiskAssessment(
            RiskLevel.REVERSIBLE_WITH_DELAY,
            f"server {server} marks it as changing data, not destroying it",
        )
    return RiskAssessment(
        RiskLevel.IRREVERSIBLE, f"server {server} gives no hint about {definition.name}"
    )


def _word(level: RiskLevel) -> str:
    return level.value.replace("_", " ")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []
