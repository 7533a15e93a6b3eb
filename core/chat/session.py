"""The chat session: one conversation with a local model, whose tool calls all go through the
orchestrator (and so through the approval gate), streamed to whoever is watching. The session
holds what lasts between turns (the model and its client, the conversation and its storing,
Ollama's status, a wait for a person's decision); each message is answered by a ``Turn``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from ..approvals.proposal import Proposal
from ..approvals.service import Approvals
from ..calls import tracing
from ..calls.orchestrator import Orchestrator
from ..config.settings import LLMSettings
from ..llm.local_models import Models
from ..llm.ollama import LLMProblem, OllamaStatus, check, explain, make_client, resolve_host
from ..memory import MEMORY_AGENT, Fact, Memory
from ..system.clock import Clock
from ..system.telemetry import StructuredLog, new_correlation_id
from .chats import Chats, ChatSettings, option_range, option_value, system_text
from .conversation import CLI, ConversationStore, Kind, Message
from .images import BadImage, Image, no_vision_text
from .prompt import SYSTEM_PROMPT, memory_note, with_persons_prompt
from .turn import Turn
from .turn_events import (
    MemoryRecalled,
    Sink,
    TurnOutcome,
    TurnStarted,
    problem_of,
    result_type,
    tell,
)

CONTEXT_NEARLY_FULL = 0.9  # of the model's context: the chat says older messages will go
SUGGEST_WITHIN = 5.0  # seconds a tool-gap report waits for the registry's candidates
# A missing capability's name -> registry entries that would provide it, as shown.
FindServers = Callable[[str], Awaitable[list[dict[str, Any]]]]


class Busy(Exception):
    """A turn is already running in this session."""


class ChatSession:
    def __init__(
        self,
        *,
        settings: LLMSettings,
        orchestrator: Orchestrator,
        approvals: Approvals,
        conversations: ConversationStore,
        clock: Clock,
        new_id: Callable[[], str] = new_correlation_id,
        log: StructuredLog | None = None,
        memory: Memory | None = None,
        find_servers: FindServers | None = None,
        origin: str = CLI,
    ) -> None:
        self.settings = settings
        self.origin = origin  # the front end whose conversations this session opens: APP, CLI
        self.memory = memory  # facts given to the model before it answers; None: none
        # Registry entries that would provide a missing capability; None: none are sought.
        self.find_servers = find_servers
        self.host = resolve_host(settings.host)
        self.model = settings.model
        self.think = settings.think
        self.orchestrator = orchestrator
        self.approvals = approvals
        self.conversations = conversations
        self.chats = Chats(conversations.db)
        self.conversation_id: str | None = None
        # The open conversation's own system prompt and Ollama options, sent on each turn.
        self.conversation_settings = ChatSettings()
        self.messages: list[Message] = []
        self.last_status: OllamaStatus | None = None
        self.clock = clock
        self.new_id = new_id
        self._log = log
        self.client = make_client(self.host, settings)
        self.models = Models(self.client, self.host)
        self._told_without: set[tuple[str, str]] = set()  # (model, capability) said once
        # Tokens the last request took (Ollama's prompt_eval_count + eval_count), and the
        # context they fill (the conversation's num_ctx, else the model's context length).
        self.context_used: int | None = None
        self.context_window: int | None = None
        self._told_full: set[str | None] = set()  # conversations told their context is full
        self._lock = asyncio.Lock()
        self._send_on: asyncio.Event | None = None
        self._storing: asyncio.Future[None] | None = None  # the last message being stored

    async def servers_for(self, missing: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Registry entries for each missing capability, found within SUGGEST_WITHIN seconds
        or not at all: the report never waits long for them, nor fails for want of them."""
        find = self.find_servers
        if find is None or not missing:
            return {}
        try:
            async with asyncio.timeout(SUGGEST_WITHIN):
                found = await asyncio.gather(*(find(name) for name in missing))
        except Exception as exc:
            if self._log is not None:
                self._log.emit("llm.gap.suggest_failed", "warning", error=str(exc))
            return {}
        return {name: entries for name, entries in zip(missing, found, strict=True) if entries}

    # -- conversation ---------------------------------------------------------------------

    async def open_latest(self) -> list[Message]:
        """Reopen the conversation this front end had last (the app's own, never one a
        `diana ask` began); its messages are what the person saw."""
        latest = await self.conversations.latest(self.origin)
        if latest is None:
            return []
        self.conversation_settings = await self.chats.settings(latest)
        self.conversation_id = latest
        self.messages = await self.conversations.messages(latest)
        return list(self.messages)

    async def open(self, conversation_id: str) -> list[Message]:
        """Open a stored conversation to go on with it: its messages, its model, its system
        prompt and options. UnknownChat when there is none; Busy while a turn runs."""
        if self.busy:
            raise Busy("a reply is still being written — wait for it, or press Esc to stop it")
        await self._stored()
        summary = await self.chats.get(conversation_id)
        messages = await self.conversations.messages(summary.id)
        self.conversation_id = summary.id
        self.model = summary.model
        self.conversation_settings = summary.settings
        self.messages = messages
        self.context_used = None  # known again after its next answer
        return list(messages)

    def clear(self) -> None:
        """Start a new conversation with the next message; the old one stays stored."""
        self.conversation_id = None
        self.messages = []
        self.conversation_settings = ChatSettings()
        self.context_used = None

    async def set_system(self, text: str) -> ChatSettings:
        """The conversation's own system prompt ("" for none), added to diana's own from
        the next turn on and kept with the conversation. BadChatInput when too long."""
        settings = self.conversation_settings
        return await self._keep(ChatSettings(system_text(text), settings.options))

    async def set_option(self, name: str, value: str | float | None) -> ChatSettings:
        """Set one Ollama option for this conversation (None: back to the model's default),
        sent from the next turn on. BadChatInput naming the option when it cannot be."""
        options = dict(self.conversation_settings.options)
        if value is None:
            option_range(name)  # an unknown name is said
            options.pop(name, None)
        else:
            options[name] = option_value(name, value)
        return await self._keep(ChatSettings(self.conversation_settings.system, options))

    async def _keep(self, settings: ChatSettings) -> ChatSettings:
        await self._stored()  # the conversation a turn is creating exists first
        if self.conversation_id is not None:
            await self.chats.set_settings(self.conversation_id, settings)
        self.conversation_settings = settings
        return settings

    async def remember(self, message: Message) -> None:
        """Add a message to the conversation, and wait until it is stored."""
        await asyncio.shield(self._remember_soon(message))

    def _remember_soon(self, message: Message) -> asyncio.Future[None]:
        """Add a message to the conversation now; it is stored in the background, after the
        ones before it (what waits on the store, the next _remember, waits for it too)."""
        at = self.clock.now()
        stamped = Message(**{**message.__dict__, "created_at": at.isoformat()})
        self.messages.append(stamped)
        self._storing = asyncio.ensure_future(self._store(stamped, at, self._storing))
        return self._storing

    async def _store(
        self, message: Message, at: datetime, after: asyncio.Future[None] | None
    ) -> None:
        if after is not None:
            await after  # in order; and if storing that one failed, so does this
        if self.conversation_id is None:
            settings = self.conversation_settings
            self.conversation_id = await self.conversations.create(
                self.new_id(),
                self.model,
                at,
                self.origin,
                system=settings.system,
                options=settings.options,
            )
        await self.conversations.append(self.conversation_id, message, at, self.model)

    async def _stored(self) -> None:
        """Return once every message so far is stored."""
        if self._storing is not None:
            await asyncio.shield(self._storing)

    # -- Ollama ---------------------------------------------------------------------------

    async def status(self) -> OllamaStatus:
        self.last_status = await check(self.client, self.host, self.model)
        return self.last_status

    def heard(self, problem: LLMProblem | None) -> None:
        """Keep the status true to the last request: Ollama answering again is ready."""
        known = self.last_status or OllamaStatus(self.host, True)
        self.last_status = known.after(self.model, problem)

    async def request_options(self) -> tuple[bool, bool | None, str | None]:
        """Whether the model is offered tools, the ``think`` it is sent, and a line to say
        once when it cannot take tools. A model Ollama says cannot call tools is sent none,
        one that cannot think is not asked to; when Ollama cannot say, nothing is withheld."""
        can = await self.models.capabilities(self.model)
        if can is None:
            return True, self.think, None
        think = self.think if "thinking" in can else None
        if "tools" in can:
            return True, think, None
        notice = None
        if (self.model, "tools") not in self._told_without:
            self._told_without.add((self.model, "tools"))
            notice = f'model "{self.model}" cannot call tools — it answers without them'
        return False, think, notice

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def waiting_for_decision(self) -> bool:
        return self._send_on is not None

    def send_on(self) -> bool:
        """Let a turn that waits for an approval go on without it; the proposal stays."""
        if self._send_on is None:
            return False
        self._send_on.set()
        return True

    async def close(self) -> None:
        await self.client._client.aclose()

    def llm_problem(self, exc: BaseException) -> LLMProblem:
        return explain(exc, host=self.host, model=self.model, waited=self.settings.timeout)

    # -- a turn ---------------------------------------------------------------------------

    async def run_turn(
        self,
        text: str,
        sink: Sink,
        *,
        wait_for_decisions: bool = True,
        images: Sequence[Image] = (),
    ) -> TurnOutcome:
        """Answer one message, with the pictures that go with it (``images``: BadImage,
        before anything is sent or kept, when the model does not take images). Tool calls
        run through the orchestrator under the turn's correlation id; a call that needs
        approval waits for the person (or ``send_on``) unless ``wait_for_decisions`` is
        false. Cancelling the task stops the stream and any running tool; what was said so
        far is kept."""
        if self._lock.locked():
            raise Busy("a reply is still being written — wait for it, or press Esc to stop it")
        async with self._lock:
            if images:
                await self.check_takes_images()
            turn = Turn(self, text, sink, wait_for_decisions)
            self.emit("llm.turn.started", correlation_id=turn.cid, model=self.model)
            # The model is asked at once: the message is stored while it answers.
            data = {"images": [image.stored() for image in images]} if images else None
            self._remember_soon(
                Message("user", Kind.CHAT, text, data=data, correlation_id=turn.cid)
            )
            await tell(sink, TurnStarted(turn.cid, text))
            tracer = tracing.tracer
            span = None if tracer is None else tracer.start_turn(turn.cid, self.model, text)
            outcome = turn.outcome
            cancelled = False
            try:
                await turn.run()
            except asyncio.CancelledError:
                cancelled = True
                await turn.cancelled()
                raise
            finally:
                await self._stored()
                if span is not None:
                    response = outcome.response
                    span.finish_turn(
                        len(turn.records),
                        response.confidence if response else None,
                        "cancelled" if cancelled else result_type(outcome),
                        None if outcome.problem is None else problem_of(outcome.problem),
                    )
            await self._measure_context()
            self.emit(
                "llm.turn.finished",
                correlation_id=turn.cid,
                tool_calls=len(turn.records),
                outcome="gap" if outcome.gap else "failed" if outcome.problem else "answered",
            )
            return outcome

    async def _measure_context(self) -> None:
        """The context the last request filled: the conversation's own num_ctx, else the
        model's context length (asked of Ollama once per model, so a turn never waits on
        it for long)."""
        num_ctx = self.conversation_settings.options.get("num_ctx")
        if num_ctx is not None:
            self.context_window = int(num_ctx)
        else:
            self.context_window = await self.models.context_length(self.model)

    async def check_takes_images(self) -> None:
        """BadImage when Ollama says the chat's model does not take images, naming the
        installed models that do; nothing is sent to the model. When Ollama cannot say, the
        request goes, and what it answers is said."""
        can = await self.models.capabilities(self.model)
        if can is None or "vision" in can:
            return
        try:
            installed = await self.models.installed()
        except LLMProblem:
            installed = []
        raise BadImage(no_vision_text(self.model, [m.name for m in installed if m.can("vision")]))

    def context_notice(self) -> str | None:
        """Once per conversation, when its last request filled CONTEXT_NEARLY_FULL of the
        model's context: that older messages will stop being sent; None otherwise."""
        fill = self.context_fill()
        if fill is None or fill[0] < CONTEXT_NEARLY_FULL * fill[1]:
            return None
        if self.conversation_id in self._told_full:
            return None
        self._told_full.add(self.conversation_id)
        used, window = fill
        return (
            f"this conversation fills {min(999, round(100 * used / window))}% of the model's "
            f"context ({used:,} of {window:,} tokens): from here on its oldest messages stop "
            "being sent to the model — /clear starts a new conversation, /set num_ctx N gives "
            "it more room"
        )

    def context_fill(self) -> tuple[int, int] | None:
        """(tokens used, tokens the context holds) after the last answer; None if unknown."""
        if self.context_used is None or not self.context_window:
            return None
        return self.context_used, self.context_window

    def history(self, recalled: list[Fact] | None = None) -> list[dict[str, Any]]:
        """What the model is sent: the system prompt, the recent conversation, and the facts
        recalled for this turn's message just before it."""
        tools = ", ".join(d.name for d in self.orchestrator.model_tools()) or "none"
        system = {
            "role": "system",
            "content": with_persons_prompt(
                SYSTEM_PROMPT.format(tools=tools), self.conversation_settings.system
            ),
        }
        recent = self.messages[-self.settings.history_messages :]
        while recent and recent[0].role == "tool":  # its call was cut off: it would dangle
            recent = recent[1:]
        messages = [m for m in (x.for_model() for x in recent) if m is not None]
        if recalled:
            last_user = max(
                (i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages)
            )
            messages.insert(last_user, {"role": "system", "content": memory_note(recalled)})
        return [system, *messages]

    async def recall(self, text: str) -> MemoryRecalled | None:
        """The facts relevant to ``text``; None when there are none, no memory, or nothing
        could be searched (the turn goes on without)."""
        if self.memory is None or self._memory_stopped():
            return None
        try:
            found = await self.memory.recall(text)
        except Exception as exc:  # memory is an aid: the answer never waits on its failure
            self.emit("llm.recall_failed", "warning", error=f"{type(exc).__name__}: {exc}")
            return None
        if not found.hits:
            return None
        return MemoryRecalled([h.fact for h in found.hits], found.mode, found.why)

    def _memory_stopped(self) -> bool:
        """Whether the memory agent is registered and not running (a person stopped it):
        then nothing of memory goes to the model, as none of its tools does."""
        slot = next((s for s in self.orchestrator.agent_slots() if s.name == MEMORY_AGENT), None)
        return slot is not None and not slot.callable

    async def await_decision(self, proposal_id: str) -> Proposal | None:
        """The decision, from any window or process, or None if the person sent the turn on."""
        self._send_on = asyncio.Event()
        decision = asyncio.ensure_future(self.approvals.wait(proposal_id))
        sent_on = asyncio.ensure_future(self._send_on.wait())
        try:
            done, _ = await asyncio.wait({decision, sent_on}, return_when=asyncio.FIRST_COMPLETED)
            return decision.result() if decision in done else None
        finally:
            self._send_on = None
            for task in (decision, sent_on):
                task.cancel()

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)
