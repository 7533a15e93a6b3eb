"""Approvals: the gate in front of every call, and the one way a proposal is decided."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..calls.gate import GateRequest
from ..config.watch import stop_task
from ..events import EventBus, Notice, ProposalsChanged
from ..models import ErrorCode, RiskLevel, ToolDefinition, ToolResult
from ..storage.call_record import CallRecord
from ..system.clock import Clock
from ..system.telemetry import StructuredLog
from .policy import Policy, Rule, RuleMatch, program_changed
from .proposal import OPEN, SETTLED, Proposal, ProposalStatus, make_again
from .proposal_store import ProposalStore
from .risk import APPROVAL_CONFIDENCE, categorize_action_risk, requires_approval

if TYPE_CHECKING:
    from ..calls.orchestrator import Orchestrator
    from ..usage.cost import CostLedger

POLL_INTERVAL = 0.5  # proposals made or decided by another process show within a second
# At close, how long the records of calls that ran may still take to land (seconds).
RECORD_WAIT = 30.0
STOPPED_RUNNING = "diana stopped while the call was running: whether it had its effect is not known"
STOPPED_BEFORE = "diana stopped before the call ran"
# The MCP server and program of the proposal whose approved call runs in this task: the gate
# checks it again when the call runs (a server re-pointed between approval and run).
APPROVED_PROGRAM: ContextVar[tuple[str, str] | None] = ContextVar("approved_program", default=None)


@dataclass(frozen=True)
class Decision:
    proposal: Proposal
    result: ToolResult | None  # the call's result when approved


def _denial(definition: ToolDefinition, match: RuleMatch | None) -> ToolResult | None:
    if match is None or match.rule is not Rule.DENY:
        return None
    return ToolResult.fail(
        ErrorCode.DENIED_BY_POLICY, f"{definition.name} is denied by policy ({match.source})"
    )


def confidence_words(confidence: float | None) -> str:
    """Why a call that can be undone later waits: the model was not sure enough of it."""
    if confidence is None:
        return f"no confidence was stated (below {APPROVAL_CONFIDENCE:g} waits)"
    return f"the model's confidence {round(confidence, 2):g} is below {APPROVAL_CONFIDENCE:g}"


def shown_path(path: Path) -> str:
    """A path as a person reads it: under the home folder as ~/..."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


def server_of(definition: ToolDefinition) -> str | None:
    category = definition.category or ""
    return category.removeprefix("mcp:") if category.startswith("mcp:") else None


def result_of(proposal: Proposal) -> tuple[ToolResult, str]:
    """What a decided proposal means to whoever waited for it: the result, and the status of
    the call as a chat turn records it."""
    if proposal.status is ProposalStatus.SUCCEEDED:
        return ToolResult.ok(proposal.result), "succeeded"
    if proposal.status is ProposalStatus.REJECTED:
        reason = f": {proposal.reject_reason}" if proposal.reject_reason else ""
        return (
            ToolResult.fail(
                ErrorCode.REJECTED,
                f"the person rejected this call (proposal {proposal.id}){reason}",
            ),
            "rejected",
        )
    code = (
        ErrorCode(proposal.error_code) if proposal.error_code else ErrorCode.TOOL_EXECUTION_FAILED
    )
    return ToolResult.fail(code, proposal.error or f"proposal {proposal.id} {proposal.status}"), (
        "failed"
    )


class Approvals:
    def __init__(
        self,
        store: ProposalStore,
        orchestrator: Orchestrator | None,
        policy: Policy,
        *,
        clock: Clock,
        bus: EventBus,
        log: StructuredLog | None = None,
        cost: CostLedger | None = None,
        ask_every_mcp_tool: str | None = None,
        identity_of: Callable[[str], str | None] | None = None,
        hosts_paused: Callable[[], str | None] | None = None,
    ) -> None:
        """``orchestrator``: what runs an approved call (None: a runtime that only reads
        and rejects proposals; approving one there is a programming error). The
        orchestrator is given ``gate`` by whoever builds both (core/builders.py).
        ``hosts_paused``: why every call from a host waits for a person now, or None
        (core/approvals/hosts_pause.py)."""
        self.store = store
        # What says every MCP tool call asks a person (the policy's allow still lets one
        # run unasked), or None.
        self.ask_every_mcp_tool = ask_every_mcp_tool
        self._orchestrator = orchestrator
        self.policy = policy
        self.cost = cost  # over its daily budget, calls that are not reversible wait
        self._clock = clock
        self._bus = bus
        self._log = log
        # The launch identity of the program an MCP server runs now (None: not configured),
        # from the MCP manager. Rules and proposals are bound to it.
        self.identity_of: Callable[[str], str | None] = identity_of or (lambda _server: None)
        self.hosts_paused: Callable[[], str | None] = hosts_paused or (lambda: None)
        self._waiters: dict[str, list[asyncio.Future[Proposal]]] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._recording: set[asyncio.Task[Proposal]] = set()

    @property
    def orchestrator(self) -> Orchestrator:
        """What runs approved calls; only a runtime with agents has one."""
        if self._orchestrator is None:
            raise RuntimeError("these approvals run no call: opened without the agents")
        return self._orchestrator

    async def start(self, *, watch: bool) -> list[str]:
        """Mark proposals orphaned by a dead process as interrupted; optionally watch the
        database for proposals made or decided elsewhere."""
        orphans = await self.store.mark_interrupted(self._clock.now())
        for proposal_id in orphans:
            self._emit("proposal.interrupted", proposal=proposal_id)
        if watch:
            self._watcher = asyncio.create_task(self._watch(), name="proposals-watch")
        return orphans

    @property
    def watching(self) -> bool:
        """Whether it watches the database for proposals made or decided elsewhere."""
        return self._watcher is not None

    async def close(self) -> None:
        """Stop watching; wait for the records of calls that ran to land, then close."""
        await stop_task(self._watcher)
        self._watcher = None
        for futures in self._waiters.values():
            for future in futures:
                future.cancel()
        if self._recording:
            _done, unrecorded = await asyncio.wait(self._recording, timeout=RECORD_WAIT)
            for task in unrecorded:
                task.cancel()
                self._emit("proposal.unrecorded", level="error", task=task.get_name())
        await self.store.close()

    # -- what front ends read ------------------------------------------------------------

    async def get(self, proposal_id: str) -> Proposal:
        """The proposal as it is now (UnknownProposal if there is none)."""
        return await self.store.get(proposal_id)

    async def select(
        self, statuses: tuple[ProposalStatus, ...] | None = OPEN, limit: int | None = None
    ) -> list[Proposal]:
        """Proposals newest first: the open ones, those of ``statuses``, or all (None)."""
        return await self.store.select(statuses, limit)

    async def find(
        self,
        correlation_id: str,
        tool: str,
        *,
        proposal_id: str | None = None,
        during: tuple[str, str] | None = None,
    ) -> Proposal | None:
        """The proposal behind a logged call of ``tool`` (see ProposalStore.find)."""
        return await self.store.find(correlation_id, tool, proposal_id=proposal_id, during=during)

    async def gate(self, request: GateRequest) -> ToolResult | None:
        """None lets the call run; otherwise the result the caller gets instead. Every call
        comes here, an approved one too: a deny in the policy now stops it."""
        from ..calls.sampling_call import asks_sampling, sampling_reason
        from .hosts_pause import is_host

        definition = request.definition
        server = server_of(definition)
        identity = self.identity_of(server) if server is not None else None
        match = self._rule(definition, request.agent, request.arguments, identity)
        denied = _denial(definition, match)
        if denied is not None or request.approved:
            return denied or self._moved_since_approval(definition, server, identity)
        # Hosts paused (the kill switch): a host's call waits for a person, whatever else.
        paused = self.hosts_paused() if is_host(request.origin) else None
        if paused is not None:
            assessment = categorize_action_risk(definition.name, request.arguments, definition)
            return await self._propose(
                request, assessment.level, f"{paused}; {assessment.reason}", identity
            )
        # Over the daily budget only reversible calls run unasked, whatever the policy says.
        over_budget = None if self.cost is None else self.cost.over_budget()
        if over_budget is not None:
            assessment = categorize_action_risk(definition.name, request.arguments, definition)
            if assessment.level is not RiskLevel.REVERSIBLE:
                return await self._propose(
                    request, assessment.level, f"{over_budget}; {assessment.reason}"
                )
        if match is not None and match.rule is Rule.ALLOW and not definition.always_ask:
            if server is not None and identity is not None:
                await self._bind_on_first_use(definition.name, server, identity)
            return None
        assessment = categorize_action_risk(definition.name, request.arguments, definition)
        asked = match is not None and match.rule is Rule.ASK
        if not asked and not requires_approval(assessment.level, request.confidence):
            return None
        reason = assessment.reason
        if not asked and assessment.level is RiskLevel.REVERSIBLE_WITH_DELAY:
            reason = f"{reason}; {confidence_words(request.confidence)}"
        if asks_sampling(definition.name, request.arguments) is not None:
            reason = sampling_reason(request.arguments)
        if asked:
            reason = f"policy asks ({match.source}); {reason}" if match else reason
        set_aside = self.policy.set_aside(definition.name, server, request.agent, identity)
        if set_aside is not None:
            reason = f"{set_aside}; {reason}"
        return await self._propose(request, assessment.level, reason, identity)

    def _moved_since_approval(
        self, definition: ToolDefinition, server: str | None, identity: str | None
    ) -> ToolResult | None:
        """An approved call whose server was re-pointed after ``approve`` checked it: not run."""
        approved = APPROVED_PROGRAM.get()
        if approved is None or server is None or approved == (server, identity):
            return None
        return ToolResult.fail(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{definition.name} was not run: "
            f"{program_changed(approved[0], 'the call was proposed')}",
        )

    async def _bind_on_first_use(self, tool: str, server: str, identity: str) -> None:
        """A rule written for ``server`` before diana recorded programs is bound now to the
        one it runs (the program that rule has been allowing), and the person is told."""
        if not self.policy.unbound(tool, server):
            return
        try:
            bound = await self.policy.bind_identity(tool, server, identity)
        except Exception as exc:  # the rule keeps working as it did; said in the log
            self._emit("policy.bind_failed", level="warning", tool=tool, error=str(exc))
            return
        if bound:
            self._emit("policy.rule_bound", tool=tool, server=server, identity=identity)
            self._bus.publish(
                Notice(
                    "information",
                    f"{tool}: the policy's allow, written for MCP server {server}, is bound "
                    f"from now on to the program {server} runs now — should {server} run "
                    f"another, diana asks first (written to {shown_path(self.policy.user_file)})",
                )
            )

    def _rule(
        self,
        definition: ToolDefinition,
        agent: str | None,
        arguments: dict[str, Any],
        identity: str | None = None,
    ) -> RuleMatch | None:
        """The policy's rule for this call: a sampling request's is its server's sampling
        rule (a tool rule for mcp_sampling counts for every server)."""
        from ..calls.sampling_call import asks_sampling

        server = asks_sampling(definition.name, arguments)
        if server is not None:
            return self.policy.sampling_rule(server)
        server = server_of(definition)
        match = self.policy.rule_for(definition.name, server, agent, identity)
        if match is None and server is not None and self.ask_every_mcp_tool is not None:
            return RuleMatch(Rule.ASK, self.ask_every_mcp_tool)
        return match

    async def _propose(
        self, request: GateRequest, risk: RiskLevel, reason: str, identity: str | None = None
    ) -> ToolResult:
        """Hold the call as a proposal for a person to decide, bound to the program its MCP
        server runs now (``identity``), if it is a server's tool."""
        definition = request.definition
        proposal = await self.store.create(
            tool=definition.name,
            agent=request.agent,
            arguments=request.arguments,
            risk=risk.value,
            reason=reason,
            confidence=request.confidence,
            correlation_id=request.correlation_id,
            origin=request.origin,
            at=self._clock.now(),
            server_identity=identity,
        )
        self._emit("proposal.created", proposal=proposal.id, tool=proposal.tool, risk=proposal.risk)
        self._bus.publish(ProposalsChanged(proposal.id, proposal.status.value, proposal))
        return ToolResult.fail(
            ErrorCode.PENDING_APPROVAL,
            f"{definition.name} needs approval: proposal {proposal.id} ({reason})",
            data={"proposal_id": proposal.id},
        )

    async def approve(self, proposal_id: str, *, by: str, seen: str | None = None) -> Decision:
        """Approve and run the stored call, once. Raises UnknownProposal, AlreadyDecided,
        DamagedProposal or ProposalChanged (``seen``: the digest of the proposal as the
        person was shown it). A call the policy denies now is rejected instead, its result
        saying why. How the call ended is recorded even if this task is cancelled."""
        pending = await self.store.get(proposal_id)
        definition = self.orchestrator.definition(pending.tool)
        if definition is not None and pending.status is ProposalStatus.PENDING:
            server = server_of(definition)
            identity = self.identity_of(server) if server is not None else None
            match = self._rule(definition, pending.agent, pending.arguments, identity)
            denied = _denial(definition, match)
            if denied is not None:
                rejected = await self.reject(proposal_id, by=by, reason=denied.error)
                return Decision(rejected.proposal, denied)
        proposal = await self.store.approve(
            proposal_id, by=by, at=self._clock.now(), seen=seen, moved=self._moved
        )
        self._emit("proposal.approved", proposal=proposal.id, by=by)
        self._bus.publish(ProposalsChanged(proposal.id, proposal.status.value, proposal))
        ran = False
        run: list[CallRecord] = []
        server = self._server_of_proposal(proposal)
        program = None
        if server is not None and proposal.server_identity is not None:
            program = APPROVED_PROGRAM.set((server, proposal.server_identity))
        try:
            await self.store.mark_executing(proposal.id, self._clock.now())
            ran = True
            result = await self.orchestrator.execute(
                proposal.tool,
                proposal.arguments,
                correlation_id=proposal.correlation_id,
                origin=f"proposal {proposal.id}",
                approved=proposal.id,
                approved_agent=proposal.agent,
                record=run,
            )
        except asyncio.CancelledError:
            why = STOPPED_RUNNING if ran else STOPPED_BEFORE
            await self._record(self.store.interrupt(proposal.id, self._clock.now(), why))
            raise
        finally:
            if program is not None:
                APPROVED_PROGRAM.reset(program)
        finished = await self._record(
            self.store.finish(proposal.id, result, self._clock.now(), run[0] if run else None)
        )
        self._emit("proposal.finished", proposal=proposal.id, status=finished.status.value)
        self._settled(finished)
        return Decision(finished, result)

    def _server_of_proposal(self, proposal: Proposal) -> str | None:
        """The MCP server whose tool the proposal's call is (its agent's), or None."""
        agent = proposal.agent or None
        return self.orchestrator.server_of_agent(agent) if agent else None

    def _moved(self, proposal: Proposal) -> str | None:
        """Why a pending proposal can no longer run: the MCP server it was made for runs
        another program now (renamed, edited, re-pointed), or is gone. None if it may run."""
        if proposal.server_identity is None:  # diana's own tool, or proposed before it knew
            return None
        server = self._server_of_proposal(proposal)
        if server is None:
            return (
                f"the MCP server it was proposed for (agent {proposal.agent}) is no longer "
                f"running under that name (removed, renamed or switched off): not run; "
                f"{make_again(proposal)}"
            )
        if self.identity_of(server) == proposal.server_identity:
            return None
        changed = program_changed(server, "the call was proposed")
        return f"{changed}: not run; {make_again(proposal)}"

    async def _record(self, write: Coroutine[Any, Any, Proposal]) -> Proposal:
        """Write how an approved call ended in a task of its own: cancelling the caller does
        not stop it, and ``close`` waits for it."""
        task = asyncio.create_task(write, name="proposal-record")
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)
        return await asyncio.shield(task)

    async def reject(self, proposal_id: str, *, by: str, reason: str | None = None) -> Decision:
        proposal = await self.store.reject(proposal_id, by=by, at=self._clock.now(), reason=reason)
        self._emit("proposal.rejected", proposal=proposal.id, by=by)
        self._settled(proposal)
        return Decision(proposal, None)

    async def withdraw(self, proposal_id: str, why: str) -> Decision:
        """Take back a pending proposal no one waits for any more: withdrawn, never run
        (AlreadyDecided if a person decided it first)."""
        proposal = await self.store.withdraw(proposal_id, at=self._clock.now(), why=why)
        self._emit("proposal.withdrawn", proposal=proposal.id, why=why)
        self._settled(proposal)
        return Decision(proposal, None)

    async def always(
        self, proposal_id: str, rule: Rule, *, by: str, seen: str | None = None
    ) -> Decision:
        """Decide this proposal and remember the answer for its tool from now on: the rule is
        bound to the tool the proposal was made for (its MCP server's, or diana's own
        agent's), and what was written, where, is told (a notice)."""
        from ..calls.sampling_call import asks_sampling

        proposal = await self.store.get(proposal_id)
        server = asks_sampling(proposal.tool, proposal.arguments)
        if server is not None:  # this server's sampling, not every server's
            await self.policy.set_sampling_rule(server, rule)
            self._emit("policy.rule_written", sampling=server, rule=rule.value, by=by)
            denied = f"sampling for MCP server {server} is always denied"
            what = f"MCP server {server} asking the local model"
        else:
            agent = proposal.agent or None
            owner = self.orchestrator.server_of_agent(agent) if agent else None
            agent = agent if owner is None else None
            # Bound to the program the person was shown the call for, not whatever runs now.
            identity = proposal.server_identity
            if owner is not None and identity is None:
                identity = self.identity_of(owner)
            await self.policy.set_tool_rule(
                proposal.tool, rule, server=owner, agent=agent, identity=identity
            )
            self._emit(
                "policy.rule_written",
                tool=proposal.tool,
                rule=rule.value,
                server=owner,
                agent=agent,
                by=by,
            )
            denied = f"{proposal.tool} is always denied"
            what = proposal.tool if owner is None else f"{proposal.tool} (MCP server {owner})"
        always = "always allowed" if rule is Rule.ALLOW else "always denied"
        self._bus.publish(
            Notice(
                "information",
                f"{what}: {always} from now on — written to {shown_path(self.policy.user_file)}"
                " (p in Approvals shows the policy)",
            )
        )
        if rule is Rule.ALLOW:
            return await self.approve(proposal_id, by=by, seen=seen)
        return await self.reject(proposal_id, by=by, reason=denied)

    async def wait(self, proposal_id: str) -> Proposal:
        """Resolve when a person decides the proposal, here or in another process."""
        # Listen first, then look: a decision made between the two is never missed.
        future: asyncio.Future[Proposal] = asyncio.get_running_loop().create_future()
        key = proposal_id.strip().lower()
        self._waiters.setdefault(key, []).append(future)
        try:
            proposal = await self.store.get(key)
            while proposal.status not in SETTLED:
                if self._watcher is not None:  # it hears of decisions made anywhere
                    return await future
                # No watcher (a command): look again now and then for one made elsewhere.
                done, _ = await asyncio.wait({future}, timeout=POLL_INTERVAL)
                if done:
                    return future.result()
                proposal = await self.store.get(key)
            return proposal
        finally:
            waiting = self._waiters.get(key, [])
            if future in waiting:
                waiting.remove(future)
                if not waiting:
                    del self._waiters[key]

    def _settled(self, proposal: Proposal) -> None:
        self._bus.publish(ProposalsChanged(proposal.id, proposal.status.value, proposal))
        for future in self._waiters.pop(proposal.id, []):
            if not future.done():
                future.set_result(proposal)

    async def _watch(self) -> None:
        """Until closed, whatever the database does: one failed look is logged and the next
        one tries again, so the panes never stop hearing of other processes."""
        while True:
            try:
                # The policy too: a file that changes (or breaks) is told now, not at a call.
                self.policy.reload()
                if await self.store.changed_elsewhere():
                    self._bus.publish(ProposalsChanged(None, None))
                    for proposal_id in list(self._waiters):
                        proposal = await self.store.get(proposal_id)
                        if proposal.status in SETTLED:
                            self._settled(proposal)
            except Exception as exc:
                self._emit("proposals.watch_failed", level="warning", error=str(exc))
            await asyncio.sleep(POLL_INTERVAL)

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)
