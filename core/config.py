"""Where config and data live, and the settings file, validated with pydantic."""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SETTINGS_FILE = "settings.json"
# A config file past this size is refused: read whole, it could exhaust memory (a link to
# /dev/zero is refused earlier, as not a regular file).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file, entry and field."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def shipped_config_dir() -> Path:
    """The defaults shipped with the program: inside the wheel, or the source tree."""
    package = Path(__file__).resolve().parent
    installed = package / "_shipped" / "config"
    return installed if installed.is_dir() else package.parent / "config"


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    data_dir: Path

    @classmethod
    def resolve(
        cls, config_dir: str | Path | None = None, data_dir: str | Path | None = None
    ) -> Paths:
        home = Path.home()
        config = _choose(config_dir, "--config-dir", "DIANA_CONFIG_DIR", home / ".config" / "diana")
        _check_config_dir(config)
        data = _choose(
            data_dir, "--data-dir", "DIANA_DATA_DIR", home / ".local" / "share" / "diana"
        )
        return cls(config, data)

    def config_file(self, name: str) -> Path:
        """The user's file if it is there in any form, else the shipped default. Only a file
        that does not exist falls back: a dangling link, a FIFO or a directory is the user's
        file, and reading it (``read_json``) reports why it cannot be used."""
        user = self.config_dir / name
        return user if config_present(user) else shipped_config_dir() / name

    @property
    def database(self) -> Path:
        return self.data_dir / "diana.db"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "diana.jsonl"


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
            path, _unreachable(path, exc) + "; the config dir must be a directory"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            path, f"is {_kind(info.st_mode)}, not a directory; the config dir must be a directory"
        )


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


class LLMSettings(_Strict):
    model: str = Field(default="qwen3:30b-a3b", min_length=1)
    # None: OLLAMA_HOST, else http://127.0.0.1:11434
    host: str | None = None
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


class LogSettings(_Strict):
    # JSON-lines logs and execution-log rows older than this many days are removed.
    retention_days: int = Field(default=30, ge=1, le=3650)


class CostSettings(_Strict):
    # Cost units a day may use (one unit is one second of tool or server time); None: no
    # budget. Over it, calls that are not reversible wait for a person.
    daily_budget: float | None = Field(default=None, gt=0)


class TracingSettings(_Strict):
    # Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (package extra
    # "tracing"); otherwise tracing is off.
    service_name: str = Field(default="diana", min_length=1)


class Settings(_Strict):
    obsidian: ObsidianSettings = Field(default_factory=ObsidianSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    logs: LogSettings = Field(default_factory=LogSettings)
    cost: CostSettings = Field(default_factory=CostSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)

    @property
    def vault_path(self) -> Path:
        return Path(self.obsidian.vault).expanduser()


def describe_pydantic_error(error: ValidationError) -> str:
    """The first problem of a pydantic error as 'field.path: message'."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {message}" if where else message


def read_config_bytes(path: Path) -> bytes:
    """The whole content of a config file that must be a readable regular file (a symlink to
    one is fine). Anything else raises ConfigError naming it, at once: a FIFO is never waited
    on, a device never read, and nothing past MAX_CONFIG_BYTES is read."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(path, _unreachable(path, exc)) from None
    _require_regular(path, info)
    try:
        # O_NONBLOCK: were it swapped for a FIFO since the stat, opening must not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(path, _unreachable(path, exc)) from None
    try:
        _require_regular(path, os.fstat(fd))  # the file opened is the file checked
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_CONFIG_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(path, "is larger than 4 MiB, too large for a config file")
    return b"".join(chunks)


def _require_regular(path: Path, info: os.stat_result) -> None:
    if stat.S_ISREG(info.st_mode):
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(path, "is larger than 4 MiB, too large for a config file")
        return
    kind = _kind(info.st_mode)
    if os.path.islink(path):
        raise ConfigError(
            path, f"is a symbolic link to {_link_target(path)}, {kind}, not a regular file"
        )
    raise ConfigError(path, f"is {kind}, not a regular file")


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return kind
    return "not a file"


def _unreachable(path: Path, exc: OSError) -> str:
    """Why a path that is there cannot be opened, in words (a link that leads nowhere)."""
    if exc.errno == errno.ELOOP:
        return "is a symbolic link that loops (too many levels of links)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"is a symbolic link to {_link_target(path)}, which does not exist"
    if exc.errno == errno.ENXIO:
        return "is a socket or a device with nothing behind it, not a regular file"
    return f"cannot read: {exc.strerror}"


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "something that cannot be read"


def read_json(path: Path) -> Any:
    """A config file's JSON value; ConfigError naming the file for anything that is not a
    readable regular file of valid UTF-8 JSON (see ``read_config_bytes``)."""
    data = read_config_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            path, f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(path, "nested too deeply to read") from None


def load_settings(paths: Paths) -> Settings:
    path = paths.config_file(SETTINGS_FILE)
    if not config_present(path):
        return Settings()
    raw = read_json(path)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None
