"""policy.json: allow / ask / deny rules per tool and per server.

A server rule covers its tools; a tool rule is more specific and wins over its server's rule,
except that deny always beats allow: a server denied stays denied for a tool allowed by name.
Rules written from the app go through one sequential writer with an atomic replace, and every
process re-reads the file when its content changes, so a decision takes effect everywhere at
once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import ConfigError, config_present, describe_pydantic_error, read_json
from ..config_writer import writer_for
from ..watch import Stamp, file_stamp

POLICY_FILE = "policy.json"


class Rule(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: dict[str, Rule] = Field(default_factory=dict)
    servers: dict[str, Rule] = Field(default_factory=dict)
    # A server's requests to the local model (MCP sampling); none is allowed unless named.
    sampling: dict[str, Rule] = Field(default_factory=dict)


@dataclass(frozen=True)
class RuleMatch:
    rule: Rule
    source: str  # e.g. 'tool rule for files_write_file', 'server rule for files'


def load_policy(path: Path) -> PolicyFile:
    if not config_present(path):  # a dangling link or a FIFO is an error, not "no rules"
        return PolicyFile()
    try:
        return PolicyFile.model_validate(read_json(path))
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None


class Policy:
    """The rules in force, re-read whenever the file's content changes."""

    def __init__(
        self,
        locate: Callable[[], Path],
        user_file: Path,
        on_checked: Callable[[str | None], None] = lambda _problem: None,
    ) -> None:
        self._locate = locate  # the user's file if present, else the shipped default
        self.user_file = user_file
        self._on_checked = on_checked  # after each re-read: what was wrong, or None
        self._stamp: Stamp = None
        self._rules = PolicyFile()
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> None:
        path = self._locate()
        # By content, not size and time: a file copied over with its time kept is a change.
        stamp = file_stamp(path)
        if stamp == self._stamp:
            return
        try:
            self._rules = load_policy(path)
        except ConfigError as exc:
            if strict:
                raise
            self._on_checked(str(exc))  # keep the rules that were in force
        else:
            if not strict:
                self._on_checked(None)
        self._stamp = stamp

    def rule_for(self, tool: str, server: str | None) -> RuleMatch | None:
        self.reload()
        tool_rule = self._rules.tools.get(tool)
        server_rule = self._rules.servers.get(server) if server else None
        if server_rule is Rule.DENY and tool_rule is not Rule.DENY:
            return RuleMatch(Rule.DENY, f"server rule for {server}")
        if tool_rule is not None:
            return RuleMatch(tool_rule, f"tool rule for {tool}")
        if server_rule is not None:
            return RuleMatch(server_rule, f"server rule for {server}")
        return None

    def sampling_rule(self, server: str) -> RuleMatch | None:
        """The rule for a server's sampling requests; a tool rule for mcp_sampling counts for
        every server, and deny beats allow either way."""
        from ..sampling import SAMPLING_TOOL

        self.reload()
        tool_rule = self._rules.tools.get(SAMPLING_TOOL)
        server_rule = self._rules.sampling.get(server)
        if Rule.DENY in (tool_rule, server_rule):
            which = f"sampling rule for {server}" if server_rule is Rule.DENY else None
            return RuleMatch(Rule.DENY, which or f"tool rule for {SAMPLING_TOOL}")
        if server_rule is not None:
            return RuleMatch(server_rule, f"sampling rule for {server}")
        if tool_rule is not None:
            return RuleMatch(tool_rule, f"tool rule for {SAMPLING_TOOL}")
        return None

    async def set_tool_rule(self, tool: str, rule: Rule) -> None:
        """Write one tool rule into the user's policy file (atomically, one writer at a time)."""
        await self._set_rule("tools", tool, rule)

    async def set_sampling_rule(self, server: str, rule: Rule) -> None:
        """Write the rule for one server's sampling requests."""
        await self._set_rule("sampling", server, rule)

    async def _set_rule(self, section: str, key: str, rule: Rule) -> None:
        in_force = self._rules.model_dump(mode="json")

        def change(current: Any) -> Any:
            return {**current, section: {**current.get(section, {}), key: rule.value}}

        await writer_for(self.user_file).update(change, _validate, default=lambda: in_force)
        self.reload()


def _validate(value: Any, path: Path) -> None:
    try:
        PolicyFile.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None
