"""Where config and data live, and the settings file, validated with pydantic."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..content.jsontext import JSONProblem, parse_json
from ..system.files import UnreadableFile, file_kind, read_regular, unreachable

SETTINGS_FILE = "settings.json"
MCP_SERVERS_FILE = "mcp-servers.json"
# Names the MCP servers file in place of the config dir's (as other MCP hosts read it).
SERVERS_FILE_VARIABLE = "MCP_CONFIG_PATH"
# A config file past this size is refused: read whole, it could exhaust memory (a link to
# /dev/zero is refused earlier, as not a regular file).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


# A config file read while an editor saves it in place may be caught half-written: it is read
# again after this many seconds if it changed meanwhile, up to SETTLE_TRIES times.
SETTLE = 0.02
SETTLE_TRIES = 5


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file, entry and field."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def shipped_config_dir() -> Path:
    """The defaults shipped with the program: inside the wheel, or the source tree."""
    package = Path(__file__).resolve().parent.parent  # diana/core
    installed = package / "_shipped" / "config"
    return installed if installed.is_dir() else package.parent / "config"


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    data_dir: Path
    # The MCP servers file MCP_CONFIG_PATH names (read and written there), or None.
    servers_file: Path | None = None

    @classmethod
    def resolve(
        cls, config_dir: str | Path | None = None, data_dir: str | Path | None = None
    ) -> Paths:
        """Each dir from its option, else its DIANA_* variable, else under its XDG base
        directory, else under the home directory."""
        home = Path.home()
        config = _choose(
            config_dir,
            "--config-dir",
            "DIANA_CONFIG_DIR",
            _xdg_base("XDG_CONFIG_HOME", home / ".config") / "diana",
        )
        _check_config_dir(config)
        data = _choose(
            data_dir,
            "--data-dir",
            "DIANA_DATA_DIR",
            _xdg_base("XDG_DATA_HOME", home / ".local" / "share") / "diana",
        )
        return cls(config, data, _servers_file())

    def config_file(self, name: str) -> Path:
        """The user's file if it is there in any form, else the shipped default. Only a file
        that does not exist falls back: a dangling link, a FIFO or a directory is the user's
        file, and reading it (``read_json``) reports why it cannot be used."""
        if name == MCP_SERVERS_FILE and self.servers_file is not None:
            return self.servers_file
        user = self.config_dir / name
        return user if config_present(user) else shipped_config_dir() / name

    def user_file(self, name: str) -> Path:
        """Where the user's file ``name`` is written."""
        if name == MCP_SERVERS_FILE and self.servers_file is not None:
            return self.servers_file
        return self.config_dir / name

    def notices(self) -> list[str]:
        """Where config is read from other than the config dir, for a person to be told."""
        if self.servers_file is None:
            return []
        return [
            f"{SERVERS_FILE_VARIABLE}: MCP servers are read from {self.servers_file} "
            f"(not {self.config_dir / MCP_SERVERS_FILE})"
        ]

    @property
    def database(self) -> Path:
        return self.data_dir / "diana.db"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "diana.jsonl"


def _xdg_base(variable: str, default: Path) -> Path:
    """An XDG base directory as its spec reads it: the variable's value when it is an absolute
    path; unset, empty or relative, the default."""
    value = os.environ.get(variable, "")
    return Path(value) if os.path.isabs(value) else default


def _servers_file() -> Path | None:
    """The file MCP_CONFIG_PATH names: it must be there, a typo must not mean "no servers"."""
    written = os.environ.get(SERVERS_FILE_VARIABLE, "").strip()
    if not written:
        return None
    path = Path(written).expanduser().absolute()
    if not config_present(path):
        raise ConfigError(path, f"{SERVERS_FILE_VARIABLE} names this file, which does not exist")
    return path


def config_present(path: Path) -> bool:
    """Whether anything is at ``path``, without following a symlink: False only when nothing
    is (a dangling link, a loop, a FIFO are present). When it cannot be told (no permission
    to look), True: reading the file then names the problem instead of a quiet default."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _check_config_dir(path: Path) -> None:
    """A config dir that is missing means all defaults; one that is there must be a directory."""
    if not config_present(path):
        return
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(
            path, unreachable(path, exc) + "; the config dir must be a directory"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        kind = file_kind(info.st_mode)
        raise ConfigError(path, f"is {kind}, not a directory; the config dir must be a directory")


def _choose(given: str | Path | None, option: str, variable: str, default: Path) -> Path:
    """An explicit option wins, then the environment variable, then the default.
    An empty value is refused rather than quietly meaning the default."""
    if given is None:
        given = os.environ.get(variable)
        if given is None:
            return default
        if not str(given).strip():
            raise ConfigError(variable, "is set but empty")
    elif not str(given).strip():
        raise ConfigError(option, "must name a directory, not be empty")
    return Path(given).expanduser()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObsidianSettings(_Strict):
    vault: str = "~/Documents/Obsidian/DIANA"
    daily_folder: str = "Daily"


class ToolSettings(_Strict):
    default_timeout: float = Field(default=30.0, gt=0, le=3600)
    timeouts: dict[str, Annotated[float, Field(gt=0, le=3600)]] = Field(default_factory=dict)


DEFAULT_OLLAMA_PORT = 11434


def ollama_url(raw: str) -> str:
    """Where Ollama is, as a full URL, from what a person wrote (``host``, ``host:port``,
    ``http://host:port/path``; ``0.0.0.0``, what `ollama serve` binds to, means this machine).
    ValueError saying why when it is not an address."""
    text = raw.strip()
    if "://" not in text:
        text = f"http://{text}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{raw!r} is not an address ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{raw!r} is not an http:// or https:// address")
    hostname = parts.hostname or "127.0.0.1"
    if hostname == "0.0.0.0":
        hostname = "127.0.0.1"
    if ":" in hostname:
        hostname = f"[{hostname}]"
    port = port or (DEFAULT_OLLAMA_PORT if parts.scheme == "http" else 443)
    return f"{parts.scheme}://{hostname}:{port}{parts.path.rstrip('/')}"


class LLMSettings(_Strict):
    model: str = Field(default="qwen3:30b-a3b", min_length=1)
    # None: OLLAMA_HOST, else http://127.0.0.1:11434
    host: str | None = None

    @field_validator("host")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            ollama_url(value)
        return value

    # Seconds to wait for Ollama to connect, and for each piece of an answer.
    connect_timeout: float = Field(default=5.0, gt=0, le=600)
    timeout: float = Field(default=120.0, gt=0, le=3600)
    # None leaves thinking to the model's default.
    think: bool | None = None
    max_tool_rounds: int = Field(default=8, ge=1, le=100)
    # Check, before answering, whether the request needs a capability no tool provides.
    gap_check: bool = True
    # Earlier messages sent with each request.
    history_messages: int = Field(default=40, ge=2, le=1000)


class MemorySettings(_Strict):
    # The Ollama model that turns facts and questions into vectors (`ollama pull` it).
    embed_model: str = Field(default="all-minilm", min_length=1)
    # Seconds to wait for a vector before searching by words alone.
    embed_timeout: float = Field(default=30.0, gt=0, le=600)
    # Before answering, the chat is given the few facts most relevant to the message.
    recall: bool = True


class LogSettings(_Strict):
    # JSON-lines logs and execution-log rows older than this many days are removed.
    retention_days: int = Field(default=30, ge=1, le=3650)


class CostSettings(_Strict):
    # Cost units a day may use (one unit is one second of tool or server time); None: no
    # budget. Over it, calls that are not reversible wait for a person.
    daily_budget: float | None = Field(default=None, gt=0)


WebBackend = Literal["searxng", "ollama", "none"]


class WebSettings(_Strict):
    # Where web_search asks: a SearXNG instance, Ollama's hosted web API, or nowhere.
    backend: WebBackend = "none"
    # SearXNG: its address (required). Ollama: another address for its web API (the default
    # is https://ollama.com).
    url: str | None = None
    # A key sent with each request: ${VAR} takes it from the environment. Ollama's default
    # is OLLAMA_API_KEY.
    api_key: str | None = None
    # web_fetch reaches loopback, private and link-local addresses only when allowed, or
    # the hosts (host or host:port) listed here.
    allow_private: bool = False
    allow_hosts: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    # Seconds a search or a fetch may take in all.
    timeout: float = Field(default=30.0, gt=0, le=600)
    # A page is read up to this many megabytes.
    max_page_mb: float = Field(default=5.0, gt=0, le=100)

    @field_validator("url")
    @classmethod
    def _web_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{value!r} is not an http:// or https:// address")
        return value.strip()

    @model_validator(mode="after")
    def _searxng_has_an_address(self) -> WebSettings:
        if self.backend == "searxng" and not self.url:
            raise ValueError(
                'backend "searxng" needs "url": the address of the instance, '
                "e.g. http://127.0.0.1:8888"
            )
        return self


class TracingSettings(_Strict):
    # Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (package extra
    # "tracing"); otherwise tracing is off.
    service_name: str = Field(default="diana", min_length=1)


class AgentSettings(_Strict):
    # diana's own agents a person stopped (`diana agents stop NAME`, or the Agents pane):
    # not started, their tools answer agent_unavailable, until started again.
    stopped: list[str] = Field(default_factory=list)


OFFICIAL_REGISTRY = "https://registry.modelcontextprotocol.io"


def registry_url(raw: str) -> str:
    """A registry's base URL as given, without a trailing slash; ValueError saying why when it
    is not an http:// or https:// address with a host."""
    text = raw.strip().rstrip("/")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises for a port that is not one)
    except ValueError as exc:
        raise ValueError(f"{raw!r} is not an address ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{raw!r} is not an http:// or https:// address with a host")
    if parts.query or parts.fragment:
        raise ValueError(f"{raw!r} has a query or fragment; give the registry's base URL")
    return text


class RegistrySettings(_Strict):
    # The MCP Registry servers are found in (the official one, or any speaking its API).
    url: str = OFFICIAL_REGISTRY
    # Seconds an answer is used again before the registry is asked anew; offline, older
    # answers are used and said to be so.
    cache_ttl: float = Field(default=3600.0, ge=0, le=30 * 86400)
    # Seconds to wait for the registry's answer.
    timeout: float = Field(default=10.0, gt=0, le=120)
    # A tool-gap report names servers that would fill the gap, searched in the registry by
    # the missing capability's words. None: only when settings.json names the registry's
    # url (the words leave the machine only for a registry a person chose).
    suggest: bool | None = None

    @property
    def suggests(self) -> bool:
        return self.suggest if self.suggest is not None else "url" in self.model_fields_set

    @field_validator("url")
    @classmethod
    def _an_address(cls, value: str) -> str:
        return registry_url(value)


class Exposed(_Strict):
    """What `diana serve` shows a host: the MCP servers (their tools, resources and prompts)
    and diana's own agents by name (None: every one), and the exposed tool names it hides
    (fnmatch globs: ``files_write_*``)."""

    servers: list[str] | None = None
    agents: list[str] | None = None
    hide: list[str] | None = None

    @field_validator("servers", "agents", "hide")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not name.strip() for name in value):
            raise ValueError("a name is empty")
        return value


@dataclass(frozen=True)
class Exposure:
    """What one client of `diana serve` sees: its own choice for each key, else the
    default's (``ServeSettings.exposure_for``)."""

    servers: frozenset[str] | None = None
    agents: frozenset[str] | None = None
    hide: tuple[str, ...] = ()

    def shows_server(self, server: str) -> bool:
        return self.servers is None or server in self.servers

    def shows_agent(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents

    def hides(self, *names: str) -> bool:
        """Whether any of a tool's names (diana's, or its server's own) matches a glob."""
        return any(fnmatchcase(name, glob) for name in names for glob in self.hide)


class ClientServeSettings(Exposed):
    # Seconds this client's held call stays open (None: serve.wait).
    wait: float | None = Field(default=None, gt=0, le=86400)


class ServeSettings(Exposed):
    # Seconds a host's call held for a person (`diana serve`) stays open; then the host is
    # told the proposal's id (the proposal stays for a person to decide).
    wait: float = Field(default=600.0, gt=0, le=86400)
    # The same for one client (its token's name over HTTP, its clientInfo name over stdio),
    # for hosts that cut a call off sooner; and what that client sees (servers, agents,
    # hide), each key replacing the default's.
    clients: dict[str, ClientServeSettings] = Field(default_factory=dict)

    def wait_for(self, client: str) -> float:
        chosen = self.clients.get(client)
        return self.wait if chosen is None or chosen.wait is None else chosen.wait

    def exposure_for(self, client: str) -> Exposure:
        chosen = self.clients.get(client)

        def pick(key: str) -> list[str] | None:
            own = getattr(chosen, key) if chosen is not None else None
            return own if own is not None else getattr(self, key)

        servers, agents, hide = pick("servers"), pick("agents"), pick("hide")
        return Exposure(
            servers=None if servers is None else frozenset(servers),
            agents=None if agents is None else frozenset(agents),
            hide=tuple(hide or ()),
        )


# How a proposal that arrives while diana-tui is not the focused window is told: the
# terminal's bell, the bell and a desktop notification sent through the terminal, or not.
Notify = Literal["bell", "desktop", "none"]


class Settings(_Strict):
    notify: Notify = "desktop"
    obsidian: ObsidianSettings = Field(default_factory=ObsidianSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    logs: LogSettings = Field(default_factory=LogSettings)
    cost: CostSettings = Field(default_factory=CostSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)

    @property
    def vault_path(self) -> Path:
        return Path(self.obsidian.vault).expanduser()


# The settings a running diana follows at once when settings.json changes (core/runtime.py's
# apply_settings); every other one applies after a restart, and a person is told so.
LIVE_SETTINGS = frozenset(
    {
        "notify",
        "cost.daily_budget",
        "agents.stopped",
        "serve.wait",
        "serve.clients",
        "serve.servers",
        "serve.agents",
        "serve.hide",
    }
)


def changed_settings(before: Settings, after: Settings) -> list[str]:
    """The settings (dotted keys, as in settings.json: "web.backend") whose values differ."""
    changed = []
    old, new = before.model_dump(), after.model_dump()
    for section, value in new.items():
        if isinstance(value, dict):
            changed += [f"{section}.{key}" for key in value if value[key] != old[section].get(key)]
        elif value != old[section]:
            changed.append(section)
    return changed


def describe_pydantic_error(error: ValidationError) -> str:
    """The first problem of a pydantic error as 'field.path: message'."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {message}" if where else message


def read_config_bytes(path: Path) -> bytes:
    """The whole content of a config file that must be a readable regular file (a symlink to
    one is fine): anything else raises ConfigError naming it (see ``read_regular``)."""
    try:
        return read_regular(path, MAX_CONFIG_BYTES, "a config file")
    except UnreadableFile as exc:
        raise ConfigError(path, exc.reason) from None


def read_json(path: Path) -> Any:
    """A config file's JSON value; ConfigError naming the file for anything that is not a
    readable regular file of valid UTF-8 JSON (see ``read_config_bytes``). A file caught
    half-saved (an editor writing it in place) is read again once it has stopped changing."""
    for _ in range(SETTLE_TRIES):
        before = changed_at(path)
        data = read_config_bytes(path)
        try:
            return parse_config(path, data)
        except ConfigError:
            settle_pause()
            if changed_at(path) == before:
                raise  # not being saved: it is broken
    return parse_config(path, read_config_bytes(path))


def settle_pause() -> None:
    """Give a config file caught half-saved the time to be whole."""
    time.sleep(SETTLE)


def changed_within(path: Path, before: tuple[int, ...] | None, within: float) -> bool:
    """Whether the file at ``path`` changes from how it was (``before``, from ``changed_at``)
    within ``within`` seconds: looked at every SETTLE seconds, and at once when it does."""
    deadline = time.monotonic() + within
    while True:
        settle_pause()
        if changed_at(path) != before:
            return True
        if time.monotonic() >= deadline:
            return False


def changed_at(path: Path) -> tuple[int, int, int, int, int] | None:
    """Which file is at ``path`` and how it last changed (device, inode, size, mtime,
    ctime); None if there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def parse_config(path: Path, data: bytes) -> Any:
    """The JSON value of a config file's bytes; ConfigError naming the file if they are not
    UTF-8 JSON (with no key twice)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text (byte {exc.start})") from None
    try:
        return parse_json(text, unique_keys=True)
    except JSONProblem as exc:
        raise ConfigError(path, str(exc)) from None


def load_settings(paths: Paths) -> Settings:
    path = paths.config_file(SETTINGS_FILE)
    if not config_present(path):
        return Settings()
    raw = read_json(path)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None
