"""`diana serve`: the MCP gateway, a front end beside the app and the command line.

Other MCP hosts (Claude Code, Codex, Cursor, ...) start ``diana serve`` and speak MCP to it
over stdin and stdout. They see the tools of every enabled MCP server and built-in agent
under diana's exposed names, and every call they make passes the same gate as the chat's
model (``Core.call_tool``): a call held for a person keeps the host's request open until
someone decides (gateway.py).
"""

from __future__ import annotations

from .gateway import Gateway, serve_stdio

__all__ = ["Gateway", "serve_stdio"]
