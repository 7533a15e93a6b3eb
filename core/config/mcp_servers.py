"""mcp-servers.json: four accepted shapes, ${VAR} expansion, strict validation.

Accepted shapes:
  [{"name": ..., "command": ..., "args": [...], "env": {...}, "timeout": 10, "autoStart": true}]
  [{"name": ..., "url": "http://...", "transport": "streamable-http" | "sse", "headers": {...}}]
  {"mcpServers": {"name": {"command": ..., "args": [...], "env": {...}} | {"url": ...}}}
  {"servers": [{"id": ..., "name": ..., "command": ..., "enabled": false, ...}],
   "autoDiscoveryEnabled": false, "toolApprovalRequired": true, "subAgentEnabled": true}

In every shape ``timeoutMs`` is a timeout in milliseconds, and so is a ``timeout`` over 1000
(no server is given more than 30 s to connect); ``"enabled": false`` is ``"disabled": true``.
Reading a shape or a unit other than diana's own says so in a one-line notice.

The MCP_* environment variables of the {"servers": [...]} shape's hosts apply too:
MCP_CONFIG_PATH (core/config/settings.py) names the file, MCP_TOOL_APPROVAL and MCP_AUTO_DISCOVERY
stand for the file's toolApprovalRequired and autoDiscoveryEnabled (see ``switches``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..system.telemetry import REDACTED, SECRET_VALUES, is_secret_name
from .settings import MCP_SERVERS_FILE as MCP_SERVERS_FILE  # its home is here for most readers
from .settings import ConfigError, config_present, describe_pydantic_error, read_json

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
HEALTH_INTERVAL = 3.0
# Seconds of silence after which a probe gives up (a server's "timeout" may make it
# shorter): a server that stops answering is found within HEALTH_INTERVAL + PROBE_TIMEOUT,
# under the 10 s promised, while a busy server's reply has twice the interval to come.
PROBE_TIMEOUT = 6.0
# A probe unanswered this long already makes the server's agent unhealthy, before it is
# given up: a health check answers within a second.
UNANSWERED_AFTER = 1.0
# A timeout written above this many is in milliseconds; none may be above MAX_TIMEOUT_MS.
MS_TIMEOUT_ABOVE = 1000
MAX_TIMEOUT_MS = 30000
# The file-wide switches of the {"servers": [...]} shape, and the variables that stand for them.
TOOL_APPROVAL_KEY, TOOL_APPROVAL_VARIABLE = "toolApprovalRequired", "MCP_TOOL_APPROVAL"
AUTO_DISCOVERY_KEY, AUTO_DISCOVERY_VARIABLE = "autoDiscoveryEnabled", "MCP_AUTO_DISCOVERY"
SUBAGENT_KEY = "subAgentEnabled"
_SWITCH_KEYS = (TOOL_APPROVAL_KEY, AUTO_DISCOVERY_KEY, SUBAGENT_KEY)

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
    # What else in the entry is secret, beyond what its name says (secret_values): an env or
    # header name, or "args[N]" for an argument (an install marks a registry's isSecret so).
    secrets: list[str] = Field(default_factory=list)
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
    def _known_secrets(self) -> MCPServerConfig:
        for index, marked in enumerate(self.secrets):
            at = re.fullmatch(r"args\[([0-9]+)\]", marked)
            if at is not None:
                if int(at.group(1)) >= len(self.args):
                    raise ValueError(f"secrets[{index}]: {marked} is past the last argument")
            elif marked not in self.env and marked not in self.headers:
                raise ValueError(
                    f'secrets[{index}]: "{marked}" is no env or header name of this server '
                    "(nor args[N])"
                )
        return self

    def secret_arg(self, index: int) -> bool:
        return f"args[{index}]" in self.secrets

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
            args = list(self.shown_args or self.args)
            args = [REDACTED if self.secret_arg(i) else a for i, a in enumerate(args)]
            shown.update(command=self.display_command, args=args)
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


def _normalise_entry(entry: dict[str, Any], notices: list[str], where: str) -> dict[str, Any]:
    """Other hosts' spellings in diana's: transport names, ``enabled``, and a timeout in
    milliseconds (``notices`` is told of one written as ``timeout``)."""
    entry = dict(entry)
    if "enabled" in entry:
        enabled = entry.pop("enabled")
        if not isinstance(enabled, bool):
            raise ValueError("enabled: expected true or false")
        entry["disabled"] = bool(entry.get("disabled")) or not enabled
    if "timeoutMs" in entry:
        if "timeout" in entry:
            raise ValueError('give "timeout" or "timeoutMs", not both')
        entry["timeout"] = _seconds(entry.pop("timeoutMs"), "timeoutMs")
    elif _is_number(entry.get("timeout")) and entry["timeout"] > MS_TIMEOUT_ABOVE:
        written = entry["timeout"]
        entry["timeout"] = _seconds(written, "timeout")
        notices.append(
            f"{where}: timeout {written:g} read as milliseconds ({entry['timeout']:g} s); "
            f'write "timeoutMs" to say so, or seconds under "timeout"'
        )
    kind = entry.pop("type", None)
    if kind is not None and "transport" not in entry:
        entry["transport"] = kind
    if isinstance(entry.get("transport"), str):
        entry["transport"] = _TRANSPORT_ALIASES.get(entry["transport"], entry["transport"])
    if "transport" not in entry and "url" in entry:
        entry["transport"] = "streamable-http"
    return entry


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds(milliseconds: Any, key: str) -> float:
    if not _is_number(milliseconds) or not 0 < milliseconds <= MAX_TIMEOUT_MS:
        raise ValueError(f"{key}: expected milliseconds, more than 0 and at most {MAX_TIMEOUT_MS}")
    return float(milliseconds) / 1000


SERVERS_SHAPE = '{"servers": [...]}'


@dataclass
class ServersFile:
    """mcp-servers.json as read: its servers, the shape it was in, what a person should be
    told about how it was read, and the {"servers": [...]} shape's file-wide switches."""

    servers: list[MCPServerConfig]
    shape: str = "list"  # "list", "mcpServers" or SERVERS_SHAPE
    notices: list[str] = field(default_factory=list)
    switches: dict[str, bool] = field(default_factory=dict)  # as written, by key


def two_lists(raw: Any, path: Path | str) -> str | None:
    """Why a document cannot be read or written as one list of servers (it holds both
    "mcpServers" and "servers": which one is the list would be a guess, and a reader and a
    writer guessing apart lose servers); None when it can. The one rule for reader and writer."""
    if isinstance(raw, dict) and "mcpServers" in raw and "servers" in raw:
        return (
            f'{Path(path).name} holds both "mcpServers" and "servers"; keep one of them '
            "(move every server into it) and delete the other"
        )
    return None


def _entries(raw: Any, path: Path) -> tuple[str, list[tuple[str, Any]]]:
    """The file's shape and its entries, each with the label that names it in messages."""
    both = two_lists(raw, path)
    if both is not None:
        raise ConfigError(path, both)
    if isinstance(raw, list):
        return "list", [
            (str(e.get("name")) if isinstance(e, dict) and "name" in e else f"#{i + 1}", e)
            for i, e in enumerate(raw)
        ]
    if isinstance(raw, dict) and isinstance(raw.get("mcpServers"), dict):
        return "mcpServers", [
            (name, {**e, "name": name} if isinstance(e, dict) else e)
            for name, e in raw["mcpServers"].items()
        ]
    if isinstance(raw, dict) and isinstance(raw.get("servers"), list):
        entries: list[tuple[str, Any]] = []
        for i, e in enumerate(raw["servers"]):
            if isinstance(e, dict) and "name" not in e and isinstance(e.get("id"), str):
                e = {**e, "name": e["id"]}  # named by its id when it has no name
            label = str(e["name"]) if isinstance(e, dict) and "name" in e else f"#{i + 1}"
            entries.append((label, e))
        return SERVERS_SHAPE, entries
    raise ConfigError(
        path,
        'expected a list of servers, an object with "mcpServers" '
        '({"mcpServers": {"name": {"command": ..., "args": [...]}}}) or one with a "servers" '
        'list ({"servers": [{"name": ..., "command": ...}]})',
    )


def _switches(raw: Any, path: Path) -> dict[str, bool]:
    if not isinstance(raw, dict):
        return {}
    found: dict[str, bool] = {}
    for key in _SWITCH_KEYS:
        if key in raw:
            if not isinstance(raw[key], bool):
                raise ConfigError(path, f"{key}: expected true or false")
            found[key] = raw[key]
    return found


def parse_servers(
    raw: Any, path: Path, environ: Mapping[str, str] | None = None
) -> list[MCPServerConfig]:
    """Validate the whole file; any problem raises ConfigError naming file, server and field.
    Disabled servers are returned too (``disabled`` set): they are listed, never started."""
    return read_servers(raw, path, environ).servers


def read_servers(raw: Any, path: Path, environ: Mapping[str, str] | None = None) -> ServersFile:
    """``parse_servers``, with the shape, the notices and the file-wide switches."""
    environ = os.environ if environ is None else environ
    shape, entries = _entries(raw, path)
    switches = _switches(raw, path)
    notices: list[str] = []
    servers: list[MCPServerConfig] = []
    seen: set[str] = set()
    for label, entry in entries:
        where = f'server "{label}"'
        if not isinstance(entry, dict):
            raise ConfigError(path, f"{where}: expected an object")
        try:
            written = _normalise_entry(entry, notices, f"{path.name}: {where}")
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
    if shape == SERVERS_SHAPE:
        off = sum(server.disabled for server in servers)
        notices.insert(
            0,
            f"{path.name} is in the {SERVERS_SHAPE} shape (id, name, enabled): read as "
            f"{len(servers)} server{'s' if len(servers) != 1 else ''}"
            + (f", {off} switched off (enabled: false)" if off else ""),
        )
    return ServersFile(servers, shape, notices, switches)


# Headers that carry credentials whatever their words say.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def secret_values(server: MCPServerConfig) -> list[str]:
    """What in a server's config is secret: an env value or header whose name says so
    (telemetry's is_secret_name; an Authorization-like header), what the entry marks in
    ``secrets`` (an env, a header, an argument), a password in its URL, its OAuth secrets.
    Not every value its environment happens to hold: "READ_ONLY": "true" is no secret."""
    password = urlsplit(server.url).password if server.url else None
    auth = server.auth.secrets() if server.auth else []
    marked = set(server.secrets)
    env = [v for k, v in server.env.items() if k in marked or is_secret_name(k)]
    headers = [
        v
        for k, v in server.headers.items()
        if k in marked or k.lower() in CREDENTIAL_HEADERS or is_secret_name(k)
    ]
    args = [a for i, a in enumerate(server.args) if server.secret_arg(i)]
    return [*env, *headers, *args, *([password] if password else []), *auth]


def load_servers(path: Path, environ: Mapping[str, str] | None = None) -> list[MCPServerConfig]:
    return load_servers_file(path, environ).servers


def load_servers_file(path: Path, environ: Mapping[str, str] | None = None) -> ServersFile:
    if not config_present(path):  # a dangling link or a FIFO is an error, not "no servers"
        return ServersFile([])
    return read_servers(read_json(path), path, environ)


@dataclass(frozen=True)
class Switches:
    """The file-wide switches as they apply: the file's, or the variables standing for them."""

    # Why every MCP tool call asks a person (what says so), or None: as the policy decides.
    ask_every_tool: str | None = None
    subagent: bool = True  # whether the model is offered the MCP sub-agent's tools
    notices: list[str] = field(default_factory=list)


def switches(file: ServersFile, path: Path, environ: Mapping[str, str] | None = None) -> Switches:
    """toolApprovalRequired (or MCP_TOOL_APPROVAL, which wins): true makes every call of an
    MCP server's tool ask a person unless the policy allows it; false leaves the risk rules
    as they are (no config lets every tool run unasked). autoDiscoveryEnabled (or
    MCP_AUTO_DISCOVERY): diana never adds a server on its own, so true is refused with a
    notice. subAgentEnabled: false offers the model no MCP sub-agent tools."""
    environ = os.environ if environ is None else environ
    notices: list[str] = []

    def setting(key: str, variable: str | None) -> tuple[bool | None, str]:
        text = environ.get(variable, "").strip() if variable else ""
        if text:
            value = _boolean(text)
            if value is None:
                raise ConfigError(variable or key, f"expected true or false, not {text!r}")
            return value, f"{variable}={text}"
        return file.switches.get(key), f"{key} in {path}"

    ask, ask_source = setting(TOOL_APPROVAL_KEY, TOOL_APPROVAL_VARIABLE)
    if ask is False:
        notices.append(
            f"{ask_source}: MCP tools are asked about by their risk, as without it; "
            "allow a tool or server in the policy to let it run unasked"
        )
    discover, discover_source = setting(AUTO_DISCOVERY_KEY, AUTO_DISCOVERY_VARIABLE)
    if discover:
        notices.append(
            f"{discover_source}: not applied; diana adds an MCP server only when a person "
            "or the model asks (the MCP sub-agent), after approval"
        )
    subagent = file.switches.get(SUBAGENT_KEY, True)
    if not subagent:
        notices.append(f"{SUBAGENT_KEY} is false in {path}: the model has no MCP sub-agent tools")
    return Switches(ask_source if ask else None, subagent, notices)


def _boolean(text: str) -> bool | None:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    return None


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


def launch_identity(server: MCPServerConfig) -> str:
    """A stable hash of what a server runs: its transport, command, arguments, folder and
    URL as written in mcp-servers.json (before ${VAR} expansion: a person saw these, and env
    values may be secret). Its name, env, headers, timeouts and switches are not part of it:
    a rule or a proposal bound to it follows the program, not the name. A URL counts without
    its user:password@ and query string, where keys are carried."""
    launched = {
        "transport": server.transport,
        "command": server.display_command or None,
        "args": list(server.shown_args if server.shown_args is not None else server.args),
        "cwd": server.cwd,
        "url": server.display_url.removesuffix("?…") or None,
    }
    text = json.dumps(launched, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(b"diana server identity\0" + text.encode()).hexdigest()[:32]


def configured_identities(path: Path) -> dict[str, str] | None:
    """Every server in the mcp-servers.json at ``path`` (switched off too), name -> launch
    identity; None if the file cannot be read."""
    try:
        return {s.name: launch_identity(s) for s in load_servers(path)}
    except ConfigError:
        return None
