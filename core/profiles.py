"""Profiles: which parts of the core a runtime opens, by name.

A front end opens the runtime with one profile (``Runtime.open(Profile.READ, ...)``): the
app opens everything; a command that only reads the database opens the database and what
it reads, and imports nothing else; a command that calls a tool opens the agents and the MCP
servers it may need. A profile is a plain value: each field names a part, and ``but``
gives the same profile with a part changed (a test, or a command whose arguments decide).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

# Which MCP servers a runtime with agents knows: none, each started when first needed
# (core/mcp/manager.py), or every configured one connected at once.
Servers = Literal["none", "on_demand", "all"]
NO_SERVERS: Servers = "none"
ON_DEMAND: Servers = "on_demand"
ALL_SERVERS: Servers = "all"


@dataclass(frozen=True)
class Profile:
    """The parts a runtime opens. Every profile opens the database, the structured log and
    the proposals with the approval policy (what `diana proposals`, `show`, `reject` and
    `policy` read and write)."""

    name: str
    # The execution log (calls as they run, and `diana log` / `stats`).
    execution_log: bool = True
    # The cost ledger: units per agent and server, and the daily budget.
    cost: bool = True
    # The facts DIANA remembers (its embedder is made, never asked, until used).
    memory: bool = True
    # The orchestrator and diana's own agents, the MCP manager, the MCP Registry client, the
    # MCP sub-agent, the servers' questions and sampling: what running a call needs.
    agents: bool = True
    # With agents: which MCP servers are known and started.
    servers: Servers = ALL_SERVERS
    # With agents: the one configured server known and started (`diana serve --only NAME`);
    # None: every configured one. The others are never connected, even when added later.
    only: str | None = None
    # The OpenTelemetry exporter, when the OTEL_* variables ask for one.
    tracing: bool = True
    # The chat session made at open (a bad Ollama host is a start-up error); otherwise it
    # is made when first used.
    chat: bool = False
    # What the app shares with `diana` on the same data dir (core/shared/sharing.py), and the
    # memory's background embedding.
    share: bool = False
    # Config files watched: tools.json, settings.json, mcp-servers.json, the proposals.
    watch: bool = False
    # A tool's parameter schema is checked at its first call, not when registered.
    schemas_at_call: bool = False
    # A call (and an approval) is run by the diana-tui running on the data dir, if one is,
    # so each MCP server runs once; a gateway finding one at open starts no server itself.
    through_app: bool = False

    APP: ClassVar[Profile]
    READ: ClassVar[Profile]
    DECIDE: ClassVar[Profile]
    CALL: ClassVar[Profile]
    GATEWAY: ClassVar[Profile]

    def __post_init__(self) -> None:
        needs = {
            "memory": ("execution_log",),  # a forget first writes the calls queued
            "agents": ("execution_log", "cost", "memory"),
            "chat": ("agents",),
            "share": ("agents",),
        }
        for part, needed in needs.items():
            missing = [n for n in needed if getattr(self, part) and not getattr(self, n)]
            if missing:
                raise ValueError(f"profile {self.name}: {part} needs {', '.join(missing)}")

    def but(self, **parts: Any) -> Profile:
        """This profile with the parts named changed (its name kept)."""
        return dataclasses.replace(self, **parts)


# The app: everything, every server connected, config watched, shared with `diana`.
Profile.APP = Profile("app", chat=True, share=True, watch=True)
# A command that reads (proposals, show, policy): the database and the proposals; no agent,
# no MCP server, no tracing exporter, no registry client. One that reads more adds only
# that part (`diana log`: ``Profile.READ.but(execution_log=True)``).
Profile.READ = Profile(
    "read", execution_log=False, cost=False, memory=False, agents=False, tracing=False
)
# Deciding a proposal whose call another process runs (`diana reject`): the proposals only.
Profile.DECIDE = Profile.READ.but(name="decide")
# A command that calls a tool (`diana call`, `approve`, which runs the call it approves):
# the agents, servers started when first needed, a schema checked at its first call.
Profile.CALL = Profile("call", servers=ON_DEMAND, schemas_at_call=True, through_app=True)
# The MCP gateway (`diana serve`): the call profile with every server connected (the running
# app's, if one runs) and watched as the app does, and no chat. It shares nothing: a gateway
# lives as long as its host's session, so no other process's calls are sent to it (only a
# diana-tui's, which a person keeps open and closes).
Profile.GATEWAY = Profile.CALL.but(
    name="gateway", servers=ALL_SERVERS, watch=True, schemas_at_call=False
)
