"""Where config and data live, and the settings file, validated with pydantic."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SETTINGS_FILE = "settings.json"


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
        data = _choose(
            data_dir, "--data-dir", "DIANA_DATA_DIR", home / ".local" / "share" / "diana"
        )
        return cls(config, data)

    def config_file(self, name: str) -> Path:
        """The user's file if present, else the shipped default."""
        user = self.config_dir / name
        try:
            present = user.exists()
        except OSError as exc:
            raise ConfigError(user, f"cannot read: {exc.strerror}") from None
        return user if present else shipped_config_dir() / name

    @property
    def database(self) -> Path:
        return self.data_dir / "diana.db"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "diana.jsonl"


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


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror}") from None
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
    if not path.exists():
        return Settings()
    raw = read_json(path)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(path, describe_pydantic_error(exc)) from None
