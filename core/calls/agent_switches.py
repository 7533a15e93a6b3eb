"""A person stops and starts diana's own agents.

The switch is written to settings.json (``agents.stopped``), through the one config writer,
so it holds for every diana on the config dir and across restarts; a running app applies a
change to the file within a second. A stopped agent's tools are not offered to the model,
and a call of one answers agent_unavailable saying how to start it again. MCP servers are
switched in mcp-servers.json instead (`diana servers disable NAME`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..config.settings import (
    SETTINGS_FILE,
    ConfigError,
    Paths,
    Settings,
    config_present,
    describe_pydantic_error,
    read_json,
)
from ..config.writer import writer_for
from ..models import AgentState
from .orchestrator import Orchestrator


class AgentSwitchRefused(ValueError):
    """The agent cannot be switched (unknown, or an MCP server's); says why and what to do."""


def stopped_note(agent: str) -> str:
    """Why a person's stopped agent does not answer, and how to start it again."""
    return (
        f"stopped by a person; start it with `diana agents start {agent}` (or s in the Agents pane)"
    )


def switchable(orchestrator: Orchestrator) -> list[str]:
    """diana's own agents, which a person may stop and start (not MCP servers' agents)."""
    return sorted(slot.name for slot in orchestrator.agent_slots() if slot.server is None)


def check_switchable(
    orchestrator: Orchestrator, agent: str, servers: dict[str, str] | None = None
) -> None:
    """Raise AgentSwitchRefused unless ``agent`` is one of diana's own agents. ``servers``:
    each configured MCP server by its agent's id, those not started included."""
    slot = next((s for s in orchestrator.agent_slots() if s.name == agent), None)
    server = slot.server if slot is not None else (servers or {}).get(agent)
    if server is not None:
        raise AgentSwitchRefused(
            f"{agent} is MCP server {server}'s agent: switch the server with "
            f"`diana servers disable {server}` (or e in the MCP Servers pane)"
        )
    if slot is None:
        raise AgentSwitchRefused(
            f"no agent named {agent}; diana's own agents are {', '.join(switchable(orchestrator))}"
        )


async def write_switch(paths: Paths, agent: str, *, stopped: bool) -> bool:
    """Write ``agent`` into or out of settings.json's ``agents.stopped``; whether the file
    changed. ConfigError if settings.json cannot be read or would not be valid."""
    changed = False

    def change(current: Any) -> Any:
        nonlocal changed
        if not isinstance(current, dict):
            return current  # refused by validate, naming the file
        agents = current.get("agents")
        agents = dict(agents) if isinstance(agents, dict) else {}
        names = agents.get("stopped")
        names = [n for n in names if n != agent] if isinstance(names, list) else []
        if stopped:
            names.append(agent)
        agents["stopped"] = sorted(names)
        updated = {**current, "agents": agents}
        changed = updated != current
        return updated if changed else current

    def default() -> Any:
        shipped = paths.config_file(SETTINGS_FILE)  # the shipped default, while there is none
        return read_json(shipped) if config_present(shipped) else {}

    await writer_for(paths.config_dir / SETTINGS_FILE).update(
        change, _validate_settings, default=default
    )
    return changed


def _validate_settings(document: Any, path: Path) -> None:
    try:
        Settings.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None


async def apply_switches(orchestrator: Orchestrator, stopped: list[str]) -> list[str]:
    """Stop the agents a person stopped, and start those a person stopped that are no longer
    in ``stopped``; what changed, in words ("agent clock stopped")."""
    own = set(switchable(orchestrator))
    done = []
    for slot in orchestrator.agent_slots():
        name = slot.name
        if name in stopped and name in own and slot.stopped_note is None:
            await orchestrator.stop_agent(name, stopped_note(name))
            done.append(f"agent {name} stopped")
        elif name not in stopped and slot.stopped_note is not None:
            if slot.state is AgentState.STOPPED and await orchestrator.start_agent(name):
                done.append(f"agent {name} started")
    return done
