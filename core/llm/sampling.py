"""Sampling: an MCP server asks the local model to write a reply (sampling/createMessage).

A server's request becomes one call of the tool ``mcp_sampling``, so it goes through the one
gate every call goes through: by default it is a proposal showing the server, the messages,
the system prompt and the token limit, and Ollama is asked only once a person approves it (in
the app, or with `diana approve` from anywhere). policy.json's ``sampling`` section may allow
(or deny) it per server. The tool is never offered to the model, and a command cannot call
it: only a server's request makes one. The time it takes is charged to the server that asked.

What a server sends is bounded: a request larger than ``REQUEST_LIMIT`` is refused naming
the limit; of a smaller one, the text kept (stored in the proposal, shown, and put to the
model) is at most ``TEXT_KEPT``, each text past its share cut and saying where. A server may
have ``WAITING_PER_SERVER`` requests in hand at once; more are refused at once
(core/approvals/sampling_gate.py decides them).

This module holds the request's shape, its limits, the tool and the agent that runs an
approved request; it imports nothing of the approvals that decide it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..calls.agents import Agent, FunctionAgent, FunctionTool
from ..calls.sampling_call import SAMPLING_AGENT, SAMPLING_TOOL
from ..config.settings import LLMSettings
from ..content.text import cut_text, size_text, utf8_size
from ..models import (
    AgentError,
    RiskLevel,
    ToolAnnotations,
    ToolDefinition,
    parameters_of,
)
from ..system.clock import Clock

# How long a person has to decide when the server's entry sets no toolTimeout (seconds).
# What a request may be (bytes, as JSON): a larger one is refused, naming the limit.
REQUEST_LIMIT = 8 << 20
# Of it, what is kept: the system prompt's and the messages' text together (bytes of
# UTF-8; each past its share is cut, saying where), the images whole (more is refused: an
# image cannot be cut), and the rest (roles, model hints, stop sequences).
TEXT_KEPT = 256 << 10
IMAGES_KEPT = 2 << 20
REST_KEPT = 64 << 10
# A server's requests in hand at once (waiting for a person, or running); more are refused.
WAITING_PER_SERVER = 8

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


class SamplingRefused(ValueError):
    """A request diana cannot put to the local model (audio, say); the message says why."""


def kept_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The request as diana keeps it: its texts cut to share ``TEXT_KEPT`` (the short ones
    whole, the long ones evenly), each cut one saying where. SamplingRefused, naming the
    limit, for a request past ``REQUEST_LIMIT``, images past ``IMAGES_KEPT``, or the rest
    past ``REST_KEPT``."""
    size = _json_size(arguments)
    if size > REQUEST_LIMIT:
        raise SamplingRefused(
            f"the request is {size_text(size)}; diana takes at most {size_text(REQUEST_LIMIT)}"
        )
    messages = [dict(message) for message in arguments["messages"]]
    images = sum(
        len(str(image.get("data", "")))
        for message in messages
        for image in message.get("images", [])
    )
    if images > IMAGES_KEPT:
        raise SamplingRefused(
            f"its images are {size_text(images)}; diana keeps at most {size_text(IMAGES_KEPT)}"
        )
    system = arguments.get("system_prompt")
    texts = [system or "", *(str(message["text"]) for message in messages)]
    rest = _json_size(
        {
            **arguments,
            "system_prompt": None,
            "messages": [{**message, "text": "", "images": []} for message in messages],
        }
    )
    if rest > REST_KEPT:
        raise SamplingRefused(
            f"apart from its text and images it is {size_text(rest)} ({len(messages):,} "
            f"messages); diana keeps at most {size_text(REST_KEPT)}"
        )
    shares = _shares([utf8_size(text) for text in texts], TEXT_KEPT)
    kept = [cut_text(text, share) for text, share in zip(texts, shares, strict=True)]
    for message, text in zip(messages, kept[1:], strict=True):
        message["text"] = text
    return {**arguments, "system_prompt": kept[0] if system else system, "messages": messages}


def _shares(sizes: list[int], budget: int) -> list[int]:
    """Each text's share of ``budget``: the short ones whole, the rest split evenly among
    the long ones."""
    shares = [0] * len(sizes)
    left = budget
    by_size = sorted(range(len(sizes)), key=sizes.__getitem__)
    for position, index in enumerate(by_size):
        shares[index] = min(sizes[index], left // (len(sizes) - position))
        left -= shares[index]
    return shares


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "replace"))


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
        from .ollama import check, explain, make_client, resolve_host

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
        fixed_schemas=True,
    )


@dataclass(frozen=True)
class SamplingRequest:
    """What a server asked for, in diana's terms (the arguments of ``mcp_sampling``)."""

    arguments: dict[str, Any]

    @property
    def server(self) -> str:
        return str(self.arguments["server"])
