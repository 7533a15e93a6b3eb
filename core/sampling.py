"""Sampling: an MCP server asks the local model to write a reply (sampling/createMessage).

A server's request becomes one call of the tool ``mcp_sampling``, so it goes through the one
gate every call goes through: by default it is a proposal showing the server, the messages,
the system prompt and the token limit, and Ollama is asked only once a person approves it (in
the app, or with `diana approve` from anywhere). policy.json's ``sampling`` section may allow
(or deny) it per server. The tool is never offered to the model, and a command cannot call
it: only a server's request makes one. The time it takes is charged to the server that asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from .agents import Agent, FunctionAgent, FunctionTool
from .clock import Clock
from .config import LLMSettings
from .models import (
    AgentError,
    ErrorCode,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    ToolResult,
    parameters_of,
)
from .telemetry import StructuredLog

if TYPE_CHECKING:
    from .approvals.service import Approvals
    from .orchestrator import Orchestrator

SAMPLING_TOOL = "mcp_sampling"
SAMPLING_AGENT = "sampling"
# How long a person has to decide when the server's entry sets no toolTimeout (seconds).
DECISION_TIME = 120.0

# An argument that may be null as well as left out (the server may send null).
NullableText = Annotated[str | None, WithJsonSchema({"type": ["string", "null"]})]
NullableNumber = Annotated[float | None, WithJsonSchema({"type": ["number", "null"]})]


# One image of a message; other keys the server sends are let through.
class SampledImage(BaseModel):
    mime_type: str | None = Field(default=None, alias="mimeType")
    data: str


# One message of the conversation the server asks about.
class SampledMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    text: str
    images: list[SampledImage] = Field(default_factory=list)


class SamplingParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(min_length=1, description="The server asking.")
    messages: list[SampledMessage] = Field(min_length=1)
    system_prompt: NullableText = None
    reply_limit: int = Field(ge=1)
    model_hints: list[str] = Field(default_factory=list)
    temperature: NullableNumber = None
    stop_sequences: list[str] = Field(default_factory=list)


SAMPLING = ToolDefinition(
    name=SAMPLING_TOOL,
    description="An MCP server asks the local model to write a reply (sampling).",
    parameters=parameters_of(SamplingParameters),
    category="sampling",
    # What the server does with the reply is out of diana's sight.
    risk=RiskLevel.IRREVERSIBLE,
    annotations=ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True
    ),
    internal=True,
)


def asks_sampling(tool: str, arguments: dict[str, Any]) -> str | None:
    """The server a call of ``mcp_sampling`` speaks for, or None for any other tool."""
    if tool != SAMPLING_TOOL:
        return None
    server = arguments.get("server")
    return server if isinstance(server, str) else ""


def sampling_reason(arguments: dict[str, Any]) -> str:
    limit = arguments.get("reply_limit")
    return (
        f"MCP server {arguments.get('server')} asks the local model to write a reply "
        f"(up to {limit} tokens)"
    )


def sampling_summary(arguments: dict[str, Any]) -> str:
    """A sampling request in one line: who asks, the last thing said, how long a reply."""
    messages = arguments.get("messages") or []
    last = messages[-1].get("text", "") if messages and isinstance(messages[-1], dict) else ""
    said = " ".join(str(last).split())
    return (
        f"{arguments.get('server')} asks the model: “{said}” "
        f"(≤ {arguments.get('reply_limit')} tokens, {len(messages)} message"
        f"{'' if len(messages) == 1 else 's'})"
    )


class SamplingRefused(ValueError):
    """A request diana cannot put to the local model (audio, say); the message says why."""


def ollama_messages(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's conversation in the shape Ollama's /api/chat takes."""
    messages: list[dict[str, Any]] = []
    system = arguments.get("system_prompt")
    if system:
        messages.append({"role": "system", "content": system})
    for message in arguments["messages"]:
        entry: dict[str, Any] = {"role": message["role"], "content": message["text"]}
        images = [image["data"] for image in message.get("images", [])]
        if images:
            entry["images"] = images
        messages.append(entry)
    return messages


def choose_model(hints: list[str], installed: list[str], configured: str) -> str:
    """The first hint that names an installed model (as a part of its name, as MCP says),
    else the configured model."""
    for hint in hints:
        wanted = hint.strip().lower()
        if not wanted:
            continue
        for model in installed:
            if wanted in model.lower():
                return model
    return configured


def sampling_agent(
    settings: LLMSettings, clock: Clock, charge: Callable[[str, float], None]
) -> Agent:
    """The agent that runs an approved sampling request on Ollama."""

    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        from .llm.ollama import check, explain, make_client, resolve_host

        host = resolve_host(settings.host)
        client = make_client(host, settings)
        hints = list(params.get("model_hints") or [])
        status = await check(client, host, settings.model) if hints else None
        model = choose_model(hints, status.models if status else [], settings.model)
        options: dict[str, Any] = {"num_predict": params["reply_limit"]}
        if params.get("temperature") is not None:
            options["temperature"] = params["temperature"]
        if params.get("stop_sequences"):
            options["stop"] = params["stop_sequences"]
        started = clock.monotonic()
        try:
            response = await client.chat(
                model=model, messages=ollama_messages(params), options=options, stream=False
            )
        except Exception as exc:
            waited = settings.timeout
            problem = explain(exc, host=host, model=model, waited=waited)
            raise AgentError(problem.code, problem.message) from None
        finally:
            charge(params["server"], clock.monotonic() - started)
        stop = "maxTokens" if response.done_reason == "length" else "endTurn"
        return {
            "model": model,
            "text": response.message.content or "",
            "stop_reason": stop,
            "counted": {
                "prompt": response.prompt_eval_count or 0,
                "reply": response.eval_count or 0,
            },
        }

    return FunctionAgent(
        SAMPLING_AGENT,
        "Sampling",
        [FunctionTool(SAMPLING, sample)],
        capabilities=["sampling"],
        clock=clock,
    )


@dataclass(frozen=True)
class SamplingRequest:
    """What a server asked for, in diana's terms (the arguments of ``mcp_sampling``)."""

    arguments: dict[str, Any]

    @property
    def server(self) -> str:
        return str(self.arguments["server"])


class Sampling:
    """The one place a server's sampling request is decided and run: through the gate as a
    call of ``mcp_sampling``; a proposal is waited for (decided here or in any process)
    within the server's time, and rejected if no one decides in it."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        approvals: Approvals,
        log: StructuredLog | None = None,
    ) -> None:
        self._orchestrator = orchestrator
        self._approvals = approvals
        self._log = log
        # Told of each request that waits for a person: (proposal id, server). A command
        # prints it; the app shows it in Approvals.
        self.on_waiting: Callable[[str, str], None] | None = None

    async def ask(self, request: SamplingRequest, time_limit: float) -> ToolResult:
        """The reply, or a failed result saying why there is none."""
        from .approvals.service import result_of

        server = request.server
        self._emit("sampling.asked", server=server, reply_limit=request.arguments["reply_limit"])
        result = await self._orchestrator.execute(
            SAMPLING_TOOL, request.arguments, origin=f"MCP server {server}", internal=True
        )
        if result.error_code is not ErrorCode.PENDING_APPROVAL:
            return result
        proposal_id = str((result.data or {})["proposal_id"])
        if self.on_waiting is not None:
            self.on_waiting(proposal_id, server)
        try:
            async with asyncio.timeout(time_limit):
                proposal = await self._approvals.wait(proposal_id)
        except TimeoutError:
            why = f"no one decided within {time_limit:g} s, so MCP server {server} was told no"
            return await self._withdraw(proposal_id, why)
        except asyncio.CancelledError:
            why = f"MCP server {server} stopped waiting for the reply"
            await asyncio.shield(self._withdraw(proposal_id, why))
            raise
        decided, _status = result_of(proposal)
        self._emit("sampling.decided", server=server, proposal=proposal_id, status=proposal.status)
        return decided

    async def _withdraw(self, proposal_id: str, why: str) -> ToolResult:
        """Reject a proposal no one decided in time; one decided meanwhile stands."""
        from .approvals.service import result_of
        from .approvals.store import SETTLED

        with contextlib.suppress(Exception):
            await self._approvals.reject(proposal_id, by="diana", reason=why)
        proposal = await self._approvals.store.get(proposal_id)
        if proposal.status in SETTLED:
            return result_of(proposal)[0]
        return ToolResult.fail(ErrorCode.REJECTED, why)

    def _emit(self, event: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, "info", **fields)
