"""The MCP sub-agent: adds, removes, tests and modifies MCP servers in the background.

One asyncio task, owned by the Runtime, takes requests from a FIFO queue one at a time. Whoever
asks gets a request id at once and never waits: every change of a request (queued, progress,
finished) is published on the event bus as ``SubagentChanged``.

Adding or modifying a server first validates the entry with the same rules as mcp-servers.json,
then starts a real, temporary connection to it and lists its tools; only a server that passed is
written to mcp-servers.json, through the config writer, keeping the file's shape and every other
entry as it was. The running MCP manager then applies the file: its watcher does when it runs
(the app), otherwise the sub-agent asks it to reload. A failed or cancelled request leaves the
file exactly as it was; cancelling stops the test connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.mcp_servers import MCPServerConfig, parse_servers
from ..config.settings import ConfigError, config_present, read_json
from ..config.writer import writer_for
from ..events import EventBus, SubagentChanged
from ..models import ErrorCode, ToolResult
from ..system.clock import Clock, SystemClock
from ..system.telemetry import StructuredLog
from .manager import MCPManager
from .servers_document import (
    check_server,
    document_switched,
    document_with,
    document_without,
    written_entry,
)
from .subagent_records import RequestRecords
from .subagent_request import (
    NotCancellable,
    RequestFailed,
    RequestKind,
    RequestPriority,
    RequestState,
    SubagentRequest,
    UnknownRequest,
)

if TYPE_CHECKING:
    from ..usage.cost import CostLedger
    from .connection import ServerConnection

ADMIN_AGENT_ID = "mcp-admin"  # the built-in agent of the sub-agent's model tools
REQUEST_HISTORY = 50  # finished requests remembered for status questions
TEST_BACKOFF = 3600.0  # a test connection makes one attempt; it never waits to retry
STOP_ALLOWANCE = 10.0  # on top of the server's own timeouts, for spawning and stopping it
TOOLS_SHOWN = 5
STDERR_SHOWN = 10  # lines of a failed test server's stderr kept with its request
STDERR_LINE = 300  # characters kept of each


def describe_tools(tools: list[dict[str, str]]) -> str:
    names = [t["name"] for t in tools]
    shown = ", ".join(names[:TOOLS_SHOWN]) + (", …" if len(names) > TOOLS_SHOWN else "")
    count = f"{len(names)} tool{'s' if len(names) != 1 else ''}"
    return f"{count} ({shown})" if names else count


class MCPSubagent:
    """The queue, the worker task and every request it has seen (the latest ones)."""

    def __init__(
        self,
        manager: MCPManager,
        config_file: Path,
        *,
        source: Callable[[], Path] | None = None,
        bus: EventBus | None = None,
        clock: Clock | None = None,
        log: StructuredLog | None = None,
        environ: Mapping[str, str] | None = None,
        history: int = REQUEST_HISTORY,
        cost: CostLedger | None = None,
        records: RequestRecords | None = None,
        request_ids: Callable[[], str] | None = None,
    ) -> None:
        self.manager = manager
        self._cost = cost  # its daily budget spent, queued work waits
        self._pause_note: str | None = None  # why queued work waits, while it does
        self.config_file = config_file  # the user's file: the one written
        # The file in force: the user's, or the shipped default while they have none.
        self._source = source or (lambda: config_file)
        self._bus = bus or manager.bus
        self._clock = clock or SystemClock()
        self._log = log
        self._environ = environ
        self._history = history
        # Ids unique across processes: every process's requests are in one table.
        self._new_id = request_ids or (lambda: f"req-{secrets.token_hex(3)}")
        self.records = records  # every request's state, for every process to see
        self._requests: dict[str, SubagentRequest] = {}
        self._queue: deque[SubagentRequest] = deque()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._current: SubagentRequest | None = None
        self._current_task: asyncio.Task[str] | None = None

    # -- asking, from any task; none of these wait -----------------------------------------

    def submit(
        self,
        kind: RequestKind,
        server: str,
        config: dict[str, Any] | None = None,
        *,
        origin: str = "api",
        priority: RequestPriority = RequestPriority.NORMAL,
        prepare: Callable[[], Awaitable[str]] | None = None,
    ) -> SubagentRequest:
        """Queue a request and return it at once (its ``id`` is what to ask about); it runs
        after every queued request of its priority or a higher one."""
        if kind in (RequestKind.ADD_SERVER, RequestKind.MODIFY_SERVER) and config is None:
            raise ValueError(f"{kind.value} needs the server's config")
        now = self._clock.now()
        request = SubagentRequest(
            id=self._new_id(),
            kind=kind,
            server=server,
            config=dict(config) if config is not None else None,
            created_at=now,
            updated_at=now,
            origin=origin,
            message=self._pause_note or "queued",
            priority=RequestPriority(priority),
            prepare=prepare,
        )
        self._requests[request.id] = request
        self._forget_old()
        after = [i for i, r in enumerate(self._queue) if r.priority.rank <= request.priority.rank]
        self._queue.insert(after[-1] + 1 if after else 0, request)
        self._emit(
            "subagent.queued",
            request=request.id,
            kind=kind.value,
            server=server,
            priority=request.priority.value,
        )
        self._announce(request)
        self._wake.set()
        return request

    def add_server(
        self,
        name: str,
        config: dict[str, Any],
        *,
        origin: str = "api",
        priority: RequestPriority = RequestPriority.NORMAL,
        prepare: Callable[[], Awaitable[str]] | None = None,
    ) -> SubagentRequest:
        """Add a server once it works; ``prepare`` first installs what it runs."""
        return self.submit(
            RequestKind.ADD_SERVER, name, config, origin=origin, priority=priority, prepare=prepare
        )

    def modify_server(
        self, name: str, config: dict[str, Any], *, origin: str = "api"
    ) -> SubagentRequest:
        return self.submit(RequestKind.MODIFY_SERVER, name, config, origin=origin)

    def remove_server(self, name: str, *, origin: str = "api") -> SubagentRequest:
        return self.submit(RequestKind.REMOVE_SERVER, name, origin=origin)

    def test_server(
        self, name: str, config: dict[str, Any] | None = None, *, origin: str = "api"
    ) -> SubagentRequest:
        """Test a configured server (``config`` None) or a config not written anywhere."""
        return self.submit(RequestKind.TEST_SERVER, name, config, origin=origin)

    async def set_enabled(self, name: str, enabled: bool) -> bool:
        """Switch a server on or off in mcp-servers.json, through the config writer (no
        test connection: its entry does not change). Returns whether the file changed.
        Raises RequestFailed naming why nothing was written. The app applies it at once; a
        command leaves it to the app's watcher (it starts no server of its own for this)."""
        changed = False

        def change(current: Any) -> Any:
            nonlocal changed
            updated = document_switched(current, name, enabled=enabled)
            changed = updated != current
            return updated if changed else current

        try:
            await writer_for(self.config_file).update(
                change, self._validate, default=self._default_document
            )
        except ConfigError as exc:
            raise RequestFailed(f"mcp-servers.json not changed: {exc.message}") from None
        if changed:
            self._emit("mcp.server_switched", server=name, enabled=enabled)
            if self.manager.watching:  # the app: now, not at the watcher's next look
                await self.manager.reload()
        return changed

    def written(self, name: str) -> dict[str, Any]:
        """A configured server's entry as written (RequestFailed if there is none)."""
        return written_entry(self._read_document(), name)

    def get(self, request_id: str) -> SubagentRequest:
        request = self._requests.get(request_id.strip())
        if request is None:
            raise UnknownRequest(request_id)
        return request

    def recent(self, limit: int = 10) -> list[SubagentRequest]:
        """The latest requests, newest first."""
        return list(reversed(self._requests.values()))[:limit]

    @property
    def busy(self) -> bool:
        return any(r.open for r in self._requests.values())

    def cancel(self, request_id: str, reason: str | None = None) -> SubagentRequest:
        """Drop a queued request, or interrupt the one in progress (it ends ``cancelled`` once
        its test connection has stopped). Raises UnknownRequest or NotCancellable."""
        request = self.get(request_id)
        why = f" ({reason})" if reason else ""
        if request.state is RequestState.QUEUED:
            with contextlib.suppress(ValueError):
                self._queue.remove(request)
            self._settle(
                request,
                RequestState.CANCELLED,
                f"cancelled before it started{why}; mcp-servers.json unchanged",
            )
        elif request.state is RequestState.IN_PROGRESS:
            if not request.cancellable:
                raise NotCancellable(
                    f"request {request.id} is already writing mcp-servers.json; it ends in a moment"
                )
            if not request.cancel_requested and self._current_task is not None:
                request.cancel_requested = True
                request.message = f"cancelling{why}: stopping the test connection"
                self._touch(request)
                self._current_task.cancel()
        else:
            raise NotCancellable(f"request {request.id} already {request.state.value}")
        return request

    async def wait(self, request_id: str) -> SubagentRequest:
        """Return once the request has completed, failed or been cancelled."""
        request = self.get(request_id)
        await request.done.wait()
        return request

    async def wait_idle(self) -> None:
        """Return once no request is queued or in progress."""
        while waiting := [r for r in self._requests.values() if r.open]:
            await asyncio.gather(*(r.done.wait() for r in waiting))

    # -- the worker ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name="mcp-subagent")

    async def stop(self) -> None:
        """Stop the worker: a request in progress is cancelled (one already writing the file
        is let finish), queued ones are dropped."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        current = self._current
        if current is not None and not current.cancellable:
            await current.done.wait()
        worker.cancel()
        await asyncio.wait([worker])
        while self._queue:
            request = self._queue.popleft()
            self._settle(
                request, RequestState.CANCELLED, "DIANA stopped before it started; file unchanged"
            )

    async def _work(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._cost is not None and self._cost.over_budget() is not None:
                await self._paused(self._cost)
                continue  # the queue may have changed meanwhile (a request cancelled)
            await self._carry_out(self._queue.popleft())

    async def _paused(self, cost: CostLedger) -> None:
        """Today's energy budget is spent: the queued requests wait, and say so, until it
        is raised or a new day begins."""
        why = cost.over_budget()
        said = (
            f"paused: {why}; it resumes when cost.daily_budget in settings.json is raised, "
            "or tomorrow"
        )
        self._pause_note = said
        for request in self._queue:
            request.message = said
            self._touch(request)
        self._emit("subagent.paused", "warning", reason=why, queued=len(self._queue))
        try:
            await cost.within_budget()
        finally:
            self._pause_note = None
        self._emit("subagent.resumed", queued=len(self._queue))
        for request in self._queue:
            request.message = "queued"
            self._touch(request)

    async def _carry_out(self, request: SubagentRequest) -> None:
        started = self._clock.monotonic()
        try:
            await self._carry_out_now(request)
        finally:
            # Its installs and test connections are its work (seed 003's energy).
            if self._cost is not None:
                self._cost.agent_work(ADMIN_AGENT_ID, self._clock.monotonic() - started)

    async def _carry_out_now(self, request: SubagentRequest) -> None:
        self._current = request
        request.state = RequestState.IN_PROGRESS
        request.message = "started"
        self._touch(request)
        # A task of its own, so a cancel interrupts the request and not the worker.
        task = asyncio.create_task(self._perform(request), name=f"mcp-subagent-{request.id}")
        self._current_task = task
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait([task])
            self._finish(request, task, "DIANA stopped before it finished")
            raise
        finally:
            self._current = None
            self._current_task = None
        self._finish(request, task, "cancelled")

    def _finish(self, request: SubagentRequest, task: asyncio.Task[str], cancelled: str) -> None:
        if task.cancelled():
            self._settle(
                request, RequestState.CANCELLED, f"{cancelled}; mcp-servers.json unchanged"
            )
            return
        failure = task.exception()
        if failure is None:
            self._settle(request, RequestState.COMPLETED, task.result())
        elif isinstance(failure, RequestFailed):
            self._settle(request, RequestState.FAILED, str(failure))
        else:
            self._settle(request, RequestState.FAILED, f"{type(failure).__name__}: {failure}")

    async def _perform(self, request: SubagentRequest) -> str:
        if request.kind is RequestKind.REMOVE_SERVER:
            return await self._remove(request)
        if request.kind is RequestKind.TEST_SERVER:
            return await self._test(request)
        return await self._add_or_modify(request, modify=request.kind is RequestKind.MODIFY_SERVER)

    async def _add_or_modify(self, request: SubagentRequest, *, modify: bool) -> str:
        name, entry = request.server, dict(request.config or {})
        entry.pop("name", None)
        self._progress(request, 5, "checking the config")
        config = self._checked(name, entry)
        # The whole file with the change, checked now: a name clash fails before any test.
        self._check_document(document_with(self._read_document(), name, entry, replace=modify))
        if request.prepare is not None:
            self._progress(request, 8, "installing it (once; this can take a minute)")
            try:
                entry["command"] = await request.prepare()
            except Exception as exc:
                raise RequestFailed(f"could not install it: {exc}") from None
            request.config = dict(entry)
            config = self._checked(name, entry)
        tools = await self._try_connection(request, config)
        await self._write(
            request, lambda current: document_with(current, name, entry, replace=modify)
        )
        return f"{'modified' if modify else 'added'} {name}: {describe_tools(tools)}"

    async def _test(self, request: SubagentRequest) -> str:
        self._progress(request, 5, "checking the config")
        if request.config is not None:
            config = self._checked(request.server, request.config)
        else:
            config = self._configured(request.server)
        tools = await self._try_connection(request, config)
        return f"{request.server} works: {describe_tools(tools)}"

    async def _remove(self, request: SubagentRequest) -> str:
        name = request.server
        self._progress(request, 10, "checking mcp-servers.json")
        self._check_document(document_without(self._read_document(), name))
        await self._write(request, lambda current: document_without(current, name))
        return f"removed {name}"

    # -- steps ----------------------------------------------------------------------------------

    def _checked(self, name: str, config: Any) -> MCPServerConfig:
        try:
            return check_server(name, config, self.config_file, self._environ)
        except ConfigError as exc:
            raise RequestFailed(f"bad config: {exc.message}") from None

    def _configured(self, name: str) -> MCPServerConfig:
        document = self._read_document()
        try:
            servers = parse_servers(document, self.config_file, self._environ)
        except ConfigError as exc:
            raise RequestFailed(f"mcp-servers.json cannot be used: {exc.message}") from None
        found = next((s for s in servers if s.name == name), None)
        if found is None:
            raise RequestFailed(f'mcp-servers.json has no server named "{name}"')
        return found

    def _read_document(self) -> Any:
        try:
            return self._default_document()
        except ConfigError as exc:
            raise RequestFailed(f"mcp-servers.json cannot be read: {exc.message}") from None

    def _default_document(self) -> Any:
        """The file in force as JSON; a file of the user's own starts from it."""
        path = self._source()
        return read_json(path) if config_present(path) else {"mcpServers": {}}

    def _check_document(self, document: Any) -> None:
        try:
            self._validate(document, self.config_file)
        except ConfigError as exc:
            raise RequestFailed(f"mcp-servers.json would not be valid: {exc.message}") from None

    def _validate(self, document: Any, path: Path) -> None:
        parse_servers(document, path, self._environ)

    async def _try_connection(
        self, request: SubagentRequest, config: MCPServerConfig
    ) -> list[dict[str, str]]:
        """Connect for real, list the tools, disconnect. Raises RequestFailed with the reason."""
        where = config.display_url if config.url else config.display_command
        self._progress(request, 10, f"starting a test connection to {where}")
        from .connection import ServerConnection  # the MCP SDK, once a server is tried

        connection = ServerConnection(
            config,
            clock=self._clock,
            on_change=lambda c: self._connection_progress(request, c),
            backoff_start=TEST_BACKOFF,
            # Declared as diana's own connection declares it: a server may offer some tools
            # only to a client that lets it ask the model, so the test lists what diana gets.
            on_sample=_no_sampling_in_a_test,
        )
        connection.start()
        try:
            try:
                # The connection bounds the handshake and the listing by config.timeout each.
                async with asyncio.timeout(2 * config.timeout + STOP_ALLOWANCE):
                    await connection.wait_first_attempt()
            except TimeoutError:
                raise RequestFailed(
                    f"the test connection did not finish within {2 * config.timeout:g} s"
                ) from None
            if not connection.ready:
                reason = connection.state.last_error or connection.state.status.value
                lines = [line.rstrip() for line in connection.state.stderr if line.strip()]
                request.stderr_tail = [line[:STDERR_LINE] for line in lines[-STDERR_SHOWN:]]
                raise RequestFailed(f"the test connection failed: {reason}")
            tools = [
                {"name": t.name, "description": (t.description or "").strip()}
                for t in connection.state.tools
            ]
        finally:
            await connection.stop()
        request.tools = tools
        self._progress(request, 85, f"test passed: {describe_tools(tools)}")
        return tools

    def _connection_progress(self, request: SubagentRequest, connection: ServerConnection) -> None:
        if request.state is not RequestState.IN_PROGRESS or request.cancel_requested:
            return
        status, pid = connection.state.status, connection.state.pid
        if status == "connecting":
            started = f"server started (pid {pid}); " if pid else ""
            self._progress(request, 30 if pid else 20, f"{started}waiting for the MCP handshake")
        elif status == "connected":
            self._progress(request, 55, "handshake done; listing its tools")
        elif status == "ready":
            self._progress(request, 80, "tools listed; stopping the test connection")

    async def _write(self, request: SubagentRequest, change: Callable[[Any], Any]) -> None:
        request.cancellable = False  # from here on the file may change: see it through
        self._progress(request, 90, f"writing {self.config_file.name}")
        try:
            await writer_for(self.config_file).update(
                change, self._validate, default=self._default_document
            )
        except ConfigError as exc:
            raise RequestFailed(f"mcp-servers.json not changed: {exc.message}") from None
        self._emit("subagent.config_written", request=request.id, server=request.server)
        if not self.manager.watching:  # no watcher in this process would notice the file
            self._progress(request, 95, "applying mcp-servers.json")
            await self.manager.reload()

    # -- bookkeeping -------------------------------------------------------------------------

    def _progress(self, request: SubagentRequest, progress: int, message: str) -> None:
        request.progress = max(request.progress, progress)
        request.message = message
        self._touch(request)

    def _settle(self, request: SubagentRequest, state: RequestState, message: str) -> None:
        if not request.open:
            return
        request.state = state
        request.message = message
        if state is RequestState.COMPLETED:
            request.progress = 100
        self._touch(request)
        request.done.set()
        level = "info" if state is RequestState.COMPLETED else "warning"
        self._emit(
            "subagent.finished",
            level,
            request=request.id,
            kind=request.kind.value,
            server=request.server,
            state=state.value,
            message=message,
        )

    def _touch(self, request: SubagentRequest) -> None:
        request.updated_at = self._clock.now()
        self._announce(request)

    def _announce(self, request: SubagentRequest) -> None:
        if self.records is not None:
            self.records.note(request.public())
        self._bus.publish(
            SubagentChanged(
                request.id,
                request.kind.value,
                request.server,
                request.state.value,
                request.progress,
                request.message,
            )
        )

    def _forget_old(self) -> None:
        finished = [k for k, r in self._requests.items() if not r.open]
        for key in finished[: max(0, len(self._requests) - self._history)]:
            del self._requests[key]

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)


async def _no_sampling_in_a_test(_request: dict[str, Any]) -> ToolResult:
    """A test connection calls no tool, so nothing should ask it to sample; if a server
    does, it is refused."""
    return ToolResult.fail(
        ErrorCode.AGENT_UNAVAILABLE, "a test connection does not ask the model anything"
    )
