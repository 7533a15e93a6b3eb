"""policy.json: allow / ask / deny rules per tool and per server.

A server rule covers its tools; a tool rule is more specific and wins over its server's rule,
except that deny always beats allow: a server denied stays denied for a tool allowed by name.

A tool rule is bound to the tool it was written for: "always allow" in the app writes
``{"rule": "allow", "server": "files"}`` (or ``"agent": "local"`` for one of diana's own
agents), and that allow is the server's alone: should another server's tool come to bear the
name, the rule does not allow it. Rules that hold calls back (ask, deny) hold back any tool of
that name. A plain rule (``"files_read": "allow"``), as written by hand, applies to whichever
tool bears the name.

A rule written for a server's tool is bound to the program the server ran, too: ``identity`` is
a hash of its command, arguments, folder and URL as written in mcp-servers.json
(``launch_identity``). Renamed, edited or re-pointed, the server runs another program, and
the allow does not apply to it: the call is proposed, saying why. A rule written before diana
recorded identities (``{"rule": "allow", "server": "files"}``) is bound to the program the
server runs at its first use after, and a notice says so: that is the program the rule has
been allowing, and from then on another one is asked about.

A rule whose server is no longer in mcp-servers.json is kept, shown as orphaned (``diana
policy``, the Policy view): a server is removed in many ways (`diana servers remove`, the
model's request, an edit by hand, a file swapped for a backup), and one put back unchanged
gets its rules back; bound to the program, an orphaned rule never allows another one put
under the same name. A person removes it with `diana policy remove` or d in the Policy view.

Rules written from the app or `diana policy remove` go through one sequential writer with an
atomic replace, and every process re-reads the file when its content changes, so a decision
takes effect everywhere at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from ..config.settings import ConfigError, config_present, describe_pydantic_error, read_json
from ..config.watch import Stamp, file_stamp
from ..config.writer import writer_for

POLICY_FILE = "policy.json"

Kind = Literal["tool", "server", "sampling"]
SECTIONS: dict[Kind, str] = {"tool": "tools", "server": "servers", "sampling": "sampling"}


class Rule(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Standing(StrEnum):
    """How a rule written for a server's tool stands now (see the module's text)."""

    ORPHANED = "orphaned"  # no server of that name is configured now
    MOVED = "another program now"  # the server runs another program than when written
    UNBOUND = "bound at its next use"  # written before diana recorded programs

    def said(self, server: str) -> str:
        if self is Standing.ORPHANED:
            return f"orphaned: no MCP server {server} is configured now"
        if self is Standing.MOVED:
            return program_changed(f"MCP server {server}", "the rule was written")
        return f"bound to the program MCP server {server} runs at its next use"


class ToolRule(BaseModel):
    """A tool's rule and, when it was written for one tool, whose tool that was: an MCP
    server's (``server``) or one of diana's own agents' (``agent``). Written as the plain
    rule (``"allow"``) when it is bound to neither."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: Rule
    server: str | None = Field(default=None, min_length=1)
    agent: str | None = Field(default=None, min_length=1)
    # For a server's tool: the program the server ran (see the module's text); None in a rule
    # written before diana recorded it.
    identity: str | None = Field(default=None, min_length=1, max_length=64)

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, value: Any) -> Any:
        return {"rule": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_owner(self) -> ToolRule:
        if self.server is not None and self.agent is not None:
            raise ValueError("a rule is bound to a server or to an agent, not both")
        if self.identity is not None and self.server is None:
            raise ValueError('"identity" is the program of the rule\'s "server": give both')
        return self

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> Any:
        if self.bound_to is None:
            return self.rule.value
        return {key: value for key, value in handler(self).items() if value is not None}

    @property
    def bound_to(self) -> str | None:
        """Whose tool the rule was written for, in words; None for a plain rule."""
        if self.server is not None:
            return f"MCP server {self.server}"
        if self.agent is not None:
            return f"agent {self.agent}"
        return None

    def covers(self, server: str | None, agent: str | None, identity: str | None = None) -> bool:
        """Whether the rule was written for this tool (a plain rule is for any): a server's
        tool, run by the same program (``identity``) if the rule recorded it."""
        if self.server is not None:
            return server == self.server and self.identity in (None, identity)
        if self.agent is not None:
            return server is None and agent == self.agent
        return True


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: dict[str, ToolRule] = Field(default_factory=dict)
    servers: dict[str, Rule] = Field(default_factory=dict)
    # A server's requests to the local model (MCP sampling); none is allowed unless named.
    sampling: dict[str, Rule] = Field(default_factory=dict)


@dataclass(frozen=True)
class RuleMatch:
    rule: Rule
    source: str  # e.g. 'tool rule for files_write_file', 'server rule for files'


@dataclass(frozen=True)
class PolicyEntry:
    """One rule as a person is shown it: what it is for, the rule, whose tool it was written
    for, and the file it came from."""

    kind: Kind
    name: str
    rule: Rule
    server: str | None
    agent: str | None
    file: Path
    shipped: bool  # the file is the shipped default (there is no policy.json of the user's)
    identity: str | None = None  # the program of ``server`` it is bound to, if recorded
    # Whether the rule no longer stands for what it was written for (its server is gone, or
    # runs another program now), or waits to be bound; None when it holds as written.
    standing: Standing | None = None

    @property
    def applies_to(self) -> str:
        if self.kind == "server":
            return f"every tool of MCP server {self.name}"
        if self.kind == "sampling":
            return f"MCP server {self.name} asking the local model"
        owner = f"MCP server {self.server}" if self.server is not None else None
        owner = f"agent {self.agent}" if self.agent is not None else owner
        if owner is None:
            return f"any tool named {self.name}"
        if self.rule is Rule.ALLOW:  # an allow is the owner's alone
            applies = f"{self.name} of {owner}"
        else:
            applies = f"any tool named {self.name} (written for {owner}'s)"
        if self.standing is None or self.server is None:
            return applies
        return f"{applies} — {self.standing.said(self.server)}"

    @property
    def origin(self) -> str:
        return "the shipped default" if self.shipped else "your policy.json"

    def public(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "rule": self.rule.value,
            "server": self.server,
            "agent": self.agent,
            "identity": self.identity,
            "standing": None if self.standing is None else self.standing.value,
            "applies_to": self.applies_to,
            "file": str(self.file),
            "origin": "shipped" if self.shipped else "user",
        }


class UnknownRule(LookupError):
    """No rule by the name given; the message names the rules there are."""


def load_policy(path: Path) -> PolicyFile:
    if not config_present(path):  # a dangling link or a FIFO is an error, not "no rules"
        return PolicyFile()
    try:
        return PolicyFile.model_validate(read_json(path))
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None


def described(kind: Kind, name: str, entry: Any) -> str:
    """A rule as written in the file, in words: 'tool rule a_b_c (allow, MCP server a)'."""
    try:
        rule = ToolRule.model_validate(entry)
    except ValidationError:
        return f"{kind} rule {name}"
    bound = f", {rule.bound_to}" if rule.bound_to else ""
    return f"{kind} rule {name} ({rule.rule.value}{bound})"


def standing(rule: ToolRule, configured: dict[str, str] | None) -> Standing | None:
    """How a rule bound to a server stands against the servers configured now (name ->
    launch identity); None when it holds as written, or those are not known."""
    if rule.server is None or configured is None:
        return None
    if rule.server not in configured:
        return Standing.ORPHANED
    if rule.rule is not Rule.ALLOW:  # ask and deny hold back any tool of the name, any program
        return None
    if rule.identity is None:
        return Standing.UNBOUND
    return Standing.MOVED if configured[rule.server] != rule.identity else None


def program_changed(server: str, what: str) -> str:
    """The one sentence for a server whose program is not the one ``what`` was made for."""
    return f"{server} now runs a different program than when {what}"


class Policy:
    """The rules in force, re-read whenever the file's content changes."""

    def __init__(
        self,
        locate: Callable[[], Path],
        user_file: Path,
        on_checked: Callable[[str | None], None] = lambda _problem: None,
        configured: Callable[[], dict[str, str] | None] = lambda: None,
    ) -> None:
        self._locate = locate  # the user's file if present, else the shipped default
        self.user_file = user_file
        self._on_checked = on_checked  # after each re-read: what was wrong, or None
        # The MCP servers in mcp-servers.json now, name -> launch identity (None: unknown):
        # what the rules a person is shown are measured against.
        self.configured = configured
        self._stamp: Stamp = None
        self._path: Path | None = None  # the file the rules in force were read from
        self._rules = PolicyFile()
        self.reload(strict=True)

    def reload(self, strict: bool = False) -> bool:
        """Read the file again if its content changed; True when it did."""
        path = self._locate()
        # By content, not size and time: a file copied over with its time kept is a change.
        stamp = file_stamp(path)
        if stamp == self._stamp:
            return False
        try:
            self._rules = load_policy(path)
        except ConfigError as exc:
            if strict:
                raise
            self._on_checked(str(exc))  # keep the rules that were in force
        else:
            self._path = path
            if not strict:
                self._on_checked(None)
        self._stamp = stamp
        return True

    def rule_for(
        self, tool: str, server: str | None, agent: str | None = None, identity: str | None = None
    ) -> RuleMatch | None:
        """The rule for a call of ``tool``, a tool of MCP server ``server`` running the program
        ``identity`` (None for one of diana's own agents, ``agent``)."""
        self.reload()
        bound = self._rules.tools.get(tool)
        tool_rule = None
        covered = bound is not None and bound.covers(server, agent, identity)
        if bound is not None and (covered or bound.rule is not Rule.ALLOW):
            tool_rule = bound.rule
        server_rule = self._rules.servers.get(server) if server else None
        source = f"tool rule for {tool}"
        if bound is not None and bound.bound_to is not None:
            source += f", written for {bound.bound_to}"
        if server_rule is Rule.DENY and tool_rule is not Rule.DENY:
            return RuleMatch(Rule.DENY, f"server rule for {server}")
        if tool_rule is not None:
            return RuleMatch(tool_rule, source)
        if server_rule is not None:
            return RuleMatch(server_rule, f"server rule for {server}")
        return None

    def set_aside(
        self, tool: str, server: str | None, agent: str | None = None, identity: str | None = None
    ) -> str | None:
        """Why an allow for ``tool`` does not apply to this call: it was written for another
        server's (or agent's) tool of that name, or for the program its server ran then. None
        when there is no such allow."""
        bound = self._rules.tools.get(tool)
        if bound is None or bound.rule is not Rule.ALLOW or bound.covers(server, agent, identity):
            return None
        if server is not None and bound.server == server:
            changed = program_changed(server, "the rule was written")
            return f"{changed}: the policy's allow for {tool} does not apply"
        this = f"MCP server {server}'s" if server is not None else f"agent {agent}'s"
        return (
            f"the policy allows {tool} of {bound.bound_to} only, and this {tool} is {this}: "
            "that allow does not apply"
        )

    def sampling_rule(self, server: str) -> RuleMatch | None:
        """The rule for a server's sampling requests; a tool rule for mcp_sampling counts for
        every server, and deny beats allow either way."""
        from ..calls.sampling_call import SAMPLING_TOOL

        self.reload()
        bound = self._rules.tools.get(SAMPLING_TOOL)
        tool_rule = bound.rule if bound is not None else None
        server_rule = self._rules.sampling.get(server)
        if Rule.DENY in (tool_rule, server_rule):
            which = f"sampling rule for {server}" if server_rule is Rule.DENY else None
            return RuleMatch(Rule.DENY, which or f"tool rule for {SAMPLING_TOOL}")
        if server_rule is not None:
            return RuleMatch(server_rule, f"sampling rule for {server}")
        if tool_rule is not None:
            return RuleMatch(tool_rule, f"tool rule for {SAMPLING_TOOL}")
        return None

    # -- what a person sees and changes ---------------------------------------------------

    @property
    def path(self) -> Path:
        """The file the rules in force come from: the user's, or the shipped default."""
        self.reload()
        return self._path or self._locate()

    @property
    def shipped(self) -> bool:
        """Whether the rules in force are the shipped default (the user has no policy.json)."""
        return self.path != self.user_file

    def entries(self) -> list[PolicyEntry]:
        """Every rule in force: tool rules, then server rules, then sampling rules; a tool
        rule of a server says if that server is gone or runs another program now."""
        self.reload()
        path, shipped = self.path, self.shipped
        rules = self._rules
        configured = self.configured() if any(r.server for r in rules.tools.values()) else None
        listed = [
            PolicyEntry(
                "tool",
                name,
                rule.rule,
                rule.server,
                rule.agent,
                path,
                shipped,
                rule.identity,
                standing(rule, configured),
            )
            for name, rule in rules.tools.items()
        ]
        listed += [
            PolicyEntry("server", name, rule, None, None, path, shipped)
            for name, rule in rules.servers.items()
        ]
        listed += [
            PolicyEntry("sampling", name, rule, None, None, path, shipped)
            for name, rule in rules.sampling.items()
        ]
        return listed

    async def set_tool_rule(
        self,
        tool: str,
        rule: Rule,
        *,
        server: str | None = None,
        agent: str | None = None,
        identity: str | None = None,
    ) -> None:
        """Write one tool rule into the user's policy file (atomically, one writer at a
        time), bound to the tool of ``server`` running the program ``identity`` (or of
        diana's own ``agent``), if given."""
        written = ToolRule(rule=rule, server=server, agent=agent, identity=identity).model_dump(
            mode="json"
        )
        await self._update(lambda current: _with(current, "tools", tool, written))

    def unbound(self, tool: str, server: str) -> bool:
        """Whether the rule for ``tool`` is bound to ``server`` but not yet to its program
        (written before diana recorded it)."""
        bound = self._rules.tools.get(tool)
        return bound is not None and bound.server == server and bound.identity is None

    async def bind_identity(self, tool: str, server: str, identity: str) -> bool:
        """Bind the rule for ``tool``, written for ``server`` before diana recorded programs,
        to the program ``identity`` that server runs now; True if it was written so (False:
        the file holds something else by now)."""
        bound: list[bool] = []

        def change(current: Any) -> Any:
            bound.clear()
            entry = current.get("tools", {}).get(tool) if isinstance(current, dict) else None
            if not isinstance(entry, dict) or entry.get("server") != server:
                return current
            if entry.get("identity") is not None:
                return current
            bound.append(True)
            return _with(current, "tools", tool, {**entry, "identity": identity})

        await self._update(change)
        return bool(bound)

    async def set_sampling_rule(self, server: str, rule: Rule) -> None:
        """Write the rule for one server's sampling requests."""
        await self._update(lambda current: _with(current, "sampling", server, rule.value))

    async def remove_rule(self, name: str, kind: Kind | None = None) -> str:
        """Take the rule named ``name`` (of ``kind``: tool, server or sampling) out of the
        user's policy file; returns it in words. A rule of the shipped default is taken out
        by writing the user's file without it. UnknownRule, naming the rules there are, if
        there is none by that name, or if the name is that of rules of several kinds and
        ``kind`` does not say which."""
        removed: list[str] = []

        def change(current: Any) -> Any:
            removed.clear()
            if not isinstance(current, dict):
                return current  # the validation of what is there reports it
            kinds = [kind] if kind is not None else list(SECTIONS)
            found = [
                k
                for k in kinds
                if isinstance(current.get(SECTIONS[k]), dict) and name in current[SECTIONS[k]]
            ]
            if not found:
                raise UnknownRule(_unknown_rule(name, kind, current))
            if len(found) > 1:
                raise UnknownRule(
                    f"{name} names a {' and a '.join(f'{k} rule' for k in found)}: say which "
                    f"with --kind {' or --kind '.join(found)}"
                )
            section = SECTIONS[found[0]]
            entry = current[section][name]
            removed.append(described(found[0], name, entry))
            kept = {key: value for key, value in current[section].items() if key != name}
            return {**current, section: kept}

        await self._update(change)
        return removed[0]

    async def _update(self, change: Callable[[Any], Any]) -> None:
        # A file that is not there yet starts as the rules in force (the shipped default).
        self.reload()
        in_force = self._rules.model_dump(mode="json")
        await writer_for(self.user_file).update(change, _validate, default=lambda: in_force)
        self.reload()


def _with(current: Any, section: str, key: str, value: Any) -> Any:
    if not isinstance(current, dict):
        return current  # the validation of what is there reports it
    return {**current, section: {**current.get(section, {}), key: value}}


def _unknown_rule(name: str, kind: Kind | None, current: dict[str, Any]) -> str:
    kinds = [kind] if kind is not None else list(SECTIONS)
    listed = []
    for k in kinds:
        rules = current.get(SECTIONS[k])
        names = ", ".join(rules) if isinstance(rules, dict) and rules else "none"
        listed.append(f"{SECTIONS[k]}: {names}")
    what = f"{kind} rule" if kind is not None else "rule"
    return f"no {what} named {name} in the policy ({'; '.join(listed)})"


def _validate(value: Any, path: Path) -> None:
    try:
        PolicyFile.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None
