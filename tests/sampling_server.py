"""A fixture server that asks the local model for a reply (MCP sampling), configured, and the
proposal it makes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from diana.core.approvals.proposal import Proposal, ProposalStatus
from diana.core.runtime import Runtime

from .scenarios import fixture_server

SERVER = {"fx": fixture_server("--host-tools")}


def configure(config_dir: Path, ollama: str, policy: dict[str, Any] | None = None) -> None:
    settings = json.loads((config_dir / "settings.json").read_text())
    settings["llm"] = {"host": ollama}
    (config_dir / "settings.json").write_text(json.dumps(settings))
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": SERVER}))
    rules = {"tools": {"fx_summarize": "allow"}, **(policy or {})}
    (config_dir / "policy.json").write_text(json.dumps(rules))


async def pending(runtime: Runtime) -> list[Proposal]:
    return await runtime.approvals.store.select((ProposalStatus.PENDING,))


async def sampling_proposal(runtime: Runtime) -> Proposal:
    for _ in range(400):
        found = await pending(runtime)
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no sampling proposal was made")
