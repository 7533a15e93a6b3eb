"""One MCP server: a long-lived task that owns its SDK client, with reconnect and diagnostics.

The SDK's client, session and transport own anyio task groups that must be entered and exited
in the same task, so each server gets one task (``_own``) that connects, discovers tools,
watches the connection and reconnects with backoff. Other tasks only *use* the live client
(calls and probes are safe from any task) and talk to the owner through events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import warnings
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client._transport import TransportStreams
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.session import ClientRequestContext
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning

from ..clock import Clock, SystemClock
from ..elicitation import Answer, Elicitation, UnshowableRequest, fields_of
from ..models import ErrorCode, ToolResult
from ..sampling import SamplingRefused
from ..telemetry import SECRET_VALUES, StructuredLog
from .config import (
    BACKOFF_MAX,
    BACKOFF_START,
    HEALTH_INTERVAL,
    PROBE_TIMEOUT,
    MCPServerConfig,
)
from .oauth import SIGN_IN_TIME, SignInFailed, SignInNeeded
from .stdio import ProcessExit, ProcessWatch, shown_line, stdio_transport

T = TypeVar("T")

STDERR_LINES = 200
LOG_KEPT = 500  # the server's own log messages kept (notifications/message)
LOG_TEXT_LIMIT = 2000  # characters of one message kept
MAX_TOOL_PAGES = 100
CLIENT_NAME = "diana"
# tools/list_changed: tools are listed again at most once per this many seconds, however
# often a server announces a change (the announcements meanwhile fold into one re-list).
RELIST_INTERVAL = 1.0
TASKS_PROTOCOL = "2025-11-25"  # the protocol with task-augmented requests
# Seconds between two tasks/get of a task: the server's pollInterval, kept within these bounds
# whatever it says (none, zero, negative, not a number: the default).
TASK_POLL_DEFAULT = 0.5
TASK_POLL_MIN = 0.1
TASK_POLL_MAX = 30.0
TASK_STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
TASK_ENDED = ("completed", "failed", "cancelled")
# Announcements between two re-lists that make a flood, and how often one is told in the log.
FLOOD_ANNOUNCEMENTS = 20
FLOOD_WARNING_INTERVAL = 60.0


class ServerStatus(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    READY = "ready"
    ERROR = "error"


@dataclass(frozen=True)
class ServerLog:
    """One message the server logged to diana (notifications/message)."""

    at: datetime
    level: str
    logger: str | None
    text: str

    def public(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "level": self.level,
            "logger": self.logger,
            "text": self.text,
        }


@dataclass
class ServerState:
    """Everything known about one server, for status lines and the detail view."""

    status: ServerStatus = ServerStatus.DISCONNECTED
    tools: list[types.Tool] = field(default_factory=list)
    tools_listed_at: datetime | None = None  # when ``tools`` was last listed
    last_error: str | None = None
    last_error_at: datetime | None = None
    pid: int | None = None
    exit: ProcessExit | None = None
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_LINES))
    logs: deque[ServerLog] = field(default_factory=lambda: deque(maxlen=LOG_KEPT))
    connect_latency_ms: float | None = None
    protocol_version: str | None = None
    calls: int = 0
    errors: int = 0
    attempts: int = 0
    next_retry_at: float | None = None  # time.monotonic() of the next automatic attempt
    retry_delay: float | None = None  # the backoff chosen for that attempt, in seconds
    last_attempt_ok: bool | None = None  # how the latest finished attempt ended
    # OAuth: the server wants a person to sign in (not retried until asked), and the
    # authorization URL while a sign-in is under way (to copy if no browser opened).
    sign_in_needed: bool = False
    sign_in_url: str | None = None
    # The scope it asked for mid-session beyond its grant, until a person signs in again.
    more_scope: str | None = None


@contextlib.contextmanager
def older_protocol() -> Iterator[None]:
    """Roots and logging/setLevel are deprecated from protocol 2026-07-28 on, and they are
    how servers of the handshake era are spoken to: no warning for using them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


class ServerDown(Exception):
    """The live connection ended; the message says why, for a person."""


class MoreAccessNeeded(ServerDown):
    """The server ended a call asking for more access than it was granted (OAuth step-up);
    the message says how a person grants it."""


class ServerConnection:
    """A server's connection, kept alive by its own task."""

    def __init__(
        self,
        config: MCPServerConfig,
        *,
        clock: Clock | None = None,
        log: StructuredLog | None = None,
        on_change: Callable[[ServerConnection], None] = lambda _c: None,
        on_tools: Callable[[ServerConnection], Awaitable[None]] | None = None,
        health_interval: float = HEALTH_INTERVAL,
        probe_timeout: float | None = None,
        backoff_start: float = BACKOFF_START,
        on_work: Callable[[ServerConnection, str, float], None] | None = None,
        on_elicit: Callable[[Elicitation], Awaitable[Answer]] | None = None,
        on_sample: Callable[[dict[str, Any]], Awaitable[ToolResult]] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.config = config
        # Seconds of silence after which a health check gives up: no reply and, over stdio, no
        # byte either. Apart from config.timeout, which must also cover start-up and handshake.
        self.probe_timeout = (
            min(config.timeout, PROBE_TIMEOUT) if probe_timeout is None else probe_timeout
        )
        self._probe_sent: float | None = None  # time.monotonic() of the probe awaiting a reply
        # Told the seconds each piece of background work took (core/cost.py counts them).
        self._on_work = on_work
        self._on_elicit = on_elicit  # who answers what the server asks a person
        self._on_sample = on_sample  # who decides and runs what it asks the local model
        # OAuth for an HTTP server: its tokens live under the data dir; a browser is opened
        # only after sign_in() (a person asked).
        self._data_dir = data_dir
        self._sign_in_asked = False
        self._tell_sign_in_url: Callable[[str], None] | None = None
        # This attempt's server asked for more access than it was granted, and was refused.
        self._refused_step_up: SignInNeeded | None = None
        # Who is told when a watched resource changes, and each watch's stream (protocol
        # 2026-07-28) or None (a subscription of the handshake era).
        self.resource_listeners: dict[str, set[Callable[[str], None]]] = {}
        self._watches: dict[str, asyncio.Task[None] | None] = {}
        self._work_started: float | None = None  # the connection attempt being measured
        self._backoff_start = backoff_start
        self.state = ServerState()
        self._clock = clock or SystemClock()
        self._log = log
        self._on_change = on_change
        self._on_tools = on_tools
        self._health_interval = health_interval
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._rediscover = asyncio.Event()
        self._listing = asyncio.Lock()  # one re-list at a time, announced or asked for
        self._down_reason: str | None = None
        self._reconnect_requested = False
        self._stopping = False
        self._first_attempt_done = asyncio.Event()
        self._live = False  # inside a connection attempt (connecting or connected)
        self._attempt_settled = asyncio.Event()  # set when an attempt reaches ready or fails
        self._attempt: asyncio.Task[bool] | None = None
        self._spontaneous_exit: ProcessExit | None = None
        self._last_heard = -math.inf  # time.monotonic() of the last bytes on the server's stdout
        # Whether stopping this attempt's process may be polite: not before its handshake
        # finished, nor once it was found hung (it could not answer a polite request).
        self._graceful_stop = False
        self._bad_stdout: str | None = None  # this attempt's first stdout line not JSON-RPC
        self.relist_interval = RELIST_INTERVAL
        self._announcements = 0  # tools/list_changed since the last re-list
        self._flood_warned_at = -math.inf

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def ready(self) -> bool:
        return self.state.status is ServerStatus.READY and self._client is not None

    # -- control, from any task ------------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self._stopping:
            self._task = asyncio.create_task(self._own(), name=f"mcp-server-{self.name}")

    async def wait_first_attempt(self) -> None:
        """Return once the first connection attempt has succeeded or failed (or it stopped)."""
        await self._first_attempt_done.wait()

    def reconnect(self) -> None:
        """Drop the current connection or attempt and connect now, with the backoff reset."""
        if self._stopping:
            return
        # A fresh event: only the attempt that follows this request may settle it. While an
        # earlier request still waits for its attempt, both wait for the one after this.
        if self._attempt_settled.is_set():
            self._attempt_settled = asyncio.Event()
        self._reconnect_requested = True
        self._down_reason = "reconnect requested"
        self._wake.set()
        attempt = self._attempt
        if attempt is not None and self.state.status is not ServerStatus.READY:
            attempt.cancel()  # a handshake in progress is not waited for
        if self._task is None:
            self.start()

    def sign_in(self, show_url: Callable[[str], None] | None = None) -> None:
        """A person asks to sign in: connect now, and let the server's OAuth open a browser
        (``show_url`` is told the authorization URL, to offer when no browser opens)."""
        self._sign_in_asked = True
        self._tell_sign_in_url = show_url
        self.reconnect()

    @property
    def signing_in(self) -> bool:
        return self._sign_in_asked

    async def wait_attempt_after_reconnect(self) -> None:
        """Return once the attempt that followed the last ``reconnect`` succeeded or failed."""
        await self._attempt_settled.wait()

    async def stop(self) -> None:
        """Disconnect and stop retrying. Interrupts a handshake rather than waiting for it."""
        self._stopping = True
        self._wake.set()
        if self._attempt is not None and self.state.status is not ServerStatus.READY:
            self._attempt.cancel()
        task, self._task = self._task, None
        if task is not None:
            await asyncio.wait([task])  # our own cancellation still reaches us
        self._first_attempt_done.set()
        self._attempt_settled.set()
        self._set_status(ServerStatus.DISCONNECTED)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Call a tool on the live connection. Raises ServerDown if there is none, MCPError
        for protocol errors (REQUEST_TIMEOUT when ``time_limit`` seconds pass)."""
        client = self._client
        if client is None or self.state.status is not ServerStatus.READY:
            raise ServerDown(self.unavailable_reason())
        self.state.calls += 1
        try:
            if self.runs_as_task(name):
                return await self._call_as_task(client, name, arguments, time_limit, progress)
            return await client.call_tool(
                name, arguments, read_timeout_seconds=time_limit, progress_callback=progress
            )
        except MCPError as exc:
            self.state.errors += 1
            if exc.error.code == types.CONNECTION_CLOSED:
                self._mark_down(f"connection closed during a call to {name}")
                if self._refused_step_up is not None:
                    raise MoreAccessNeeded(str(self._refused_step_up)) from None
            raise
        except Exception:
            self.state.errors += 1
            raise

    def runs_as_task(self, name: str) -> bool:
        """Whether the tool answers only task-augmented calls, on a connection whose protocol
        has tasks (2025-11-25)."""
        if self.state.protocol_version != TASKS_PROTOCOL:
            return False
        tool = next((t for t in self.state.tools if t.name == name), None)
        execution = getattr(tool, "execution", None)
        return execution is not None and execution.task_support == "required"

    async def _call_as_task(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        progress: ProgressFnT | None,
    ) -> types.CallToolResult:
        """A call the server runs as a task: made, watched until it ends (tasks/get, at the
        pace the server asks, within bounds), then its result fetched (tasks/result). A call
        that fails before the task ended, whatever the reason (out of time, cancelled, an
        error, the server gone, an answer that is not a task), cancels the task on the server
        too (tasks/cancel)."""
        session = client.session
        params = types.CallToolRequestParams(
            name=name, arguments=arguments, task=types.TaskMetadata(ttl=int(time_limit * 1000))
        )
        task_id: str | None = None
        status = "working"
        # Its own task: a call ended while the server is still making the task learns the
        # task's id all the same, to cancel it.
        creating = asyncio.ensure_future(
            _send_raw(session, types.CallToolRequest(params=params), time_limit, progress)
        )
        try:
            async with asyncio.timeout(time_limit):
                created = await asyncio.shield(creating)
                task_id, status, wait = self._task_of(
                    "tools/call", created.get("task") if isinstance(created, dict) else None
                )
                while status == "working":
                    await asyncio.sleep(wait)
                    got = await _send_raw(
                        session,
                        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                        self.config.timeout,
                    )
                    _, status, wait = self._task_of("tasks/get", got, task_id)
                # Finished, or waiting on the person (its questions come while this waits).
                return await session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=task_id)
                    ),
                    types.CallToolResult,
                )
        except BaseException as failed:
            if task_id is None:
                task_id = await asyncio.shield(self._task_made_anyway(creating))
            if task_id is not None and status not in TASK_ENDED:
                await asyncio.shield(self._cancel_task(session, task_id))
            if isinstance(failed, TimeoutError):
                raise MCPError(types.REQUEST_TIMEOUT, f"task {task_id} ran out of time") from None
            raise

    def _task_of(
        self, method: str, answer: Any, task_id: str | None = None
    ) -> tuple[str, str, float]:
        """(task id, status, seconds to wait before asking again) of the task a server's
        answer describes; MCPError naming what is wrong with an answer that is not one. The
        id is checked first: a task that was made is cancelled even if the rest is wrong."""
        found = answer.get("taskId") if isinstance(answer, dict) else None
        if task_id is None and isinstance(found, str) and found:
            task_id = found
        if task_id is None or found != task_id:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"MCP server {self.name} answered {method} with no task"
                + (f" {task_id!r}" if task_id else "")
                + f" (got {shown_line(json.dumps(answer, default=str), 120)})",
            )
        status = answer.get("status") if isinstance(answer, dict) else None
        if status not in TASK_STATUSES:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"MCP server {self.name} answered {method} with task status {status!r}, "
                f"not one of {', '.join(TASK_STATUSES)}",
            )
        return task_id, str(status), poll_seconds(answer.get("pollInterval"))

    async def _task_made_anyway(self, creating: asyncio.Future[Any]) -> str | None:
        """The id of the task a tools/call made though the call ended before its answer
        (waited for a moment), or None."""
        try:
            async with asyncio.timeout(self.config.timeout):
                created = await asyncio.shield(creating)
        except BaseException:
            creating.cancel()
            return None
        task = created.get("task") if isinstance(created, dict) else None
        found = task.get("taskId") if isinstance(task, dict) else None
        return found if isinstance(found, str) else None

    async def _cancel_task(self, session: Any, task_id: str) -> None:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.config.timeout):
                await session.send_request(request, types.CancelTaskResult)
        self._emit("mcp.task_cancelled", "info", server=self.name, task=task_id)

    def server_capabilities(self) -> types.ServerCapabilities | None:
        """What the server said it offers, while connected."""
        client = self._client
        return None if client is None else client.server_capabilities

    async def use(self, work: Callable[[Client], Awaitable[T]], time_limit: float) -> T:
        """Run one request of the person's (a resource, a prompt) on the live connection,
        within ``time_limit`` seconds (TimeoutError). ServerDown if there is no connection,
        or it ended during the request (saying why); MCPError for the server's own answer."""
        client = self._client
        if client is None or self.state.status is not ServerStatus.READY:
            raise ServerDown(self.unavailable_reason())
        try:
            async with asyncio.timeout(time_limit):
                return await work(client)
        except MCPError as exc:
            if exc.error.code != types.CONNECTION_CLOSED:
                raise
            self._mark_down("connection closed during a request")
            # What ended it (a message past the limit, an exit) says more than "closed".
            why = self._down_reason or self.state.last_error or exc.error.message
            raise ServerDown(f"the connection ended during the request: {why}") from None

    def unavailable_reason(self) -> str:
        state = self.state
        reason = state.last_error or f"server {self.name} is {state.status.value}"
        if state.next_retry_at is not None:
            wait = max(0.0, state.next_retry_at - time.monotonic())
            reason += f"; retrying in {wait:.0f} s"
        return reason

    # -- the owner task --------------------------------------------------------------------

    async def _own(self) -> None:
        backoff = self._backoff_start
        while not self._stopping:
            self._reconnect_requested = False
            self._wake.clear()
            self._down_reason = None
            self._refused_step_up = None
            self._spontaneous_exit = None
            self._graceful_stop = False
            self._bad_stdout = None
            self.state.attempts += 1
            settled = self._attempt_settled
            # Each attempt is a task of its own, so a reconnect or stop can interrupt it.
            attempt = asyncio.create_task(self._connect_and_serve(settled))
            self._attempt = attempt
            try:
                await asyncio.wait([attempt])
            except asyncio.CancelledError:
                attempt.cancel()
                await asyncio.wait([attempt])
                raise
            finally:
                self._attempt = None
                self._client = None
                self._live = False
                if self._work_started is not None:  # an attempt that never became ready
                    self._report_work("connect", self._work_started)
            reached_ready = False
            if not attempt.cancelled():
                failure = attempt.exception()
                if failure is None:
                    reached_ready = attempt.result()
                elif not self._stopping and not self._reconnect_requested:
                    self.state.last_attempt_ok = False
                    # A step-up refused mid-session leaves the grant it had: retried.
                    self.state.sign_in_needed = (
                        _needs_sign_in(failure) and self._refused_step_up is None
                    )
                    self._record_error(self._down_reason or self._failure_message(failure))
            self._sign_in_asked = False
            self.state.sign_in_url = None
            self._first_attempt_done.set()
            if not self._reconnect_requested:
                settled.set()
            if self._stopping:
                break
            if self._reconnect_requested:
                backoff = self._backoff_start
                continue
            if reached_ready:
                backoff = self._backoff_start
            if self.state.sign_in_needed:  # trying again cannot help: a person must sign in
                self._wake.clear()
                self._set_status(ServerStatus.ERROR)
                self._emit("mcp.sign_in_needed", "warning", server=self.name)
                await self._wake.wait()
                backoff = self._backoff_start
                continue
            self.state.next_retry_at = time.monotonic() + backoff
            self.state.retry_delay = backoff
            self._wake.clear()  # only a new request may cut the wait short
            self._set_status(ServerStatus.ERROR)
            self._emit("mcp.retry_scheduled", "info", server=self.name, in_seconds=backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._wake.wait()
            self.state.next_retry_at = None
            self.state.retry_delay = None
            if self._reconnect_requested:
                backoff = self._backoff_start
            else:
                backoff = min(backoff * 2, max(BACKOFF_MAX, self._backoff_start))

    async def _connect_and_serve(self, settled: asyncio.Event) -> bool:
        """Connect, discover, then serve until the connection ends. Returns whether the
        server reached READY; raises what made the connection fail."""
        self.state.exit = None
        self.state.pid = None
        self._live = True
        self._set_status(ServerStatus.CONNECTING)
        started = self._work_started = self._clock.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            client = Client(
                self._transport(),
                mode="auto",
                read_timeout_seconds=self.config.timeout,
                message_handler=self._on_message,
                list_roots_callback=self._list_roots,
                elicitation_callback=self._elicit,
                sampling_callback=self._sample if self._on_sample is not None else None,
                logging_callback=self._on_log,
                log_level=self.config.log_level,
                client_info=types.Implementation(name=CLIENT_NAME, version="0.1.0"),
                cache=None,
            )
            # A person signing in, in a browser, has longer than a handshake.
            handshake = self.config.timeout + (SIGN_IN_TIME if self._sign_in_asked else 0)
            try:
                async with asyncio.timeout(handshake):
                    await stack.enter_async_context(client)
            except TimeoutError:
                if self._bad_stdout is not None:
                    raise ServerDown(
                        "the server's stdout is not JSON-RPC: first offending line: "
                        + shown_line(self._bad_stdout)
                    ) from None
                raise ServerDown(
                    f"did not finish the MCP handshake within {self.config.timeout:g} s"
                ) from None
            self.state.sign_in_needed = False
            self.state.sign_in_url = None
            if self._sign_in_asked:
                self.state.more_scope = None
            self.state.connect_latency_ms = (self._clock.monotonic() - started) * 1000
            self.state.protocol_version = client.session.protocol_version
            await self._ask_log_level(client)
            self._set_status(ServerStatus.CONNECTED)
            await self._discover(client)
            self._report_work("connect", started)
            self._client = client
            self._graceful_stop = True
            self._set_status(ServerStatus.READY)
            self.state.last_attempt_ok = True
            self._first_attempt_done.set()
            settled.set()
            self._emit(
                # After any reconnect the tools were listed anew: the log says so.
                "mcp.reconnected_tools_rediscovered" if self.state.attempts > 1 else "mcp.ready",
                "info",
                server=self.name,
                attempt=self.state.attempts,
                tools=len(self.state.tools),
                protocol=self.state.protocol_version,
                connect_ms=round(self.state.connect_latency_ms, 1),
            )
            if self._on_tools is not None:
                await self._on_tools(self)
            await self._serve(client)
        return True

    async def _serve(self, client: Client) -> None:
        """Wait until the connection must end: stop, reconnect, exit, or a failed probe."""
        async with asyncio.TaskGroup() as group:
            helpers = [
                group.create_task(self._probe_loop(client)),
                group.create_task(self._rediscover_loop(client)),
                group.create_task(self._listen_for_changes(client)),
            ]
            await self._wake.wait()
            self._client = None
            if self._reconnect_requested:
                self._set_status(ServerStatus.CONNECTING)
            elif self._stopping:
                self._set_status(ServerStatus.DISCONNECTED)
            for helper in helpers:
                helper.cancel()

    async def _discover(self, client: Client) -> None:
        """Every page of tools/list, bounded: one timeout for all pages, no cursor twice."""
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        try:
            async with asyncio.timeout(self.config.timeout):
                for _page in range(MAX_TOOL_PAGES):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                    if cursor in seen:
                        raise ServerDown(f"tools/list repeated the page cursor {cursor!r}")
                    seen.add(cursor)
                else:
                    raise ServerDown(f"tools/list did not end after {MAX_TOOL_PAGES} pages")
        except TimeoutError:
            raise ServerDown(
                f"listing its tools took longer than {self.config.timeout:g} s"
            ) from None
        self.state.tools = tools
        self.state.tools_listed_at = self._clock.now()

    async def relist_tools(self) -> None:
        """List the tools again now (a person asked), on the live connection. ServerDown if
        there is none, or the listing fails."""
        client = self._client
        if client is None or self.state.status is not ServerStatus.READY:
            raise ServerDown(self.unavailable_reason())
        try:
            await self._relist(client)
        except ServerDown:
            raise
        except Exception as exc:
            raise ServerDown(describe_failure(exc, self.config)) from None

    async def _relist(self, client: Client) -> None:
        """List the tools again, one listing at a time; those told of changes are told when
        the list changed."""
        async with self._listing:
            before = self.state.tools
            started = self._clock.monotonic()
            try:
                await self._discover(client)
            finally:
                self._report_work("rediscover", started)
        if self.state.tools == before:
            return  # listed, but nothing changed
        self._emit("mcp.tools_changed", "info", server=self.name, tools=len(self.state.tools))
        self._on_change(self)
        if self._on_tools is not None:
            await self._on_tools(self)

    async def _probe_loop(self, client: Client) -> None:
        while True:
            await asyncio.sleep(self._health_interval)
            started = self._clock.monotonic()
            try:
                await self._probe(client)
            except TimeoutError:
                self._graceful_stop = False  # hung: its process is killed at once
                self._mark_down(
                    f"stopped answering: a health check got no reply within "
                    f"{self.probe_timeout:g} s"
                )
                return
            except Exception as exc:
                self._mark_down(f"health check failed: {describe_failure(exc, self.config)}")
                return
            finally:
                self._report_work("probe", started)

    async def _probe(self, client: Client) -> None:
        """One tools/list round trip (it answers in both protocol generations; 2026-07-28 has
        no ping). Its reply can queue behind a large message still arriving, so the wait ends
        only after ``probe_timeout`` seconds in which the server sent nothing at all."""
        # Our wait below is the limit; the SDK's own one (config.timeout) must not come first.
        reply = asyncio.create_task(
            client.session.send_request(
                types.ListToolsRequest(),
                types.ListToolsResult,
                request_read_timeout_seconds=math.inf,
            ),
            name=f"mcp-probe-{self.name}",
        )
        sent = self._probe_sent = time.monotonic()
        try:
            while not reply.done():
                silent_until = max(sent, self._last_heard) + self.probe_timeout
                if silent_until <= time.monotonic():
                    raise TimeoutError
                await asyncio.wait([reply], timeout=silent_until - time.monotonic())
            reply.result()
        finally:
            self._probe_sent = None
            reply.cancel()

    @property
    def detection_time(self) -> float:
        """Seconds within which a server that stops answering is found (and marked down)."""
        return self._health_interval + self.probe_timeout

    def unanswered_for(self) -> float:
        """Seconds the server has left a health probe unanswered without sending anything:
        0 when no probe waits (over stdio any byte counts as an answer)."""
        sent = self._probe_sent
        if sent is None:
            return 0.0
        return max(0.0, time.monotonic() - max(sent, self._last_heard))

    async def _rediscover_loop(self, client: Client) -> None:
        """List the tools again after tools/list_changed: one re-list at a time, at most one
        more waiting, and at most one per ``relist_interval`` seconds."""
        last = -math.inf
        while True:
            await self._rediscover.wait()
            # Announcements that arrive meanwhile fold into this one re-list.
            await asyncio.sleep(max(0.0, last + self.relist_interval - time.monotonic()))
            self._rediscover.clear()
            last = time.monotonic()
            self._note_flood()
            try:
                await self._relist(client)
            except Exception as exc:
                self._emit("mcp.rediscovery_failed", "warning", server=self.name, error=str(exc))

    def _tools_list_changed(self) -> None:
        self._announcements += 1
        self._rediscover.set()

    def _list_changed_news(self) -> bool:
        """Whether an announcement arriving now is news: not while a re-list is due."""
        if self._rediscover.is_set():
            self._announcements += 1
            return False
        return True

    def _note_flood(self) -> None:
        count, self._announcements = self._announcements, 0
        now = time.monotonic()
        if count >= FLOOD_ANNOUNCEMENTS and now - self._flood_warned_at >= FLOOD_WARNING_INTERVAL:
            self._flood_warned_at = now
            self._emit(
                "mcp.list_changed_flood",
                "warning",
                server=self.name,
                announcements=count,
                note=f"tools are listed again at most once per {self.relist_interval:g} s",
            )

    async def _listen_for_changes(self, client: Client) -> None:
        """On 2026-07-28 connections list_changed arrives only on an open subscription."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._tools_list_changed()
        except ListenNotSupportedError:
            return  # handshake-era servers send notifications/tools/list_changed directly
        except Exception as exc:
            self._emit("mcp.listen_failed", "info", server=self.name, error=str(exc))

    async def _list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        roots = [
            types.Root.model_validate({"uri": uri, "name": name})
            for uri, name in self.config.root_uris()
        ]
        return types.ListRootsResult(roots=roots)

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """The server asks the person something, inside a call (or a read)."""
        if isinstance(params, types.ElicitRequestURLParams):
            request = Elicitation(self.name, params.message, "url", url=params.url)
        else:
            try:
                fields = fields_of(params.requested_schema)
            except UnshowableRequest as exc:
                self._emit("mcp.elicitation_refused", "warning", server=self.name, error=str(exc))
                return types.ErrorData(
                    code=types.INVALID_PARAMS, message=f"diana cannot show this as a form: {exc}"
                )
            request = Elicitation(self.name, params.message, "form", fields)
        if self._on_elicit is None:
            return types.ElicitResult(action="decline")
        try:
            answer = await self._on_elicit(request)
        except ValueError as exc:  # an answer that does not fit the form: not sent
            self._emit("mcp.elicitation_refused", "warning", server=self.name, error=str(exc))
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action=answer.action, content=answer.content)

    async def _sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        """The server asks the local model to write a reply: a call of mcp_sampling, which a
        person approves unless policy.json allows this server's sampling."""
        assert self._on_sample is not None  # declared only with someone to decide
        try:
            arguments = sampling_arguments(self.name, params)
        except SamplingRefused as exc:
            self._emit("mcp.sampling_refused", "warning", server=self.name, error=str(exc))
            return types.ErrorData(
                code=types.INVALID_PARAMS, message=f"diana cannot ask the local model: {exc}"
            )
        result = await self._on_sample(arguments)
        if not result.success:
            # -1: the person said no (what MCP's examples use for a refused sampling request)
            code = -1 if result.error_code is ErrorCode.REJECTED else types.INTERNAL_ERROR
            return types.ErrorData(code=code, message=result.error or "sampling failed")
        data = result.data
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=data["text"]),
            model=data["model"],
            stop_reason=data["stop_reason"],
        )

    async def watch(self, uri: str, time_limit: float) -> None:
        """Ask the server to tell of changes to the resource (``resource_listeners`` hear of
        them): a subscriptions/listen stream from 2026-07-28 on, resources/subscribe before.
        ServerDown, TimeoutError or MCPError when it cannot."""
        client = self._client
        if client is None or not self.ready:
            raise ServerDown(self.unavailable_reason())
        if uri in self._watches:
            return
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stream = asyncio.create_task(self._watch_stream(client, uri, acked))
        try:
            async with asyncio.timeout(time_limit):
                await asyncio.shield(acked)
        except ListenNotSupportedError:
            async with asyncio.timeout(time_limit):
                with older_protocol():
                    await client.subscribe_resource(uri)
            self._watches[uri] = None
            return
        except BaseException:
            stream.cancel()
            raise
        self._watches[uri] = stream

    async def unwatch(self, uri: str, time_limit: float) -> None:
        """Stop the server telling of changes to the resource."""
        if uri not in self._watches:
            return
        stream = self._watches.pop(uri)
        if stream is not None:
            stream.cancel()
            return
        client = self._client
        if client is not None and self.ready:
            with contextlib.suppress(MCPError, TimeoutError), older_protocol():
                async with asyncio.timeout(time_limit):
                    await client.unsubscribe_resource(uri)

    async def _watch_stream(self, client: Client, uri: str, acked: asyncio.Future[None]) -> None:
        try:
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                acked.set_result(None)
                async for _event in subscription:
                    for listener in list(self.resource_listeners.get(uri, ())):
                        listener(uri)
        except Exception as exc:
            if not acked.done():
                acked.set_exception(exc)

    async def open_urls_first(self, error: types.ErrorData) -> str | None:
        """A call answered "open this page first" (-32042): each page is put to the person
        as a URL elicitation. None when all were done; otherwise why the call cannot go on."""
        from mcp.shared.exceptions import UrlElicitationRequiredError

        try:
            pages = UrlElicitationRequiredError.from_error(error).elicitations
        except ValueError as exc:
            return f"the server asked for pages to be opened, but not readably: {exc}"
        if not pages:
            return "the server asked for pages to be opened, but named none"
        for page in pages:
            request = Elicitation(self.name, page.message, "url", url=page.url)
            answer = (
                Answer("decline") if self._on_elicit is None else await self._on_elicit(request)
            )
            if answer.action != "accept":
                return (
                    f"MCP server {self.name} needs {page.url} opened first ({page.message}); "
                    f"it was {'declined' if answer.action == 'decline' else 'cancelled'}"
                )
        return None

    async def roots_changed(self, config: MCPServerConfig) -> None:
        """The server's entry changed in its roots alone: tell the server, no restart."""
        self.config = config
        client = self._client
        if client is not None and self.ready:
            with contextlib.suppress(Exception), older_protocol():
                await client.send_roots_list_changed()  # one that cannot hear it asks again

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        data = params.data
        text = data if isinstance(data, str) else json.dumps(data, default=str)
        entry = ServerLog(
            self._clock.now(), str(params.level), params.logger, text[:LOG_TEXT_LIMIT]
        )
        self.state.logs.append(entry)

    async def _ask_log_level(self, client: Client) -> None:
        """Servers speaking a handshake-era protocol are asked with logging/setLevel (later
        ones get the level with each request)."""
        capabilities = client.server_capabilities
        if capabilities.logging is None or client.session.initialize_result is None:
            return
        with contextlib.suppress(MCPError, TimeoutError), older_protocol():
            async with asyncio.timeout(self.config.timeout):
                await client.set_logging_level(self.config.log_level)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._tools_list_changed()
        elif isinstance(message, types.ResourceUpdatedNotification):
            uri = str(message.params.uri)
            # A handshake-era subscription's news; a listen stream tells its own.
            if uri in self._watches and self._watches[uri] is None:
                for listener in list(self.resource_listeners.get(uri, ())):
                    listener(uri)

    def _transport(self) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        config = self.config
        if config.transport == "stdio":
            watch = ProcessWatch(
                self._on_process_start,
                self._on_stderr,
                self._on_stdout_bytes,
                self._on_exit,
                on_bad_stdout=self._on_bad_stdout,
                on_protocol_error=self._on_protocol_error,
                on_dropped=self._on_dropped,
                on_list_changed=self._list_changed_news,
                graceful=lambda: self._graceful_stop,
            )
            return stdio_transport(config, watch)
        assert config.url is not None
        auth = self._sign_ins()
        if config.transport == "sse":
            return sse_client(
                config.url,
                headers=config.headers or None,
                timeout=config.timeout,
                sse_read_timeout=300,
                auth=auth,
            )
        return _streamable_http(config, auth)

    def _sign_ins(self) -> httpx2.Auth | None:
        """The server's OAuth for this attempt: made anew each time, so tokens another
        process obtained (`diana login`) are read from their file."""
        if self._data_dir is None:
            return None
        from .oauth import oauth_for

        return oauth_for(
            self.config,
            self._data_dir,
            allowed=self._may_open_browser,
            show_url=self._show_sign_in_url,
            asked=self._sign_in_asked,
        )

    def _may_open_browser(self, refusal: SignInNeeded) -> bool:
        """Only a person opens a sign-in. Refused mid-session (the server wants more scope
        than it was granted), what it wants is why the connection ends, not "closed"."""
        if self._sign_in_asked:
            return True
        if refusal.more_scope is not None:
            self._refused_step_up = refusal
            self.state.more_scope = refusal.more_scope
            self._mark_down(str(refusal))
        return False

    def _show_sign_in_url(self, url: str) -> None:
        self.state.sign_in_url = url
        if self._tell_sign_in_url is not None:
            self._tell_sign_in_url(url)
        self._emit("mcp.sign_in_started", "info", server=self.name)
        self._on_change(self)

    # -- bookkeeping -----------------------------------------------------------------------

    def _on_process_start(self, pid: int) -> None:
        self.state.pid = pid
        self._emit("mcp.process_started", "info", server=self.name, pid=pid)
        self._on_change(self)  # the detail view shows the new pid

    def _on_stderr(self, line: str) -> None:
        self.state.stderr.append(SECRET_VALUES.mask(line))  # a server may print its own env

    def _on_stdout_bytes(self) -> None:
        self._last_heard = time.monotonic()

    def _on_bad_stdout(self, line: str) -> None:
        if self._bad_stdout is None:
            self._bad_stdout = line
            self._emit("mcp.stdout_not_jsonrpc", "warning", server=self.name, line=shown_line(line))

    def _on_dropped(self, what: str) -> None:
        self._emit("mcp.message_too_large", "warning", server=self.name, dropped=what)

    def _on_protocol_error(self, reason: str) -> None:
        self._graceful_stop = False
        self._mark_down(reason)

    def _on_exit(self, exit_: ProcessExit, spontaneous: bool) -> None:
        self.state.exit = exit_
        self._emit("mcp.process_exited", "info", server=self.name, how=exit_.describe())
        if not spontaneous:
            return
        self._spontaneous_exit = exit_
        if self._live and not self._stopping and not self._reconnect_requested:
            ready = self.state.status is ServerStatus.READY
            when = "" if ready else " before the MCP handshake finished"
            # An exit explains more than the "connection closed" a call may have reported.
            self._down_reason = None
            self._mark_down(self._exit_reason(exit_, when))

    def _failure_message(self, exc: BaseException) -> str:
        # A process that ended on its own says more than the closed pipe it left behind.
        exit_ = self._spontaneous_exit
        if exit_ is not None:
            return self._exit_reason(exit_, " before the MCP handshake finished")
        return describe_failure(exc, self.config)

    def _exit_reason(self, exit_: ProcessExit, when: str = "") -> str:
        reason = f"process {exit_.describe()}{when}"
        tail = next((line for line in reversed(self.state.stderr) if line.strip()), None)
        return reason + (f"; last stderr line: {tail.strip()[:200]}" if tail else "")

    def _report_work(self, kind: str, started: float) -> None:
        if kind == "connect":
            self._work_started = None
        if self._on_work is not None:
            self._on_work(self, kind, self._clock.monotonic() - started)

    def _mark_down(self, reason: str) -> None:
        if self._down_reason is not None:
            return
        self._down_reason = reason
        self._client = None
        if self.state.status in (ServerStatus.READY, ServerStatus.ERROR):
            self._record_error(reason)
        self._wake.set()

    def _record_error(self, message: str) -> None:
        self.state.last_error = message
        self.state.last_error_at = self._clock.now()
        self._emit("mcp.down", "warning", server=self.name, error=message)
        self._set_status(ServerStatus.ERROR)

    def _set_status(self, status: ServerStatus) -> None:
        if status is not ServerStatus.READY and self.state.status is ServerStatus.READY:
            self._client = None
        changed = status is not self.state.status
        self.state.status = status
        if changed or status is ServerStatus.ERROR:
            self._on_change(self)

    def _emit(self, event: str, level: str, **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)


@contextlib.asynccontextmanager
async def _streamable_http(
    config: MCPServerConfig, auth: httpx2.Auth | None
) -> AsyncIterator[TransportStreams]:
    assert config.url is not None
    timeout = httpx2.Timeout(config.timeout, read=300)
    async with httpx2.AsyncClient(headers=config.headers, timeout=timeout, auth=auth) as http:
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


def poll_seconds(interval: Any) -> float:
    """A task's pollInterval (milliseconds, as the server sent it: a number, a numeric string,
    or anything at all) as the seconds to wait before asking again, between TASK_POLL_MIN and
    TASK_POLL_MAX; TASK_POLL_DEFAULT for no interval or one that is not a number."""
    if isinstance(interval, str):
        with contextlib.suppress(ValueError):
            interval = float(interval.strip())
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        return TASK_POLL_DEFAULT
    if math.isnan(interval):
        return TASK_POLL_DEFAULT
    return min(max(interval / 1000, TASK_POLL_MIN), TASK_POLL_MAX)


async def _send_raw(
    session: Any,
    request: types.CallToolRequest | types.GetTaskRequest,
    time_limit: float,
    progress: ProgressFnT | None = None,
) -> Any:
    """A request whose answer is checked here, not by the SDK: a tools/call answered with a
    task (the SDK checks every tools/call result as a CallToolResult and has no client side
    for tasks), and tasks/get (whose answer is read leniently: a pollInterval of any shape is
    bounded, not refused). It goes out through the SDK's dispatcher as its own send_request
    sends it (headers stamped)."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {"timeout": time_limit}
    if progress is not None:
        options["on_progress"] = progress
    from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

    session._stamp(data, options)
    if isinstance(request, types.CallToolRequest):
        headers = options.setdefault("headers", {})
        headers.setdefault(MCP_NAME_HEADER, encode_header_value(request.params.name))
    return await session._dispatcher.send_raw_request(data["method"], data.get("params"), options)


def sampling_arguments(server: str, params: types.CreateMessageRequestParams) -> dict[str, Any]:
    """A sampling request as the arguments of mcp_sampling: text and images only (raises
    SamplingRefused for audio, tool use, or a request for tools diana did not offer)."""
    if params.tools:
        raise SamplingRefused("it offers the model tools, which diana does not take in sampling")
    messages: list[dict[str, Any]] = []
    for message in params.messages:
        texts: list[str] = []
        images: list[dict[str, str]] = []
        for block in message.content_as_list:
            if isinstance(block, types.TextContent):
                texts.append(block.text)
            elif isinstance(block, types.ImageContent):
                images.append({"mimeType": block.mime_type, "data": block.data})
            else:
                raise SamplingRefused(f"a message holds {block.type} content, which it cannot read")
        entry: dict[str, Any] = {"role": message.role, "text": "\n".join(texts)}
        if images:
            entry["images"] = images
        messages.append(entry)
    if not messages:
        raise SamplingRefused("the request has no messages")
    hints = params.model_preferences.hints if params.model_preferences else None
    arguments: dict[str, Any] = {
        "server": server,
        "messages": messages,
        "system_prompt": params.system_prompt,
        "reply_limit": params.max_tokens,
        "model_hints": [hint.name for hint in hints or [] if hint.name],
    }
    if params.temperature is not None:
        arguments["temperature"] = params.temperature
    if params.stop_sequences:
        arguments["stop_sequences"] = params.stop_sequences
    return arguments


def describe_failure(exc: BaseException, config: MCPServerConfig) -> str:
    """What went wrong, in words a person can act on."""
    said = _describe(exc, config)
    if config.transport == "stdio" or isinstance(_first_leaf(exc), TimeoutError):
        return said
    path = (config.url or "").split("?")[0].rstrip("/")
    if config.transport == "streamable-http" and path.endswith("/sse"):
        return said + ' (the URL ends in /sse: for an SSE server, add "transport": "sse")'
    if config.transport == "sse" and path.endswith("/mcp"):
        return said + ' (the URL ends in /mcp: for streamable HTTP, leave "transport" out)'
    return said


def _describe(exc: BaseException, config: MCPServerConfig) -> str:
    leaf = _first_leaf(exc)
    if isinstance(leaf, ServerDown | SignInNeeded):
        return str(leaf)
    if isinstance(leaf, SignInFailed | OAuthFlowError | OAuthTokenError | OAuthRegistrationError):
        said = str(leaf).strip().splitlines()[0] if str(leaf).strip() else type(leaf).__name__
        if "validation error" in said:  # pydantic's account of a malformed answer
            said = said.split(":")[0] + ": the authorization server's answer is not valid OAuth"
        return f"sign-in failed: {said}"
    if isinstance(leaf, FileNotFoundError) and config.transport == "stdio":
        return (
            f'command not found: "{config.display_command}" — install it or fix "command" '
            f"in mcp-servers.json"
        )
    if isinstance(leaf, PermissionError) and config.transport == "stdio":
        return f'command "{config.display_command}" cannot be run: permission denied'
    if isinstance(leaf, MCPError):
        if leaf.error.code == types.CONNECTION_CLOSED:
            return "the server closed the connection during the handshake"
        if leaf.error.code == types.REQUEST_TIMEOUT:
            return f"no answer to the MCP handshake within {config.timeout:g} s"
        return f"MCP error {leaf.error.code}: {leaf.error.message}"
    if isinstance(leaf, httpx2.ConnectError):
        detail = str(leaf).replace(config.url or "", config.display_url) or type(leaf).__name__
        return f"cannot connect to {config.display_url}: {detail}"
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"{config.display_url} answered HTTP {leaf.response.status_code}"
    if isinstance(leaf, TimeoutError):
        return f"no answer within {config.timeout:g} s"
    return f"{type(leaf).__name__}: {leaf}"


def _needs_sign_in(exc: BaseException) -> bool:
    return isinstance(_first_leaf(exc), SignInNeeded)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
