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
have ``WAITING_PER_SERVER`` requests in hand at once; more are refused at once. Everything a
request writes to the database (its proposal, and taking it back when the server stops
waiting) runs in a task this class keeps, and ``close`` waits for them before the database
closes: none outlives it, and a failure is logged, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
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
from .text import cut_text, size_text, utf8_size

if TYPE_CHECKING:
    from .approvals.service import Approvals
    from .orchestrator import Orchestrator

SAMPLING_TOOL = "mcp_sampling"
SAMPLING_AGENT = "sampling"
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
# How long closing waits for what requests are still writing (seconds).
CLOSE_TIME = 1.0

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


def told(proposal: Any, server: str, rejected: str | None = None) -> ToolResult:
    """What the server is told of its request once decided: the reply, or why there is none,
    naming the request and its proposal (never as a call of its own being rejected)."""
    from .approvals.service import result_of
    from .approvals.store import ProposalStatus

    if proposal.status is not ProposalStatus.REJECTED:
        return result_of(proposal)[0]
    if rejected is None or proposal.decided_by != "diana":
        reason = f": {proposal.reject_reason}" if proposal.reject_reason else ""
        rejected = (
            f"MCP server {server}'s request to the local model was rejected "
            f"(proposal {proposal.id}){reason}"
        )
    return ToolResult.fail(ErrorCode.REJECTED, rejected)


class Sampling:
    """The one place a server's sampling request is decided and run: through the gate as a
    call of ``mcp_sampling``; a proposal is waited for (decided here or in any process)
    within the server's time, and rejected if no one decides in it, or when the server stops
    waiting for it.

    Each request's own work (making the proposal, waiting for the decision, taking the
    proposal back) runs in a task of its own, never interrupted halfway by its server going
    away: the server's going is told to it, and it takes the proposal back."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        approvals: Approvals,
        log: StructuredLog | None = None,
        *,
        on_waiting: Callable[[str, str], None] | None = None,
    ) -> None:
        self._orchestrator = orchestrator
        self._approvals = approvals
        self._log = log
        # Told of each request that waits for a person: (proposal id, server). A command
        # prints it; the app shows it in Approvals.
        self.on_waiting = on_waiting
        self._in_hand: Counter[str] = Counter()  # per server
        # Each request's task, and what tells it why no one waits for its answer any more.
        self._requests: dict[asyncio.Task[ToolResult], asyncio.Future[str]] = {}
        self._closed = False

    async def ask(self, request: SamplingRequest, time_limit: float) -> ToolResult:
        """The reply, or a failed result saying why there is none."""
        server = request.server
        refused = self._refusal(server)
        if refused is not None:
            self._emit("sampling.refused", "warning", server=server, reason=refused)
            return ToolResult.fail(ErrorCode.REJECTED, refused)
        try:
            arguments = kept_arguments(request.arguments)
        except SamplingRefused as exc:
            self._emit("sampling.refused", "warning", server=server, reason=str(exc))
            return ToolResult.fail(
                ErrorCode.INVALID_ARGUMENTS, f"diana cannot ask the local model: {exc}"
            )
        gone: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._decide(server, arguments, time_limit, gone), name=f"sampling-{server}"
        )
        self._requests[task] = gone
        task.add_done_callback(self._finished)
        self._in_hand[server] += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not gone.done():
                gone.set_result(f"MCP server {server} stopped waiting for the reply")
            with contextlib.suppress(Exception):  # a failure is logged by _finished
                await asyncio.shield(task)  # taken back before the call is told, if it may wait
            raise
        finally:
            self._in_hand[server] -= 1

    def _refusal(self, server: str) -> str | None:
        if self._closed:
            return "diana is stopping"
        if self._in_hand[server] >= WAITING_PER_SERVER:
            return (
                f"MCP server {server} already has {self._in_hand[server]} requests to the "
                f"local model in hand (at most {WAITING_PER_SERVER}); this one is refused"
            )
        return None

    async def _decide(
        self, server: str, arguments: dict[str, Any], time_limit: float, gone: asyncio.Future[str]
    ) -> ToolResult:
        """Make the proposal, wait for a decision, and take it back if none comes in time
        or no one waits for it any more (``gone`` says why)."""
        self._emit("sampling.asked", server=server, reply_limit=arguments["reply_limit"])
        result = await self._orchestrator.execute(
            SAMPLING_TOOL, arguments, origin=f"MCP server {server}", internal=True
        )
        if result.error_code is not ErrorCode.PENDING_APPROVAL:
            return result
        proposal_id = str((result.data or {})["proposal_id"])
        if self.on_waiting is not None and not gone.done():
            self.on_waiting(proposal_id, server)
        decided = asyncio.ensure_future(self._approvals.wait(proposal_id))
        try:
            either: set[asyncio.Future[Any]] = {decided, gone}
            await asyncio.wait(either, timeout=time_limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not decided.done():
                decided.cancel()
                await asyncio.wait({decided})
        if not decided.cancelled():
            proposal = decided.result()
            self._emit(
                "sampling.decided", server=server, proposal=proposal_id, status=proposal.status
            )
            return told(proposal, server)
        why = (
            gone.result()
            if gone.done()
            else f"no one decided on MCP server {server}'s request to the local model "
            f"(proposal {proposal_id}) within {time_limit:g} s, so it was told no"
        )
        return await self._withdraw(proposal_id, why, server)

    async def _withdraw(self, proposal_id: str, why: str, server: str) -> ToolResult:
        """Reject a proposal no one decided in time; one decided meanwhile stands."""
        from .approvals.store import SETTLED, AlreadyDecided

        with contextlib.suppress(AlreadyDecided):
            await self._approvals.reject(proposal_id, by="diana", reason=why)
        proposal = await self._approvals.store.get(proposal_id)
        if proposal.status in SETTLED:
            return told(proposal, server, rejected=why)
        return ToolResult.fail(ErrorCode.REJECTED, why)

    def _finished(self, task: asyncio.Task[ToolResult]) -> None:
        """A request's task ended: a failure is logged here, whoever else hears of it."""
        self._requests.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self._emit("sampling.failed", "error", error=f"{type(error).__name__}: {error}")

    async def close(self) -> None:
        """Take no more requests; take back what still waits for a decision, and let each
        request's task finish (within ``CLOSE_TIME``; what is left then is cancelled), all
        before the database closes."""
        self._closed = True
        for gone in self._requests.values():
            if not gone.done():
                gone.set_result("diana stopped before anyone decided")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_TIME
        while self._requests and loop.time() < deadline:
            await asyncio.wait(set(self._requests), timeout=deadline - loop.time())
        left = set(self._requests)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)
