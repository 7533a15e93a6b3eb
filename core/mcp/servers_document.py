"""mcp-servers.json as a document, in whichever of its shapes it is written: one server entry
checked with the file's rules, and the document with an entry added, replaced, removed or
switched on or off, every other entry and the file's shape kept as they were."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.mcp_servers import MCP_SERVERS_FILE, MCPServerConfig, parse_servers, two_lists
from ..config.settings import ConfigError
from .subagent_request import RequestFailed


def check_server(
    name: str, config: Any, path: Path | str, environ: Mapping[str, str] | None = None
) -> MCPServerConfig:
    """One server entry checked with mcp-servers.json's rules; ConfigError names the field."""
    if not isinstance(config, dict):
        raise ConfigError(path, f'server "{name}": expected an object')
    entry = {k: v for k, v in config.items() if k not in ("name", "disabled", "enabled")}
    return parse_servers([{"name": name, **entry}], Path(path), environ)[0]


def _listed_name(entry: Any) -> str | None:
    """A list entry's server name (the {"servers": [...]} shape names one by its id when it
    has no name)."""
    if not isinstance(entry, dict):
        return None
    if "name" in entry:
        return str(entry["name"])
    return str(entry["id"]) if "id" in entry else None


def _listed(document: Any) -> list[Any] | None:
    """The list the document keeps its servers in, for the two list shapes."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict) and isinstance(document.get("servers"), list):
        return list(document["servers"])
    return None


def _with_listed(document: Any, entries: list[Any]) -> Any:
    return entries if isinstance(document, list) else {**document, "servers": entries}


def server_names(document: Any) -> list[str]:
    """The names of the servers in a document, as written (disabled ones too)."""
    listed = _listed(document)
    if listed is not None:
        return [name for name in map(_listed_name, listed) if name is not None]
    if isinstance(document, dict) and isinstance(document.get("mcpServers"), dict):
        return list(document["mcpServers"])
    return []


def written_entry(document: Any, name: str) -> dict[str, Any]:
    """The server's entry as written in the document (``${VAR}`` unexpanded, without its
    name); RequestFailed if there is none."""
    _check_shape(document)
    listed = _listed(document)
    if listed is not None:
        for entry in listed:
            if _listed_name(entry) == name:
                return {k: v for k, v in entry.items() if k != "name"}
    elif isinstance(document, dict) and isinstance(document.get("mcpServers"), dict):
        entry = document["mcpServers"].get(name)
        if isinstance(entry, dict):
            return dict(entry)
    raise RequestFailed(f'mcp-servers.json has no server named "{name}"')


def _check_shape(document: Any) -> None:
    both = two_lists(document, MCP_SERVERS_FILE)
    if both is not None:
        raise RequestFailed(f"{both}; fix it by hand first")
    if _listed(document) is not None:
        return
    if isinstance(document, dict) and (
        isinstance(document.get("mcpServers"), dict) or not document
    ):
        return
    raise RequestFailed(
        'mcp-servers.json is neither a list of servers nor an object with "mcpServers" or '
        '"servers"; fix it by hand first'
    )


def document_with(document: Any, name: str, entry: dict[str, Any], *, replace: bool) -> Any:
    """The document with ``name`` added (or, with ``replace``, changed) in the file's own shape;
    every other entry and key is kept as it was."""
    _check_shape(document)
    present = name in server_names(document)
    if replace and not present:
        raise RequestFailed(f'mcp-servers.json has no server named "{name}"')
    if not replace and present:
        raise RequestFailed(
            f'mcp-servers.json already has a server named "{name}"; modify it or pick another name'
        )
    listed = _listed(document)
    if listed is not None:
        written = {"name": name, **entry}
        if not replace:
            return _with_listed(document, [*listed, written])
        return _with_listed(
            document,
            [_kept_id(e, written) if _listed_name(e) == name else e for e in listed],
        )
    servers = dict(document.get("mcpServers", {}))
    servers[name] = entry  # a changed entry keeps its place: dict order is by first insertion
    return {**document, "mcpServers": servers}


def _kept_id(before: Any, written: dict[str, Any]) -> dict[str, Any]:
    """A changed entry keeps the id it had (other hosts know the server by it)."""
    if isinstance(before, dict) and "id" in before:
        return {"id": before["id"], **written}
    return written


def document_without(document: Any, name: str) -> Any:
    _check_shape(document)
    if name not in server_names(document):
        raise RequestFailed(f'mcp-servers.json has no server named "{name}"')
    listed = _listed(document)
    if listed is not None:
        return _with_listed(document, [e for e in listed if _listed_name(e) != name])
    servers = {k: v for k, v in document["mcpServers"].items() if k != name}
    return {**document, "mcpServers": servers}


def document_switched(document: Any, name: str, *, enabled: bool) -> Any:
    """The document with ``name`` switched on (no ``disabled`` key) or off (``"disabled":
    true``), in the file's own shape (an entry that says ``enabled`` keeps saying it); every
    other entry and key is kept as it was."""
    _check_shape(document)
    if name not in server_names(document):
        raise RequestFailed(f'mcp-servers.json has no server named "{name}"')

    def switched(entry: Any) -> Any:
        if not isinstance(entry, dict):
            return entry
        if "enabled" in entry:
            return {**{k: v for k, v in entry.items() if k != "disabled"}, "enabled": enabled}
        if enabled:
            return {k: v for k, v in entry.items() if k != "disabled"}
        return {**entry, "disabled": True}  # an existing key keeps its place

    listed = _listed(document)
    if listed is not None:
        return _with_listed(
            document, [switched(e) if _listed_name(e) == name else e for e in listed]
        )
    servers = dict(document["mcpServers"])
    servers[name] = switched(servers[name])
    return {**document, "mcpServers": servers}
