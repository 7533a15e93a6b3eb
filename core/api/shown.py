"""How the core's values are shown as text: one line for a call, a size, an age, a budget
bar, text made printable, secrets masked. Pure functions, the same in the app and `diana`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lazy import attribute

if TYPE_CHECKING:
    from ..approvals.service import shown_path
    from ..chat.answer import decided_record
    from ..chat.chats import options_text
    from ..config.mcp_servers import unknown_server_text
    from ..content.parts import part_bytes, part_describe, part_text
    from ..content.text import json_printable, printable, without_surrogates
    from ..llm.local_models import capabilities_text, context_text, size_text
    from ..mcp.catalog import prompt_text
    from ..mcp.registry_entry import plan_lines
    from ..mcp.tool_cache import age_text, not_cached
    from ..storage.call_record import (
        brief_arguments,
        brief_result,
        held_outcome,
        one_line,
        summarize,
    )
    from ..system.telemetry import names_a_secret, redact
    from ..usage.cost import budget_bar, estimate_words, ran_words, shown_shares, units_text
    from ..usage.stats import shown_minute, usage_cells

_ORIGINS = {
    "age_text": ("diana.core.mcp.tool_cache", "age_text"),
    "brief_arguments": ("diana.core.storage.call_record", "brief_arguments"),
    "brief_result": ("diana.core.storage.call_record", "brief_result"),
    "budget_bar": ("diana.core.usage.cost", "budget_bar"),
    "capabilities_text": ("diana.core.llm.local_models", "capabilities_text"),
    "context_text": ("diana.core.llm.local_models", "context_text"),
    "decided_record": ("diana.core.chat.answer", "decided_record"),
    "estimate_words": ("diana.core.usage.cost", "estimate_words"),
    "held_outcome": ("diana.core.storage.call_record", "held_outcome"),
    "json_printable": ("diana.core.content.text", "json_printable"),
    "names_a_secret": ("diana.core.system.telemetry", "names_a_secret"),
    "not_cached": ("diana.core.mcp.tool_cache", "not_cached"),
    "one_line": ("diana.core.storage.call_record", "one_line"),
    "options_text": ("diana.core.chat.chats", "options_text"),
    "part_bytes": ("diana.core.content.parts", "part_bytes"),
    "part_describe": ("diana.core.content.parts", "part_describe"),
    "part_text": ("diana.core.content.parts", "part_text"),
    "plan_lines": ("diana.core.mcp.registry_entry", "plan_lines"),
    "printable": ("diana.core.content.text", "printable"),
    "prompt_text": ("diana.core.mcp.catalog", "prompt_text"),
    "ran_words": ("diana.core.usage.cost", "ran_words"),
    "redact": ("diana.core.system.telemetry", "redact"),
    "shown_path": ("diana.core.approvals.service", "shown_path"),
    "shown_shares": ("diana.core.usage.cost", "shown_shares"),
    "size_text": ("diana.core.llm.local_models", "size_text"),
    "summarize": ("diana.core.storage.call_record", "summarize"),
    "units_text": ("diana.core.usage.cost", "units_text"),
    "unknown_server_text": ("diana.core.config.mcp_servers", "unknown_server_text"),
    "shown_minute": ("diana.core.usage.stats", "shown_minute"),
    "usage_cells": ("diana.core.usage.stats", "usage_cells"),
    "without_surrogates": ("diana.core.content.text", "without_surrogates"),
}

__all__ = [
    "age_text",
    "brief_arguments",
    "brief_result",
    "budget_bar",
    "capabilities_text",
    "context_text",
    "decided_record",
    "estimate_words",
    "held_outcome",
    "json_printable",
    "names_a_secret",
    "not_cached",
    "one_line",
    "options_text",
    "part_bytes",
    "part_describe",
    "part_text",
    "plan_lines",
    "printable",
    "prompt_text",
    "ran_words",
    "redact",
    "shown_minute",
    "shown_path",
    "shown_shares",
    "size_text",
    "summarize",
    "units_text",
    "unknown_server_text",
    "usage_cells",
    "without_surrogates",
]


def __getattr__(name: str) -> Any:
    return attribute(__name__, _ORIGINS, name)
