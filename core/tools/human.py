"""request_human_input: the model asks the person a question.

The front end that has a person in front of it (the app's modal, the terminal of `diana ask`)
lends its asker when it opens the runtime (core/ports.py); without one the tool says plainly
that nobody can answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..calls.running_call import waiting_for_person
from ..models import (
    AgentError,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    parameters_of,
)
from ..system.clock import Clock

ANSWER_TIMEOUT = 3600.0  # a person may take a while; the tool's own timeout, not the default


class RequestHumanInputParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000)
    choices: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, max_length=10, description="Optional answers to pick from."
    )


REQUEST_HUMAN_INPUT = ToolDefinition(
    name="request_human_input",
    description=(
        "Ask the person a question when you lack information that no other tool can give; "
        "returns their answer."
    ),
    parameters=parameters_of(RequestHumanInputParameters),
    examples=['{"question": "Which project folder do you mean?"}'],
    category="human",
    risk=RiskLevel.REVERSIBLE,
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
    timeout=ANSWER_TIMEOUT,
)

# (question, choices) -> the answer, or None when the person declines
Asker = Callable[[str, list[str]], Awaitable[str | None]]


class HumanInput:
    def __init__(self, asker: Asker | None = None) -> None:
        self.asker = asker

    async def ask(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.asker is None:
            raise AgentError(
                ErrorCode.AGENT_UNAVAILABLE,
                "no person can answer here (no terminal or window is attached)",
            )
        question = params["question"].strip()
        with waiting_for_person():
            answer = await self.asker(question, list(params.get("choices", [])))
        if answer is None:
            raise AgentError(ErrorCode.CANCELLED, "the person chose not to answer")
        return {"question": question, "answer": answer}


def human_agent(human: HumanInput, clock: Clock) -> Agent:
    return FunctionAgent(
        "human",
        "Person",
        [FunctionTool(REQUEST_HUMAN_INPUT, human.ask)],
        capabilities=["clarification"],
        clock=clock,
        fixed_schemas=True,
    )
