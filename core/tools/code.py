"""code_execution: run a Python or shell snippet the model wrote.

It is IRREVERSIBLE and always asks, so the approvals gate turns every call into a proposal, even
when policy.json allows it: nothing runs before a person has read the code. It runs in a fresh
temporary directory (removed afterwards) with the tool's timeout, and the whole process tree is
killed when time is up."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..models import RiskLevel, ToolAnnotations, ToolDefinition, parameters_of
from ..system.clock import Clock
from .tool_process import run_process


class CodeExecutionParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: Literal["python", "shell"]
    code: str = Field(min_length=1, max_length=100_000)


CODE_EXECUTION = ToolDefinition(
    name="code_execution",
    description=(
        "Run a short Python or shell program in a temporary directory and return its exit "
        "code, stdout and stderr. Every run needs the person's approval."
    ),
    parameters=parameters_of(CodeExecutionParameters),
    examples=['{"language": "python", "code": "print(sum(range(10)))"}'],
    category="code",
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True),
    always_ask=True,
)


async def execute_code(params: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="diana-code-") as folder:
        workdir = Path(folder)
        if params["language"] == "python":
            program = workdir / "main.py"
            program.write_text(params["code"], encoding="utf-8")
            argv = [sys.executable, str(program)]
        else:
            argv = ["/bin/sh", "-c", params["code"]]
        outcome = await run_process(argv, cwd=workdir)
    return {"exit_code": outcome.exit_code, "stdout": outcome.stdout, "stderr": outcome.stderr}


def code_agent(clock: Clock) -> Agent:
    return FunctionAgent(
        "code",
        "Code execution",
        [FunctionTool(CODE_EXECUTION, execute_code)],
        capabilities=["code"],
        clock=clock,
        fixed_schemas=True,
    )
