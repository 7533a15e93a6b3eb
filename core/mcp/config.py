"""mcp-servers.json: three accepted shapes, ${VAR} expansion, strict validation.

Accepted shapes:
  [{"name": ..., "command": ..., "args": [...], "env": {...}, "timeout": 10, "autoStart": true}]
  [{"name": ..., "url": "http://...", "transport": "streamable-http" | "sse", "headers": {...}}]
  {"mcpServers": {"name": {"command": ..., "args": [...], "env": {...}} | {"url": ...}}}
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import ConfigError, config_present, describe_pydantic_error, read_json
from ..telemetry import SECRET_VALUES

MCP_SERVERS_FILE = "mcp-servers.json"
SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Agent ids a server must not take: DIANA's own agent for the MCP sub-agent's tools.
RESERVED_AGENT_IDS = frozenset({"mcp-admin"})
Transport = Literal["stdio", "streamable-http", "sse"]
LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)  # least severe first
# Keeping a server connected: the first wait before connecting again after a failure (it
# doubles up to BACKOFF_MAX), and seconds between health probes of a ready server.
BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
HEALTH_INTERVAL = 15.0

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Names other hosts use for the transport.
_TRANSPORT_ALIASES = {
    "http": "streamable-http",
    "streamableHttp": "streamable-http",
    "streamable_http": "streamable-http",
    "local": "stdio",
}


Grant = Literal["authorization_code", "client_credentials"]


class AuthConfig(BaseModel):
    """How diana signs in to an HTTP server that asks for OAuth (all optional: without it a
    401 starts discovery and dynamic registration, or a client ID metadata document)."""

    model_config = ConfigDict(extra="forbid")

    grant: Grant = "authorization_code"
    client_id: str | None = Field(default=None, min_length=1)
    client_secret: str | None = Field(default=None, min_length=1)
    private_key_pem: str | None = Field(default=None, min_length=1)
    signing_algorithm: Literal["ES256", "ES384", "RS256", "RS384", "RS512"] = "ES256"
    scope: str | None = None
    # The authorization server that issued client_id (its metadata's "issuer"): tokens are
    # asked of no other. Without it, whichever server discovery finds.
    issuer: str | None = Field(default=None, pattern=r"^https?://")
    # A pre-registered client's way of proving itself at the token endpoint.
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "none"] | None
    ) = None
    # An https URL of diana's client ID metadata document, for servers that take one.
    client_metadata_url: str | None = Field(default=None, pattern=r"^https://[^/]+/.+")

    @model_validator(mode="after")
    def _complete(self) -> AuthConfig:
        if self.grant == "client_credentials":
            if not self.client_id:
                raise ValueError("client_credentials needs a client_id")
            if not (self.client_secret or self.private_key_pem):
                raise ValueError("client_credentials needs a client_secret or a private_key_pem")
        elif self.private_key_pem:
            raise ValueError("private_key_pem is for the client_credentials grant")
        if self.client_secret and not self.client_id:
            raise ValueError("a client_secret needs its client_id")
        return self

    def secrets(self) -> list[str]:
        return [v for v in (self.client_secret, self.private_key_pem) if v]


CALL_TIME = 30.0  # seconds a call to a server's tool may take, without a toolTimeout
# What a server asks a person during a call is answered this long before the call's time is
# up, so the server hears the answer (or that none came) and can say so in its reply.
ANSWER_MARGIN = 1.0


class MCPServerConfig(BaseModel):
    """One server entry, after ${VAR} expansion."""

    # Other hosts add keys of their own (autoApprove, description, ...): they are ignored.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    name: str = Field(pattern=SERVER_NAME_PATTERN)
    transport: Transport = "stdio"
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=10.0, gt=0, le=30, description="connect and health, seconds")
    tool_timeout: float | None = Field(default=None, gt=0, alias="toolTimeout")

    @property
    def call_time(self) -> float:
        """Seconds a call to one of its tools may take."""
        return self.tool_timeout or CALL_TIME

    @property
    def answer_time(self) -> float:
        """Seconds a person has for what the server asks (a question, a request to the local
        model): within the time of the call it asks during."""
        return max(1.0, self.call_time - ANSWER_MARGIN)

    auto_start: bool = Field(default=True, alias="autoStart")
    # Switched off (`diana servers disable`, e in MCP Servers): listed, not started, and its
    # tools are not offered.
    disabled: bool = False
    # Folders the server may work in, offered as MCP roots (file:// URIs); none by default.
    roots: list[str] = Field(default_factory=list)
    # The least severe log message the server is asked to send (logging/setLevel).
    log_level: LogLevel = Field(default="info", alias="logLevel")
    # OAuth for an HTTP server (see AuthConfig); its values are secrets.
    auth: AuthConfig | None = None
    # The entry as written, before ${VAR} expansion: what may be shown (values can be secret).
    shown_command: str | None = Field(default=None, exclude=True)
    shown_args: list[str] | None = Field(default=None, exclude=True)
    shown_url: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _transport_fields(self) -> MCPServerConfig:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError('a stdio server needs "command" (or give "url" for a remote one)')
            if self.url:
                raise ValueError('give either "command" or "url", not both')
            if self.auth is not None:
                raise ValueError('"auth" is for HTTP servers; a stdio server gets env instead')
        else:
            if not self.url:
                raise ValueError(f'a {self.transport} server needs "url"')
            if self.command:
                raise ValueError('give either "command" or "url", not both')
        return self

    @model_validator(mode="after")
    def _absolute_roots(self) -> MCPServerConfig:
        for index, root in enumerate(self.roots):
            path = os.path.expanduser(root)
            if not os.path.isabs(path):
                raise ValueError(f"roots[{index}] must be an absolute path (or start with ~)")
        return self

    def root_uris(self) -> list[tuple[str, str]]:
        """Each root as (file:// URI, name)."""
        paths = [Path(os.path.expanduser(root)) for root in self.roots]
        return [(path.as_uri(), path.name or str(path)) for path in paths]

    def same_but_roots(self, other: MCPServerConfig) -> bool:
        """Whether ``other`` differs from this entry in its roots alone (no restart)."""
        return self.roots != other.roots and self.model_copy(update={"roots": other.roots}) == other

    @property
    def display_command(self) -> str:
        return self.shown_command or self.command or ""

    @property
    def display_url(self) -> str:
        return _without_credentials(self.shown_url or self.url or "")

    def public(self) -> dict[str, Any]:
        """What may be shown or logged: env and header values never are."""
        shown: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.command:
            shown.update(command=self.display_command, args=list(self.shown_args or self.args))
        if self.url:
            shown["url"] = self.display_url
        if self.env:
            shown["env"] = sorted(self.env)
        if self.headers:
            shown["headers"] = sorted(self.headers)
        if self.auth:
            shown["auth"] = self.auth.grant
        shown["timeout"] = self.timeout
        return shown


def _with_shown(config: MCPServerConfig, written: dict[str, Any]) -> MCPServerConfig:
    return config.model_copy(
        update={
            "shown_command": written.get("command")
            if isinstance(written.get("command"), str)
            else None,
            "shown_args": [str(a) for a in written["args"]]
            if isinstance(written.get("args"), list)
            else None,
            "shown_url": written.get("url") if isinstance(written.get("url"), str) else None,
        }
    )


def _without_credentials(url: str) -> str:
    """A URL fit to show: no user:password@, no query string."""
    url = re.sub(r"(?<=://)[^/@]*@", "", url)
    return url.split("?", 1)[0] + ("?…" if "?" in url else "")


def expand(value: str, where: str, environ: Mapping[str, str]) -> str:
    """Replace ${VAR} and ${VAR:-default}; an unset variable without a default is an error."""

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = environ.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        raise ValueError(f"{where}: environment variable {name} is not set")

    return _VARIABLE.sub(replace, value)


def _expand_entry(entry: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    expanded = dict(entry)
    for key in ("command", "url", "cwd"):
        if isinstance(entry.get(key), str):
            expanded[key] = expand(entry[key], key, environ)
    if isinstance(entry.get("args"), list):
        expanded["args"] = [
            expand(a, f"args[{i}]", environ) if isinstance(a, str) else a
            for i, a in enumerate(entry["args"])
        ]
    for key in ("env", "headers", "auth"):
        if isinstance(entry.get(key), dict):
            expanded[key] = {
                k: expand(v, f"{key}.{k}", environ) if isinstance(v, str) else v
                for k, v in entry[key].items()
            }
    return expanded


def _normalise_entry(entry: dict[str, Any]) -> dict[str, Any]:
    entry = dict(entry)
    kind = entry.pop("type", None)
    if kind is not None and "transport" not in entry:
        entry["transport"] = kind
    if isinstance(entry.get("transport"), str):
        entry["transport"] = _TRANSPORT_ALIASES.get(entry["transport"], entry["transport"])
    if "transport" not in entry and "url" in entry:
        entry["transport"] = "streamable-http"
    return entry


def parse_servers(
    raw: Any, path: Path, environ: Mapping[str, str] | None = None
) -> list[MCPServerConfig]:
    """Validate the whole file; any problem raises ConfigError naming file, server and field.
    Disabled servers are returned too (``disabled`` set): they are listed, never started."""
    environ = os.environ if environ is None else environ
    entries: list[tuple[str, Any]]
    if isinstance(raw, list):
        entries = [
            (str(e.get("name")) if isinstance(e, dict) and "name" in e else f"#{i + 1}", e)
            for i, e in enumerate(raw)
        ]
    elif isinstance(raw, dict) and isinstance(raw.get("mcpServers"), dict):
        entries = [
            (name, {**e, "name": name} if isinstance(e, dict) else e)
            for name, e in raw["mcpServers"].items()
        ]
    else:
        raise ConfigError(
            path,
            'expected a list of servers or an object with "mcpServers" '
            '({"mcpServers": {"name": {"command": ..., "args": [...]}}})',
        )
    servers: list[MCPServerConfig] = []
    seen: set[str] = set()
    for label, entry in entries:
        where = f'server "{label}"'
        if not isinstance(entry, dict):
            raise ConfigError(path, f"{where}: expected an object")
        try:
            written = _normalise_entry(entry)
            server = _with_shown(
                MCPServerConfig.model_validate(_expand_entry(written, environ)), written
            )
        except ValueError as exc:
            detail = describe_pydantic_error(exc) if isinstance(exc, ValidationError) else str(exc)
            raise ConfigError(path, f"{where}: {detail}") from None
        if agent_id_for(server.name) in RESERVED_AGENT_IDS:
            raise ConfigError(path, f'{where}: the name "{server.name}" is reserved for DIANA')
        if server.name in seen:
            raise ConfigError(path, f'{where}: the name "{server.name}" is used twice')
        clash = next((n for n in seen if tool_prefix(n) == tool_prefix(server.name)), None)
        if clash is not None:
            raise ConfigError(
                path,
                f'{where}: its tools would be named like those of "{clash}" '
                f"({tool_prefix(server.name)}_...); rename one of them",
            )
        seen.add(server.name)
        SECRET_VALUES.remember(secret_values(server))  # configured: masked from now on
        servers.append(server)
    return servers


def secret_values(server: MCPServerConfig) -> list[str]:
    """What in a server's config is secret: every env and header value, and a password in
    its URL."""
    password = urlsplit(server.url).password if server.url else None
    auth = server.auth.secrets() if server.auth else []
    return [
        *server.env.values(),
        *server.headers.values(),
        *([password] if password else []),
        *auth,
    ]


def load_servers(path: Path, environ: Mapping[str, str] | None = None) -> list[MCPServerConfig]:
    if not config_present(path):  # a dangling link or a FIFO is an error, not "no servers"
        return []
    return parse_servers(read_json(path), path, environ)


def unknown_server_text(name: str, configured: Iterable[str]) -> str:
    """The one message for a server name that is not in mcp-servers.json."""
    return f"no MCP server named {name} (configured: {', '.join(configured) or 'none'})"


def tool_prefix(server_name: str) -> str:
    """The server's part of `{server}_{tool}`, normalised to the tool-name pattern."""
    return normalise_tool_name(server_name)


def could_serve(server_name: str, tool_name: str) -> bool:
    """Whether a tool of this name could come from this server (by its `{server}_` prefix)."""
    return tool_name.startswith(tool_prefix(server_name) + "_")


def normalise_tool_name(name: str) -> str:
    text = re.sub(r"[^a-z0-9_]", "_", name.lower())
    text = re.sub(r"_+", "_", text).strip("_") or "tool"
    return text if re.match(r"^[a-z_]", text) else f"_{text}"


def agent_id_for(server_name: str) -> str:
    """The orchestrator's agent id for a server: mcp-{slug}."""
    slug = re.sub(r"[^a-z0-9]+", "-", server_name.lower()).strip("-") or "server"
    return f"mcp-{slug}"
