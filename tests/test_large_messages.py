"""A server's answer larger than the one-message limit (64 MiB over stdio) is not taken: the
request it answers fails naming the limit, and the connection goes on; one that answers no
request diana can tell ends the connection, and the reason given names the limit."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from diana.core.mcp import stdio
from diana.core.mcp.catalog import CatalogError, read_resource
from diana.core.mcp.connection import ServerConnection
from diana.core.runtime import Profile, Runtime

from .commands import diana
from .configs import LARGE_SERVER
from .conftest import stepping_clock

pytestmark = pytest.mark.processes  # every test here starts a process


def configure(config_dir: Path, megabytes: float) -> None:
    entry = {"command": sys.executable, "args": [LARGE_SERVER, "--megabytes", str(megabytes)]}
    (config_dir / "mcp-servers.json").write_text(json.dumps({"mcpServers": {"large": entry}}))


@asynccontextmanager
async def large_server(config_dir: Path, data_dir: Path) -> AsyncIterator[ServerConnection]:
    """The connection to the large server, once its first attempt is over."""
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        yield runtime.mcp.connections["large"]


async def refused(connection: ServerConnection, uri: str) -> str:
    """Why reading ``uri`` failed."""
    with pytest.raises(CatalogError) as failed:
        await read_resource(connection, uri)
    return str(failed.value)


async def refused_but_still_served(connection: ServerConnection, uri: str) -> str:
    """Why reading ``uri`` failed, once the small resource has been read after it over the
    same connection."""
    pid = connection.state.pid
    said = await refused(connection, uri)
    (after,) = await read_resource(connection, "small://text")
    assert after.text == "still here"
    assert connection.state.pid == pid  # the same connection
    return said


async def test_a_100_mb_resource_is_refused_naming_the_limit_and_the_server_stays(
    config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, 100)
    async with large_server(config_dir, data_dir) as connection:
        said = await refused_but_still_served(connection, "big://text")

        assert said == (
            "MCP server large: resource big://text is larger than the 64 MiB limit; it was "
            "not read, and the server is still connected"
        )
        assert connection.ready
        assert connection.state.last_error is None


async def test_an_answer_whose_id_comes_last_is_refused_with_its_size(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "STDOUT_MESSAGE_LIMIT", 2**20)
    configure(config_dir, 3)
    async with large_server(config_dir, data_dir) as connection:
        said = await refused_but_still_served(connection, "big://id-last")

        assert said == (
            "MCP server large: resource big://id-last is larger than the 1 MiB limit (the "
            "server sent 2.861 MiB); it was not read, and the server is still connected"
        )


async def test_an_answer_to_no_request_that_can_be_told_ends_the_connection_saying_why(
    config_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "STDOUT_MESSAGE_LIMIT", 2**20)
    configure(config_dir, 3)
    async with large_server(config_dir, data_dir) as connection:
        said = await refused(connection, "big://no-id")

        why = (
            r"sent a message larger than the 1 MiB limit on stdout \(2\.86\d MiB\) that "
            "answers no request diana can tell: the connection was closed"
        )
        ended = "MCP server large is not connected: the connection ended during the request: "
        assert re.fullmatch(re.escape(ended) + why, said), said
        assert "Connection closed" not in said
        assert re.fullmatch(why, connection.state.last_error or ""), connection.state.last_error


def test_diana_read_names_the_limit(config_dir: Path, data_dir: Path) -> None:
    configure(config_dir, 70)

    done = diana(config_dir, data_dir, "read", "large", "big://text")

    assert done.returncode == 1, done.stderr
    assert "resource big://text is larger than the 64 MiB limit" in done.stderr
    assert done.stderr.count("\n") == 1
