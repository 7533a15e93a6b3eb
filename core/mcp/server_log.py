"""A server's own log: the messages it sends diana (notifications/message) as kept entries,
and the level it is asked to log at (logging/setLevel, for servers of the handshake era;
later ones get the level with each request)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime

import mcp_types as types
from mcp import Client, MCPError

from ..config.mcp_servers import MCPServerConfig
from .info import ServerLog
from .subscriptions import older_protocol

LOG_TEXT_LIMIT = 2000  # characters of one message kept


def log_entry(params: types.LoggingMessageNotificationParams, at: datetime) -> ServerLog:
    """One message as kept: its data as text (JSON if it is not), cut at LOG_TEXT_LIMIT."""
    data = params.data
    text = data if isinstance(data, str) else json.dumps(data, default=str)
    return ServerLog(
        at=at, level=str(params.level), logger=params.logger, text=text[:LOG_TEXT_LIMIT]
    )


async def ask_log_level(client: Client, config: MCPServerConfig) -> None:
    """Ask a handshake-era server to log at the configured level, if it logs at all."""
    capabilities = client.server_capabilities
    if capabilities.logging is None or client.session.initialize_result is None:
        return
    with contextlib.suppress(MCPError, TimeoutError), older_protocol():
        async with asyncio.timeout(config.timeout):
            await client.set_logging_level(config.log_level)
