"""Tool-gap detection: does a request need a capability that no tool provides?

The model names the capabilities a request needs and, for each, the tool it would use, in a
JSON-schema constrained answer. Whether each named tool exists is then checked here, in code:
a capability whose tool is missing or made up is a gap, whatever the model believes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..content.jsontext import JSONProblem, parse_json
from ..models import ToolDefinition

CAPABILITIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "capabilities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "tool": {"type": ["string", "null"]},
                },
                "required": ["name", "tool"],
            },
        }
    },
    "required": ["capabilities"],
}

EXTRACTION_PROMPT = """\
You check whether an assistant's tools can carry out a request. Do not answer the request.
List each capability the request needs that calls for an action or for live or personal data
(general knowledge and conversation need no capability). For each, give a short snake_case name
(for example financial_data_api, send_email, database_write) and the exact name of the one tool
below that provides it, or null when none of them does. Answer with JSON only.

Tools:
{tools}"""


class ToolGapReport(BaseModel):
    """What a request needed that no tool provides, instead of a made-up answer."""

    missing_tools: list[str]
    attempted_task: str
    existing_tools_checked: list[str]
    # How to make a missing capability available, where diana has a tool for it that is
    # not set up (web lookups with no web backend).
    hints: list[str] = Field(default_factory=list)
    # For each missing tool, the MCP Registry's best entries (name, title, description,
    # version, status, how it runs, required settings); empty when none was searched.
    candidates: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)

    def summary(self) -> str:
        missing = ", ".join(self.missing_tools)
        text = (
            f"I cannot do this: no available tool provides {missing}. "
            f"I checked {len(self.existing_tools_checked)} tools and did not attempt the task."
        )
        return " ".join([text, *(f"To enable it: {hint}." for hint in self.hints)])


class Capability(BaseModel):
    name: str = Field(min_length=1)
    tool: str | None = None


class Capabilities(BaseModel):
    capabilities: list[Capability]


class MalformedExtraction(ValueError):
    """The model's answer did not follow the schema."""


def extraction_messages(task: str, tools: list[tuple[str, str]]) -> list[dict[str, str]]:
    listing = "\n".join(f"- {name}: {description}" for name, description in tools) or "(none)"
    return [
        {"role": "system", "content": EXTRACTION_PROMPT.format(tools=listing)},
        {"role": "user", "content": task},
    ]


def parse_capabilities(text: str) -> list[Capability]:
    try:
        return Capabilities.model_validate(parse_json(text)).capabilities
    except (JSONProblem, ValidationError) as exc:
        raise MalformedExtraction(f"capability extraction was not valid: {exc}") from None


# Words by which a capability the model names is one a tool of this category would give.
CATEGORY_WORDS = {
    "web": {"web", "internet", "online", "search", "browse", "browser", "fetch", "lookup"}
    | {"url", "page", "website", "news", "weather", "google", "wikipedia"},
}


def find_gaps(
    task: str,
    capabilities: list[Capability],
    available: list[str],
    unavailable: Sequence[ToolDefinition] = (),
) -> ToolGapReport | None:
    """The deterministic half: every tool the model named must really exist. A missing
    capability that one of diana's tools not set up would give gets that tool's hint."""
    known = set(available)
    missing: list[str] = []
    hints: list[str] = []
    for capability in capabilities:
        if capability.tool and capability.tool.strip() in known:
            continue
        name = _snake(capability.name)
        if name and name not in missing:
            missing.append(name)
            for tool in unavailable:
                if _would_give(tool, name, capability.tool) and tool.unavailable not in hints:
                    hints.append(tool.unavailable or "")
    if not missing:
        return None
    return ToolGapReport(
        missing_tools=missing,
        attempted_task=task,
        existing_tools_checked=sorted(known),
        hints=hints,
    )


def _would_give(tool: ToolDefinition, capability: str, named: str | None) -> bool:
    if named and named.strip() == tool.name:
        return True
    words = set(capability.split("_"))
    return bool(
        words & (set(tool.name.split("_")) | CATEGORY_WORDS.get(tool.category or "", set()))
    )


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")
