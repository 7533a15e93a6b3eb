"""One message being answered: the rounds of streaming and tool calls, the gap check run
beside the first answer, and what the answer cites."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..llm.ollama import LLMProblem, with_retries
from ..memory import Fact
from ..models import ErrorCode
from ..storage.call_record import call_status
from ..system.telemetry import redact
from .answer import CITATION, FactUsed, ToolCallRecord, build_response, decided_record
from .conversation import Kind, Message
from .gaps import (
    CAPABILITIES_SCHEMA,
    MalformedExtraction,
    ToolGapReport,
    extraction_messages,
    find_gaps,
    parse_capabilities,
)
from .prompt import CONFIDENCE_ARGUMENT, clamp_confidence, offer_confidence, tool_message
from .sources import SourceBook
from .turn_events import (
    ApprovalPending,
    Delta,
    GapFound,
    Progress,
    Sink,
    ToolCallFinished,
    ToolCallStarted,
    TurnCancelled,
    TurnFailed,
    TurnFinished,
    TurnOutcome,
    tell,
)

if TYPE_CHECKING:
    import ollama

    from ..approvals.proposal import Proposal
    from ..approvals.service import Approvals
    from ..calls.orchestrator import Orchestrator
    from ..config.settings import LLMSettings
    from ..system.clock import Clock
    from .chats import ChatSettings
    from .turn_events import MemoryRecalled


Answer = tuple[str, str, list[dict[str, Any]]]  # what one request said, thought and called


class TurnHost(Protocol):
    """What a turn uses of the chat session that runs it (``ChatSession``)."""

    settings: LLMSettings
    model: str
    think: bool | None
    conversation_settings: ChatSettings
    context_used: int | None
    orchestrator: Orchestrator
    approvals: Approvals
    client: ollama.AsyncClient
    clock: Clock
    new_id: Callable[[], str]

    def history(self, recalled: list[Fact] | None = None) -> list[dict[str, Any]]: ...
    async def recall(self, text: str) -> MemoryRecalled | None: ...
    async def remember(self, message: Message) -> None: ...
    async def await_decision(self, proposal_id: str) -> Proposal | None: ...
    async def servers_for(self, missing: list[str]) -> dict[str, list[dict[str, Any]]]: ...
    def llm_problem(self, exc: BaseException) -> LLMProblem: ...
    def heard(self, problem: LLMProblem | None) -> None: ...
    async def request_options(self) -> tuple[bool, bool | None, str | None]: ...
    def emit(self, event: str, level: str = "info", **fields: Any) -> None: ...


class Turn:
    """One message being answered: what was asked, what has streamed so far, the calls made
    and how it ended. Each step reads and adds to this state; the session holds what lasts
    between turns (the model, the conversation, the client)."""

    def __init__(self, session: TurnHost, text: str, sink: Sink, wait: bool) -> None:
        self.session = session
        self.text = text
        self.sink = sink
        self.wait = wait  # for a person's decision on a call that needs one
        self.cid = session.new_id()
        self.outcome = TurnOutcome(self.cid)
        self.records: list[ToolCallRecord] = []
        # What the current request has streamed so far (kept if the turn is stopped).
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.recalled: list[Fact] = []  # facts from memory given with the message
        self.book = SourceBook()  # web pages the calls brought, numbered for citing

    async def run(self) -> None:
        session, sink, cid = self.session, self.sink, self.cid
        settings = session.settings
        gap_check: asyncio.Future[ToolGapReport | None] | None = None
        stream: asyncio.Future[Answer] | None = None
        try:
            if settings.gap_check:
                # Asked first, so an Ollama that serves one request at a time checks first.
                gap_check = asyncio.ensure_future(self._detect_gaps())
            # The answer waits only for the message's vector: one short request.
            recalled = await session.recall(self.text)
            if recalled is not None:
                self.recalled = recalled.facts
                await tell(sink, recalled)
            if gap_check is not None:
                stream = asyncio.ensure_future(self._stream())
                await asyncio.sleep(0)  # both requests on their way before anything is drawn
                await tell(sink, Progress("checking which tools this needs"))
            answers: list[str] = []
            thoughts: list[str] = []
            notice: str | None = None
            for _round in range(settings.max_tool_rounds):
                if gap_check is not None and stream is not None:
                    first = await self._stream_beside(gap_check, stream)
                    gap_check = stream = None
                    if isinstance(first, ToolGapReport):
                        await self._report_gap(first)
                        return
                    content, thinking, calls = first
                else:
                    content, thinking, calls = await self._stream()
                self.content.clear()
                self.thinking.clear()
                answers.append(content)
                thoughts.append(thinking)
                await session.remember(
                    Message(
                        "assistant",
                        Kind.CHAT,
                        content,
                        # The final answer keeps what it rests on, to show it again.
                        data=None if calls else self._rests_on(answers),
                        thinking=thinking or None,
                        tool_calls=[{"function": c} for c in calls] or None,
                        correlation_id=cid,
                    )
                )
                if not calls:
                    break
                for call in calls:
                    record = await self._call(call)
                    self.records.append(record)
                    if record.status == "pending_approval":
                        self.outcome.pending.append(record.proposal_id or "")
            else:
                notice = (
                    f"stopped after {settings.max_tool_rounds} rounds of tool calls; "
                    "raise llm.max_tool_rounds in settings.json to allow more"
                )
                answers.append(f"{answers[-1]}\n\n({notice})".strip())
                await session.remember(Message("assistant", Kind.ERROR, notice, correlation_id=cid))
            self.outcome.response = build_response(
                answers, thoughts, self.records, self._cited(answers), self.book
            )
            await tell(sink, TurnFinished(self.outcome.response, notice))
        except LLMProblem as problem:
            self.outcome.problem = problem
            session.emit("llm.turn.failed", "warning", correlation_id=cid, error=problem.message)
            await session.remember(
                Message("assistant", Kind.ERROR, problem.message, correlation_id=cid)
            )
            await tell(sink, TurnFailed(problem))
        finally:
            for task in (gap_check, stream):
                if task is not None:
                    await _cancel(task)

    async def _report_gap(self, report: ToolGapReport) -> None:
        report.candidates = await self.session.servers_for(report.missing_tools)
        self.outcome.gap = report
        await self.session.remember(
            Message(
                "assistant",
                Kind.GAP,
                report.summary(),
                data=report.model_dump(),
                correlation_id=self.cid,
            )
        )
        await tell(self.sink, GapFound(report))

    async def _stream_beside(
        self, gap_check: asyncio.Future[ToolGapReport | None], stream: asyncio.Future[Answer]
    ) -> ToolGapReport | Answer:
        """The first answer streams at once, while the gap check runs. A gap is reported,
        not attempted: a gap found first stops the answer (what it said is dropped), and the
        answer's tool calls wait until the check has said there is no gap. A check that
        fails fails the turn, as it would have before the answer."""
        try:
            both: set[asyncio.Future[Any]] = {gap_check, stream}
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            if not gap_check.done() and stream.exception() is None:  # answered; check pending
                await tell(self.sink, Progress("checking which tools this needs"))
            report = await gap_check  # an LLMProblem here fails the turn
            if report is not None:
                self.content.clear()
                self.thinking.clear()
                return report
            return await stream  # so does the stream's own
        finally:
            await _cancel(stream)

    async def cancelled(self) -> None:
        """Stopped by the person: what streamed so far is kept, and the stop is said."""
        session, cid = self.session, self.cid
        content = "".join(self.content)
        if content or self.thinking:
            await session.remember(
                Message(
                    "assistant",
                    Kind.CHAT,
                    content,
                    thinking="".join(self.thinking) or None,
                    correlation_id=cid,
                )
            )
        await session.remember(Message("assistant", Kind.ERROR, "stopped", correlation_id=cid))
        session.emit("llm.turn.cancelled", correlation_id=cid)
        await tell(self.sink, TurnCancelled())

    async def _stream(self) -> Answer:
        """One request to Ollama, streamed. Retried only while nothing has been shown."""
        session, sink = self.session, self.sink
        calls: list[dict[str, Any]] = []
        with_tools, think, notice = await session.request_options()
        if notice is not None:
            await tell(sink, Progress(notice, notice=True))
        if with_tools:
            await session.orchestrator.refresh_withheld()
        tools = offer_confidence(session.orchestrator.ollama_tools()) if with_tools else None

        async def attempt() -> None:
            calls.clear()
            stream = await session.client.chat(
                session.model,
                session.history(self.recalled),
                tools=tools,
                stream=True,
                think=think,
                options=dict(session.conversation_settings.options) or None,
            )
            async for part in stream:
                if part.done and part.prompt_eval_count is not None:
                    # What this request took of the model's context: the prompt and answer.
                    session.context_used = part.prompt_eval_count + (part.eval_count or 0)
                message = part.message
                if message.thinking:
                    self.thinking.append(message.thinking)
                    await tell(sink, Delta("thinking", message.thinking))
                if message.content:
                    self.content.append(message.content)
                    await tell(sink, Delta("content", message.content))
                for tool_call in message.tool_calls or []:
                    arguments = tool_call.function.arguments
                    calls.append(
                        {"name": tool_call.function.name, "arguments": dict(arguments or {})}
                    )

        def describe(exc: BaseException) -> LLMProblem:
            problem = session.llm_problem(exc)
            if self.content or self.thinking:
                problem.transient = False  # trying again would repeat what was shown
            return problem

        try:
            await with_retries(attempt, describe, on_retry=self._retrying)
        except LLMProblem as problem:
            session.heard(problem)
            raise
        session.heard(None)
        return "".join(self.content), "".join(self.thinking), calls

    def _cited(self, answers: list[str]) -> list[Fact]:
        """The facts the answer cites, of those it was given or found with search_memory."""
        known = {f.id: f for f in self.recalled}
        for record in self.records:
            if record.name == "search_memory" and isinstance(record.result, dict):
                for found in record.result.get("results") or []:
                    if isinstance(found, dict) and isinstance(found.get("id"), int):
                        known.setdefault(found["id"], _fact_of(found))
        final = next((a for a in reversed(answers) if a.strip()), "")
        cited = dict.fromkeys(int(n) for n in CITATION.findall(final))
        return [known[i] for i in cited if i in known]

    def _rests_on(self, answers: list[str]) -> dict[str, Any] | None:
        """The facts and web pages the answer cites, as its stored message keeps them."""
        final = next((a for a in reversed(answers) if a.strip()), "")
        facts = [
            FactUsed(id=f.id, content=f.content, created_at=f.created_at).model_dump()
            for f in self._cited(answers)
        ]
        sources = [s.model_dump() for s in self.book.cited_in(final)]
        return {"facts_used": facts, "sources": sources} if facts or sources else None

    async def _retrying(self, number: int, problem: LLMProblem) -> None:
        await tell(
            self.sink, Progress(f"{problem.message} — trying again ({number} of 2)", retry=True)
        )

    async def _detect_gaps(self) -> ToolGapReport | None:
        session = self.session
        await session.orchestrator.refresh_withheld()
        offered = session.orchestrator.model_tools()
        tools = [(d.name, d.description) for d in offered]

        async def attempt() -> str:
            reply = await session.client.chat(
                session.model,
                extraction_messages(self.text, tools),
                format=CAPABILITIES_SCHEMA,
                stream=False,
                options={"temperature": 0},
            )
            return reply.message.content or ""

        answer = await with_retries(attempt, session.llm_problem, on_retry=self._retrying)
        try:
            capabilities = parse_capabilities(answer)
        except MalformedExtraction as exc:
            session.emit("llm.gap_check.malformed", "warning", error=str(exc))
            return None
        return find_gaps(
            self.text,
            capabilities,
            [name for name, _ in tools],
            session.orchestrator.unavailable_tools(),
        )

    def _confidence_of(
        self, name: str, arguments: dict[str, Any]
    ) -> tuple[float | None, dict[str, Any]]:
        """The confidence the model stated for a call, clamped to 0..1 (None when it gave
        none, or nothing a number can be read from), and the call's own arguments without
        it. A tool with a ``confidence`` argument of its own keeps it: the model was not
        offered ours for that tool."""
        definition = self.session.orchestrator.definition(name)
        owned = definition is not None and CONFIDENCE_ARGUMENT in (
            definition.parameters.get("properties") or {}
        )
        if owned or not isinstance(arguments, dict) or CONFIDENCE_ARGUMENT not in arguments:
            return None, arguments
        arguments = dict(arguments)
        stated = arguments.pop(CONFIDENCE_ARGUMENT)
        confidence = clamp_confidence(stated)
        self.session.emit(
            "llm.tool_call.confidence",
            correlation_id=self.cid,
            tool=name,
            stated=str(stated)[:40],
            confidence=confidence,
        )
        return confidence, arguments

    async def _call(self, call: dict[str, Any]) -> ToolCallRecord:
        session, sink, cid = self.session, self.sink, self.cid
        index = len(self.records)
        name, arguments = str(call.get("name") or ""), call.get("arguments") or {}
        confidence, arguments = self._confidence_of(name, arguments)
        shown = redact(arguments)
        await tell(sink, ToolCallStarted(index, name, shown if isinstance(shown, dict) else {}))
        started = session.clock.monotonic()
        proposal_id: str | None = None
        decided: Proposal | None = None
        proposed: float | None = None  # when it began to wait for a person
        ended: list[str] = []
        try:
            result = await session.orchestrator.execute(
                name,
                arguments,
                correlation_id=cid,
                origin="chat",
                confidence=confidence,
                status=ended,
            )
            if result.error_code is ErrorCode.PENDING_APPROVAL:
                proposal_id = str(result.data["proposal_id"])
                proposed = session.clock.monotonic()
                await tell(
                    sink, ApprovalPending(index, await session.approvals.store.get(proposal_id))
                )
                decided = await session.await_decision(proposal_id) if self.wait else None
        except asyncio.CancelledError:
            await session.remember(
                Message(
                    "tool",
                    Kind.CHAT,
                    '{"ok": false, "error": "stopped by the person"}',
                    tool_name=name,
                    correlation_id=cid,
                )
            )
            raise
        # What the screen, the model and the stored conversation get: secrets as ***.
        record = ToolCallRecord(
            name=name,
            arguments=shown if isinstance(shown, dict) else {},
            status=ended[0] if ended else call_status(result),
            result=redact(self.book.number(result.data)) if result.success else None,
            error=redact(result.error),
            error_code=result.error_code.value if result.error_code else None,
            proposal_id=proposal_id,
            # Left waiting: the call's own time, and the person's time apart.
            latency_ms=round(
                ((session.clock.monotonic() if proposed is None else proposed) - started) * 1000,
                1,
            ),
            waited_ms=(
                round((session.clock.monotonic() - proposed) * 1000, 1)
                if proposed is not None and self.wait
                else None
            ),
            confidence=confidence,
        )
        if decided is not None:  # its run's own time; the person's wait apart
            record = decided_record(record, decided, self.book.number)
        await session.remember(
            Message(
                "tool",
                Kind.CHAT,
                tool_message(record),
                tool_name=name,
                data=record.model_dump(),
                correlation_id=cid,
            )
        )
        await tell(sink, ToolCallFinished(index, record))
        return record


async def _cancel(task: asyncio.Future[Any]) -> None:
    """Stop a task of the turn's own and wait until it has stopped; its failure, if it had
    one, was already seen or no longer matters."""
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: it is not "never retrieved"


def _fact_of(found: dict[str, Any]) -> Fact:
    return Fact(
        id=int(found["id"]),
        content=str(found.get("content", "")),
        tags=list(found.get("tags") or []),
        metadata=dict(found.get("metadata") or {}),
        source=found.get("source"),
        created_at=str(found.get("created_at", "")),
    )
