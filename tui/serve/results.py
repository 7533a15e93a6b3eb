"""What a host is answered for a call: diana's result as MCP content (tui/serve/gateway.py,
and the tasks of tui/serve/tasks.py)."""

from __future__ import annotations

import json

from diana.core.models import ErrorCode, ToolResult
from mcp import types


def tool_result(result: ToolResult) -> types.CallToolResult:
    """A diana result as MCP content: the data (text as it is, anything else as JSON text),
    or diana's one-line error flagged as a tool error."""
    if not result.success:
        text = result.error or (result.error_code or ErrorCode.TOOL_EXECUTION_FAILED).value
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
    data = result.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
