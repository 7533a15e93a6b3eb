"""Built-in tools, each wrapped as an agent: memory, Obsidian daily log, current time, the
web (core/tools/web.py)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..config.settings import Settings
from ..memory import MEMORY_AGENT, Memory
from ..models import (
    AgentError,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    parameters_of,
)
from ..system.clock import Clock


class SaveFactParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(
        min_length=1, max_length=10000, description="The fact, in one or two sentences."
    )
    tags: list[Annotated[str, Field(pattern=r"^[\w-]+$", max_length=64)]] = Field(
        default_factory=list, max_length=20, description="Optional keywords."
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        max_length=32,
        description='Optional details kept with the fact, e.g. {"project": "X"}.',
    )


class SearchMemoryParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1, max_length=2000, description="A question or words: found by meaning."
    )
    limit: int = Field(default=5, ge=1, le=50)
    tag: str | None = Field(
        default=None, pattern=r"^[\w-]+$", description="Only facts with this tag."
    )


class ObsidianLogParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entry: str = Field(
        min_length=1,
        max_length=20000,
        description="Markdown text: one entry, its later lines indented under it.",
    )


class GetCurrentTimeParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(default="UTC", min_length=1, description="IANA time zone name.")


SAVE_FACT = ToolDefinition(
    name="save_fact",
    description="Remember a fact about the user or their work for later conversations.",
    parameters=parameters_of(SaveFactParameters),
    examples=['{"content": "The user prefers metric units", "tags": ["preferences"]}'],
    category="memory",
    # Writes only DIANA's own database.
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
    ),
)

SEARCH_MEMORY = ToolDefinition(
    name="search_memory",
    description="Search remembered facts by meaning and words; the best matches come first.",
    parameters=parameters_of(SearchMemoryParameters),
    examples=['{"query": "units"}'],
    category="memory",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
)

OBSIDIAN_LOG = ToolDefinition(
    name="obsidian_log",
    description="Append a timestamped entry to today's daily note in the Obsidian vault.",
    parameters=parameters_of(ObsidianLogParameters),
    examples=['{"entry": "Finished the quarterly report"}'],
    category="logging",
    # It modifies the user's own files, outside DIANA's control; it only ever appends.
    risk=RiskLevel.REVERSIBLE_WITH_DELAY,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
    ),
)

GET_CURRENT_TIME = ToolDefinition(
    name="get_current_time",
    description="The current date and time in a time zone (IANA name, e.g. Europe/Paris).",
    parameters=parameters_of(GetCurrentTimeParameters),
    examples=['{"timezone": "UTC"}'],
    category="time",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=False, openWorldHint=False),
)


def memory_agent(memory: Memory, clock: Clock) -> Agent:
    async def save_fact(params: dict[str, Any]) -> dict[str, Any]:
        content = params["content"].strip()
        if not content:
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, 'argument "content" is blank')
        try:
            saved = await memory.save(
                content,
                params.get("tags", []),
                metadata=params.get("metadata") or {},
                source="save_fact",
                at=clock.now(),
            )
        except ValueError as exc:
            raise AgentError(ErrorCode.INVALID_ARGUMENTS, f'argument "metadata": {exc}') from None
        shown = saved.fact.as_json()
        if saved.why:
            shown["why"] = f"saved, found by its words until it is embedded: {saved.why}"
        return shown

    async def search_memory(params: dict[str, Any]) -> dict[str, Any]:
        found = await memory.search(params["query"], params.get("limit", 5), tag=params.get("tag"))
        return found.as_json()

    return FunctionAgent(
        MEMORY_AGENT,
        "Memory",
        [FunctionTool(SAVE_FACT, save_fact), FunctionTool(SEARCH_MEMORY, search_memory)],
        capabilities=["memory"],
        clock=clock,
        fixed_schemas=True,
    )


def daily_note_path(vault: Path, folder: str, day: datetime) -> Path:
    return vault / folder / f"{day:%Y-%m-%d}.md"


def daily_note_entry(at: datetime, entry: str) -> str:
    """One bullet, whatever newlines the entry holds: its later lines are indented under the
    bullet, so none of them can start an entry or a heading of its own. Every line break
    Markdown knows (\\n, \\r\\n, a lone \\r) ends a line here."""
    first, *rest = entry.splitlines() or [""]
    lines = [f"- {at:%H:%M:%S} {first}", *(f"  {line}" if line.strip() else "" for line in rest)]
    return "\n".join(lines) + "\n"


def obsidian_agent(settings: Settings, clock: Clock) -> Agent:
    # One writer at a time, so two entries in the same instant never interleave.
    lock = asyncio.Lock()

    def append(path: Path, heading: str, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x", encoding="utf-8") as note:
                note.write(heading)
        except FileExistsError:
            pass
        with path.open("a", encoding="utf-8") as note:
            note.write(text)

    async def obsidian_log(params: dict[str, Any]) -> dict[str, Any]:
        now = clock.now().astimezone()
        path = daily_note_path(settings.vault_path, settings.obsidian.daily_folder, now)
        text = daily_note_entry(now, params["entry"].strip())
        async with lock:
            try:
                await asyncio.to_thread(append, path, f"# {now:%Y-%m-%d}\n\n", text)
            except OSError as exc:
                raise AgentError(
                    ErrorCode.TOOL_EXECUTION_FAILED, f"cannot write {path}: {exc.strerror}"
                ) from None
        return {"path": str(path), "entry": text.rstrip("\n")}

    return FunctionAgent(
        "obsidian",
        "Obsidian daily log",
        [FunctionTool(OBSIDIAN_LOG, obsidian_log)],
        capabilities=["notes"],
        clock=clock,
        fixed_schemas=True,
    )


def clock_agent(clock: Clock) -> Agent:
    async def get_current_time(params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("timezone", "UTC")
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise AgentError(
                ErrorCode.INVALID_ARGUMENTS, f'argument "timezone": unknown time zone "{name}"'
            ) from None
        now = clock.now().astimezone(zone)
        offset = now.utcoffset()
        return {
            "iso": now.isoformat(),
            "timezone": name,
            "unix": int(now.timestamp()),
            "utc_offset": now.strftime("%z"),
            "is_dst": bool(now.dst()) if offset is not None else False,
            # The same instant under the names other DIANA agents use for it.
            "timestamp": now.isoformat(),
            "unix_epoch": int(now.timestamp()),
        }

    return FunctionAgent(
        "clock",
        "Clock",
        [FunctionTool(GET_CURRENT_TIME, get_current_time)],
        capabilities=["time"],
        clock=clock,
        fixed_schemas=True,
    )
