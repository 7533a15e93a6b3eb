"""The hosts that call through `diana serve`, as the Clients view and `diana serve clients` show
them: each client's calls (its own and the runs of the proposals it made), the proposals of
its waiting for a person now, its last call, and whether it has a token for --http."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..models import HOST_ORIGIN
from ..storage.db import Database

# Calls per client: a host's own calls, and the runs of its proposals (origin "proposal ID").
_CALLS = """
    SELECT COALESCE(p.origin, e.origin) AS client, COUNT(*), MAX(e.started_at)
    FROM execution_log AS e
    LEFT JOIN proposals AS p ON e.origin = 'proposal ' || p.id
    WHERE e.origin LIKE 'host:%' OR p.origin LIKE 'host:%'
    GROUP BY client
"""
_WAITING = """
    SELECT origin, COUNT(*) FROM proposals
    WHERE status = 'pending' AND origin LIKE 'host:%' GROUP BY origin
"""


@dataclass
class ClientSummary:
    name: str  # as its calls are logged, without the `host:` of their origin
    calls: int = 0
    waiting: int = 0  # its proposals pending now
    last_call: str | None = None  # when its latest call started (stored time)
    token: bool = False  # it may reach `diana serve --http`

    def public(self) -> dict[str, Any]:
        return asdict(self)


async def clients(db: Database, with_tokens: list[str]) -> list[ClientSummary]:
    """Every client seen in the log or holding a token, the latest caller first."""
    found: dict[str, ClientSummary] = {}

    def of(origin: str) -> ClientSummary:
        name = origin.removeprefix(HOST_ORIGIN)
        return found.setdefault(name, ClientSummary(name))

    for origin, calls, last in await db.read(_CALLS):
        summary = of(origin)
        summary.calls, summary.last_call = int(calls), last
    for origin, waiting in await db.read(_WAITING):
        of(origin).waiting = int(waiting)
    for name in with_tokens:
        of(f"{HOST_ORIGIN}{name}").token = True
    return sorted(found.values(), key=lambda c: (c.last_call or "", c.name), reverse=True)
