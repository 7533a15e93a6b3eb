"""The Runtime: one object, built from config, that owns the whole core."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite

from .approvals.policy import POLICY_FILE, Policy, load_policy
from .approvals.service import Approvals
from .approvals.store import ProposalStore
from .clock import Clock, SystemClock
from .config import Paths, Settings, load_settings
from .events import EventBus, Notice
from .llm.conversation import ConversationStore
from .llm.session import ChatSession
from .mcp.config import MCP_SERVERS_FILE, load_servers
from .mcp.connection import BACKOFF_START
from .mcp.manager import MCPManager
from .orchestrator import Orchestrator
from .store import ExecutionLog, FactStore, StorageError, connect, recent_calls
from .telemetry import StructuredLog, new_correlation_id
from .tools.builtin import builtin_factories
from .tools.human import HumanInput, human_agent


@dataclass
class Runtime:
    paths: Paths
    settings: Settings
    clock: Clock
    bus: EventBus
    db: aiosqlite.Connection
    log: StructuredLog
    execution_log: ExecutionLog
    orchestrator: Orchestrator
    facts: FactStore
    mcp: MCPManager
    approvals: Approvals
    chat: ChatSession
    human: HumanInput

    @classmethod
    async def open(
        cls,
        config_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        *,
        clock: Clock | None = None,
        new_id: Callable[[], str] = new_correlation_id,
        mcp: bool = True,
        watch_config: bool = False,
        mcp_backoff_start: float = BACKOFF_START,
        proposal_ids: Callable[[], str] | None = None,
    ) -> Runtime:
        """Read config (raises ConfigError before anything is written), open the database,
        start the built-in agents and begin connecting the MCP servers (in the background:
        ``runtime.mcp.wait_ready()`` waits for their first attempts)."""
        paths = Paths.resolve(config_dir, data_dir)
        settings = load_settings(paths)
        servers = load_servers(paths.config_file(MCP_SERVERS_FILE)) if mcp else []
        load_policy(paths.config_file(POLICY_FILE))
        clock = clock or SystemClock()
        db = await connect(paths.database)
        try:
            log = StructuredLog(paths.log_file, clock)
        except OSError as exc:
            await db.close()
            raise StorageError(f"cannot write the log {paths.log_file}: {exc.strerror}") from None
        execution_log = ExecutionLog(db, log)
        execution_log.start()
        bus = EventBus()
        orchestrator = Orchestrator(
            bus=bus,
            log=log,
            execution_log=execution_log,
            clock=clock,
            default_timeout=settings.tools.default_timeout,
            tool_timeouts=settings.tools.timeouts,
            new_id=new_id,
        )
        facts = FactStore(db)
        for name, factory in builtin_factories(settings, facts, clock).items():
            orchestrator.register_agent_factory(name, factory)
        human = HumanInput()
        orchestrator.register_agent_factory("human", lambda: human_agent(human, clock))
        manager = MCPManager(
            orchestrator,
            lambda: paths.config_file(MCP_SERVERS_FILE),
            log=log,
            clock=clock,
            backoff_start=mcp_backoff_start,
        )
        policy = Policy(
            lambda: paths.config_file(POLICY_FILE),
            paths.config_dir / POLICY_FILE,
            on_error=lambda exc: bus.publish(Notice("error", f"policy.json not applied: {exc}")),
        )
        approvals = Approvals(
            await ProposalStore.open(paths.database, proposal_ids),
            orchestrator,
            policy,
            clock=clock,
            bus=bus,
            log=log,
        )
        chat = ChatSession(
            settings=settings.llm,
            orchestrator=orchestrator,
            approvals=approvals,
            conversations=ConversationStore(db),
            clock=clock,
            new_id=new_id,
            log=log,
        )
        runtime = cls(
            paths,
            settings,
            clock,
            bus,
            db,
            log,
            execution_log,
            orchestrator,
            facts,
            manager,
            approvals,
            chat,
            human,
        )
        log.emit("runtime.started", config_dir=str(paths.config_dir), data_dir=str(paths.data_dir))
        await orchestrator.start_all()
        await approvals.start(watch=watch_config)
        await manager.start(servers, watch=watch_config)
        return runtime

    async def recent_calls(self, limit: int = 50) -> list[dict[str, Any]]:
        await self.execution_log.flush()
        return await recent_calls(self.db, limit)

    async def close(self) -> None:
        await self.chat.close()
        await self.orchestrator.shutdown()
        await self.mcp.close()
        await self.approvals.close()
        await self.execution_log.close()
        self.log.emit("runtime.stopped")
        self.log.close()
        await self.db.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
