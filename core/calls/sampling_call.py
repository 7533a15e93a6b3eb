"""A server's request to the local model, as the one tool call it becomes (``mcp_sampling``):
its tool and agent names, and what a proposal says of it. Plain functions of the call's
arguments, for the proposals and the policy to read without building the request's models
(core/llm/sampling.py holds those, and the agent that runs an approved request)."""

from __future__ import annotations

from typing import Any

SAMPLING_TOOL = "mcp_sampling"
SAMPLING_AGENT = "sampling"


def asks_sampling(tool: str, arguments: dict[str, Any]) -> str | None:
    """The server a call of ``mcp_sampling`` speaks for, or None for any other tool."""
    if tool != SAMPLING_TOOL:
        return None
    server = arguments.get("server")
    return server if isinstance(server, str) else ""


def sampling_reason(arguments: dict[str, Any]) -> str:
    limit = arguments.get("reply_limit")
    return (
        f"MCP server {arguments.get('server')} asks the local model to write a reply "
        f"(up to {limit} tokens)"
    )


def sampling_summary(arguments: dict[str, Any]) -> str:
    """A sampling request in one line: who asks, the last thing said, how long a reply."""
    messages = arguments.get("messages") or []
    last = messages[-1].get("text", "") if messages and isinstance(messages[-1], dict) else ""
    said = " ".join(str(last).split())
    return (
        f"{arguments.get('server')} asks the model: “{said}” "
        f"(≤ {arguments.get('reply_limit')} tokens, {len(messages)} message"
        f"{'' if len(messages) == 1 else 's'})"
    )
