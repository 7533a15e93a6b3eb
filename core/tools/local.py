"""Local tools from tools.json: a Python script per tool, run in its own process.

    {"tools": [{"name": "word_count", "description": "...", "parameters": {JSON Schema},
                "output_schema": {...}, "script": "word_count.py", "timeout": 10,
                "parallel_capable": false, "risk": "reversible"}]}

``script`` is a file under the config dir's ``tools/`` folder; a path that leaves it is refused.
The registry is validated as a whole before start-up and before any change is written; a
malformed file names the entry and field. A tool whose script has gone missing is still listed
and answers with an error. Tools not marked ``parallel_capable`` run one call at a time."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..config.settings import (
    ConfigError,
    config_present,
    describe_pydantic_error,
    read_json,
    shipped_config_dir,
)
from ..config.writer import writer_for
from ..models import (
    TOOL_NAME_PATTERN,
    AgentError,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    ToolResult,
)
from ..system.clock import Clock
from .tool_process import run_process

TOOLS_FILE = "tools.json"
TOOLS_DIR = "tools"
AGENT_ID = "local-tools"
# The most a local tool's answer may hold, as MCP's stdio messages may: past it the call fails
# and nothing of the answer is kept.
RESULT_LIMIT = 64 << 20


class LocalToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] | None = None
    script: str = Field(min_length=1)
    timeout: Annotated[float, Field(gt=0, le=3600)] | None = None
    parallel_capable: bool = False
    # Unknown tools are irreversible; naming a lower risk here is the person's decision.
    risk: RiskLevel = RiskLevel.IRREVERSIBLE

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object"')
        return _checked_schema(value)

    @field_validator("output_schema")
    @classmethod
    def _output(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _checked_schema(value)

    @field_validator("script")
    @classmethod
    def _inside(cls, value: str) -> str:
        path = Path(value)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"must be a path inside the {TOOLS_DIR}/ folder, not {value!r}")
        return value

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            category="local",
            risk=self.risk,
            timeout=self.timeout,
            annotations=ToolAnnotations(
                readOnlyHint=self.risk is RiskLevel.REVERSIBLE,
                destructiveHint=self.risk is RiskLevel.IRREVERSIBLE,
            ),
        )


def _checked_schema(schema: dict[str, Any]) -> dict[str, Any]:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
    return schema


class ToolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: list[LocalToolSpec] = Field(default_factory=list)


def parse_tools(raw: Any, path: Path) -> list[LocalToolSpec]:
    """Validate a whole registry; the error names the file, the entry and the field."""
    if isinstance(raw, list):
        raw = {"tools": raw}
    if not isinstance(raw, dict):
        raise ConfigError(path, 'must be {"tools": [...]}')
    try:
        tools = ToolsFile.model_validate(raw).tools
    except ValidationError as exc:
        raise ConfigError(path, _describe(exc, raw)) from None
    seen: set[str] = set()
    for index, spec in enumerate(tools):
        if spec.name in seen:
            raise ConfigError(path, f"tools[{index}] ({spec.name}): the name is used twice")
        seen.add(spec.name)
    return tools


def _describe(error: ValidationError, raw: dict[str, Any]) -> str:
    where = error.errors()[0]["loc"]
    text = describe_pydantic_error(error)
    if len(where) >= 2 and where[0] == "tools" and isinstance(where[1], int):
        entries = raw.get("tools")
        entry = entries[where[1]] if isinstance(entries, list) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        rest = ".".join(str(p) for p in where[2:])
        label = f"tools[{where[1]}]" + (f" ({name})" if isinstance(name, str) else "")
        return f"{label}.{rest}: {text.split(': ', 1)[-1]}" if rest else f"{label}: {text}"
    return text


def load_tools(path: Path) -> list[LocalToolSpec]:
    if not config_present(path):  # a dangling link or a FIFO: read_json says what it is
        raise ConfigError(path, "is missing: the tool registry must exist")
    return parse_tools(read_json(path), path)


def validate_registry(value: Any, path: Path) -> None:
    parse_tools(value, path)


class LocalTools:
    """The registry in force and the agent that runs its tools; re-read when the file changes."""

    def __init__(self, locate: Callable[[], Path], user_file: Path, clock: Clock) -> None:
        self._locate = locate
        self.user_file = user_file
        self.tools_dir = (user_file.parent / TOOLS_DIR).absolute()
        self._clock = clock
        self.specs = load_tools(locate())
        self._locks: dict[str, asyncio.Lock] = {}
        self.agent: FunctionAgent | None = None

    def make_agent(self) -> Agent:
        self.agent = FunctionAgent(
            AGENT_ID, "Local tools", self._tools(), capabilities=["local"], clock=self._clock
        )
        return self.agent

    def reload(self) -> bool:
        """Read the registry again; raises ConfigError (the tools in force stay) if it is bad.
        True when the running agent's tools were replaced."""
        self.specs = load_tools(self._locate())
        if self.agent is None:
            return False
        self.agent.set_tools(self._tools())
        return True

    async def change(
        self, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> list[LocalToolSpec]:
        """Change the user's tools.json (add_tool, update_tool, remove_tool) through its one
        writer; the registry in force follows when the watcher sees the file (or at once)."""
        specs = await change_registry(self.user_file, shipped_config_dir() / TOOLS_FILE, change)
        return specs

    def _tools(self) -> list[FunctionTool]:
        return [FunctionTool(spec.definition(), self._handler(spec)) for spec in self.specs]

    def _handler(self, spec: LocalToolSpec) -> Callable[[dict[str, Any]], Any]:
        async def handle(arguments: dict[str, Any]) -> ToolResult:
            if spec.parallel_capable:
                return await self._run(spec, arguments)
            async with self._locks.setdefault(spec.name, asyncio.Lock()):
                return await self._run(spec, arguments)

        return handle

    def _script(self, spec: LocalToolSpec) -> Path:
        """The script's real path; refused unless it really lies inside the tools/ folder (a
        link, or a folder that is a link, may lead out of it)."""
        script = self.tools_dir / spec.script
        if not script.is_file():
            raise AgentError(
                ErrorCode.TOOL_EXECUTION_FAILED,
                f"{spec.name}: its script {script} is missing",
            )
        real = script.resolve()
        if not real.is_relative_to(self.tools_dir.resolve()):
            index = next((i for i, s in enumerate(self.specs) if s.name == spec.name), 0)
            raise AgentError(
                ErrorCode.TOOL_EXECUTION_FAILED,
                f"tools[{index}] ({spec.name}).script: must be a path inside the {TOOLS_DIR}/ "
                f"folder; {spec.script!r} leads to {real}, so it is refused",
            )
        return real

    async def _run(self, spec: LocalToolSpec, arguments: dict[str, Any]) -> ToolResult:
        script = self._script(spec)  # run by its real path: a link changed later is not used
        outcome = await run_process(
            [sys.executable, "-m", "diana.core.tools.runner", str(script)],
            stdin=json.dumps(arguments).encode(),
            cwd=self.tools_dir,
            limit=None,
            keep_stdout=RESULT_LIMIT,
        )
        if outcome.stdout_dropped:
            raise AgentError(
                ErrorCode.TOOL_EXECUTION_FAILED,
                f"{spec.name} answered more than {RESULT_LIMIT >> 20} MiB; its result was not kept",
            )
        try:
            answer = json.loads(outcome.stdout)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict) or "ok" not in answer:
            last = outcome.stderr.strip().splitlines()[-1:] or [f"exit code {outcome.exit_code}"]
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, f"{spec.name} failed: {last[0]}")
        if not answer["ok"]:
            raise AgentError(ErrorCode.TOOL_EXECUTION_FAILED, f"{spec.name}: {answer['error']}")
        result = answer.get("result")
        if spec.output_schema is not None:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import best_match

            problem = best_match(Draft202012Validator(spec.output_schema).iter_errors(result))
            if problem is not None:
                where = "/".join(str(p) for p in problem.absolute_path) or "the result"
                raise AgentError(
                    ErrorCode.INVALID_RESPONSE,
                    f"{spec.name} returned output that fails its output_schema at {where}: "
                    f"{problem.message}",
                )
        return ToolResult.ok(result)


# -- changing the registry ------------------------------------------------------------------


class RegistryChangeError(Exception):
    """A requested change that cannot be made as asked (no such tool, name taken)."""


async def change_registry(
    user_file: Path, shipped: Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> list[LocalToolSpec]:
    """Apply a change to the list of tool entries through the one writer for tools.json."""

    def apply(current: Any) -> Any:
        entries = current if isinstance(current, list) else current.get("tools", [])
        return {"tools": change([dict(e) for e in entries])}

    def start() -> Any:
        return read_json(shipped) if shipped.exists() else {"tools": []}

    written = await writer_for(user_file).update(apply, validate_registry, default=start)
    return parse_tools(written, user_file)


def add_tool(entry: dict[str, Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any(e.get("name") == entry.get("name") for e in entries):
            raise RegistryChangeError(
                f"a tool named {entry.get('name')} exists already; use update to change it"
            )
        return [*entries, entry]

    return change


def update_tool(entry: dict[str, Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not any(e.get("name") == entry.get("name") for e in entries):
            raise RegistryChangeError(f"no tool named {entry.get('name')} to update")
        return [entry if e.get("name") == entry.get("name") else e for e in entries]

    return change


def remove_tool(name: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [e for e in entries if e.get("name") != name]
        if len(kept) == len(entries):
            raise RegistryChangeError(f"no tool named {name} to remove")
        return kept

    return change
