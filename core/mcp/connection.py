"""One MCP server: a long-lived task that owns its SDK client, with reconnect and diagnostics.

The SDK's client, session and transport own anyio task groups that must be entered and exited
in the same task, so each server gets one task (``_own``) that connects, discovers tools,
watches the connection and reconnects with backoff. Other tasks only *use* the live client
(calls and probes are safe from any task) and talk to the owner through events.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client, MCPError
from mcp.client._transport import TransportStreams
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.dispatcher import ProgressFnT

from ..config.mcp_servers import (
    BACKOFF_MAX,
    BACKOFF_START,
    HEALTH_INTERVAL,
    PROBE_TIMEOUT,
    MCPServerConfig,
)
from ..models import ToolResult
from ..system.clock import Clock, SystemClock
from ..system.telemetry import SECRET_VALUES, StructuredLog
from .elicitation_form import Answer, Elicitation
from .failures import MoreAccessNeeded, ServerDown, describe_failure, exit_reason, needs_sign_in
from .health import REMOTE_PROBE_INTERVAL, SilenceWatch
from .info import ServerStatus
from .list_changed import ListChangedThrottle
from .oauth import SIGN_IN_TIME, SignInNeeded
from .server_log import ask_log_level, log_entry
from .server_requests import ServerRequests
from .sign_in import SignIn
from .state import ServerState
from .stdio import ProcessExit, ProcessWatch, shown_line, stdio_transport
from .subscriptions import ResourceWatches, older_protocol
from .tasks import TASKS_PROTOCOL, TaskCall
from .transport import http_transport, list_every_tool

T = TypeVar("T")

CLIENT_NAME = "diana"
# Longest a call waits for the tools a server announced as changed to be listed again.
RELIST_WAIT = 10.0


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
        remote_probe_interval: float = REMOTE_PROBE_INTERVAL,
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
        self.silence = SilenceWatch()
        # Told the seconds each piece of background work took (core/usage/cost.py counts them).
        self._on_work = on_work
        self.requests = ServerRequests(
            config.name,
            roots=lambda: self.config.root_uris(),
            on_elicit=on_elicit,
            on_sample=on_sample,
            emit=self._emit,
        )
        # OAuth for an HTTP server: its tokens live under the data dir; a browser is opened
        # only after sign_in() (a person asked).
        self._sign_in = SignIn(
            data_dir, on_step_up=self._step_up_refused, on_started=self._sign_in_started
        )
        self.watches = ResourceWatches()
        self._work_started: float | None = None  # the connection attempt being measured
        self._backoff_start = backoff_start
        self.state = ServerState()
        self._clock = clock or SystemClock()
        self._log = log
        self._on_change = on_change
        self._on_tools = on_tools
        # A local process is probed often (its pipe and exit already tell much, and an outage
        # is promised to be found within 10 s); a remote server only now and then while idle.
        self._health_interval = (
            health_interval if config.transport == "stdio" else remote_probe_interval
        )
        self._probe_now = asyncio.Event()  # a call failed: probe without waiting
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._list_changed = ListChangedThrottle(self._list_changed_flood)
        self._listing = asyncio.Lock()  # one re-list at a time, announced or asked for
        self._down_reason: str | None = None
        self._reconnect_requested = False
        self._stopping = False
        self._first_attempt_done = asyncio.Event()
        self._live = False  # inside a connection attempt (connecting or connected)
        self._attempt_settled = asyncio.Event()  # set when an attempt reaches ready or fails
        self._attempt: asyncio.Task[bool] | None = None
        self._spontaneous_exit: ProcessExit | None = None
        # Whether stopping this attempt's process may be polite: not before its handshake
        # finished, nor once it was found hung (it could not answer a polite request).
        self._graceful_stop = False
        self._bad_stdout: str | None = None  # this attempt's first stdout line not JSON-RPC

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
        self._sign_in.ask(show_url)
        self.reconnect()

    @property
    def signing_in(self) -> bool:
        return self._sign_in.asked

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
                task = TaskCall(self.name, client, self.config.timeout, self._task_cancelled)
                return await task.run(name, arguments, time_limit, progress)
            return await client.call_tool(
                name, arguments, read_timeout_seconds=time_limit, progress_callback=progress
            )
        except MCPError as exc:
            self.state.errors += 1
            if exc.error.code == types.CONNECTION_CLOSED:
                self._mark_down(f"connection closed during a call to {name}")
                if self._sign_in.refused_step_up is not None:
                    raise MoreAccessNeeded(str(self._sign_in.refused_step_up)) from None
            elif exc.error.code == types.REQUEST_TIMEOUT:
                self._probe_now.set()  # no answer in time: is the server still there?
            raise
        except Exception:
            self.state.errors += 1
            self._probe_now.set()
            raise

    def runs_as_task(self, name: str) -> bool:
        """Whether the tool answers only task-augmented calls, on a connection whose protocol
        has tasks (2025-11-25)."""
        if self.state.protocol_version != TASKS_PROTOCOL:
            return False
        tool = next((t for t in self.state.tools if t.name == name), None)
        execution = getattr(tool, "execution", None)
        return execution is not None and execution.task_support == "required"

    def _task_cancelled(self, task_id: str) -> None:
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
        except TimeoutError:
            self._probe_now.set()  # no answer in time: is the server still there?
            raise
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
            self._sign_in.refused_step_up = None
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
                        needs_sign_in(failure) and self._sign_in.refused_step_up is None
                    )
                    self._record_error(self._down_reason or self._failure_message(failure))
            self._sign_in.asked = False
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
                list_roots_callback=self.requests.list_roots,
                elicitation_callback=self.requests.elicit,
                sampling_callback=self.requests.sample if self.requests.samples else None,
                logging_callback=self._on_log,
                log_level=self.config.log_level,
                client_info=types.Implementation(name=CLIENT_NAME, version="0.1.0"),
                cache=None,
            )
            # A person signing in, in a browser, has longer than a handshake.
            handshake = self.config.timeout + (SIGN_IN_TIME if self._sign_in.asked else 0)
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
            if self._sign_in.asked:
                self.state.more_scope = None
            self.state.connect_latency_ms = (self._clock.monotonic() - started) * 1000
            self.state.protocol_version = client.session.protocol_version
            await ask_log_level(client, self.config)
            self._set_status(ServerStatus.CONNECTED)
            covering = self._list_changed.announcements  # what a listing now covers
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
            self._list_changed.listed(covering)
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
        tools = await list_every_tool(client, self.config.timeout)
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
        self._probe_now.clear()  # a failure of the last connection was answered by this one
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._health_interval):
                    await self._probe_now.wait()
            self._probe_now.clear()
            started = self._clock.monotonic()
            try:
                await self.silence.probe(
                    client, self.probe_timeout, self.name, self.state.protocol_version
                )
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

    @property
    def detection_time(self) -> float:
        """Seconds within which an idle server that stops answering is found (and marked
        down); a failed call has it probed at once."""
        return self._health_interval + self.probe_timeout

    async def _rediscover_loop(self, client: Client) -> None:
        """List the tools again after tools/list_changed: one re-list at a time, at most one
        more waiting, and at most one per the throttle's interval."""
        async for covering in self._list_changed.relists():
            try:
                await self._relist(client)
            except Exception as exc:
                self._list_changed.listed(covering, ok=False)
                self._emit("mcp.rediscovery_failed", "warning", server=self.name, error=str(exc))
            else:
                self._list_changed.listed(covering)

    async def tools_current(self, within: float = RELIST_WAIT) -> str | None:
        """Until the tools as listed include every change the server announced so far (a
        call must not reach a tool changed meanwhile before its pin is checked): None, or
        why they cannot be trusted."""
        return await self._list_changed.current(within)

    def _list_changed_flood(self, announcements: int) -> None:
        self._emit(
            "mcp.list_changed_flood",
            "warning",
            server=self.name,
            announcements=announcements,
            note=f"tools are listed again at most once per "
            f"{self._list_changed.relist_interval:g} s",
        )

    async def _listen_for_changes(self, client: Client) -> None:
        """On 2026-07-28 connections list_changed arrives only on an open subscription."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._list_changed.announced()
        except ListenNotSupportedError:
            return  # handshake-era servers send notifications/tools/list_changed directly
        except Exception as exc:
            self._emit("mcp.listen_failed", "info", server=self.name, error=str(exc))

    async def watch(self, uri: str, time_limit: float) -> None:
        """Ask the server to tell of changes to the resource (``watches.listeners`` hear of
        them). ServerDown, TimeoutError or MCPError when it cannot."""
        client = self._client
        if client is None or not self.ready:
            raise ServerDown(self.unavailable_reason())
        await self.watches.watch(client, uri, time_limit)

    async def unwatch(self, uri: str, time_limit: float) -> None:
        """Stop the server telling of changes to the resource."""
        await self.watches.unwatch(self._client if self.ready else None, uri, time_limit)

    async def roots_changed(self, config: MCPServerConfig) -> None:
        """The server's entry changed in its roots alone: tell the server, no restart."""
        self.config = config
        client = self._client
        if client is not None and self.ready:
            with contextlib.suppress(Exception), older_protocol():
                await client.send_roots_list_changed()  # one that cannot hear it asks again

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.state.logs.append(log_entry(params, self._clock.now()))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._list_changed.announced()
        elif isinstance(message, types.ResourceUpdatedNotification):
            self.watches.updated(str(message.params.uri))

    def _transport(self) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        config = self.config
        if config.transport == "stdio":
            watch = ProcessWatch(
                self._on_process_start,
                self._on_stderr,
                self.silence.heard,
                self._on_exit,
                on_bad_stdout=self._on_bad_stdout,
                on_protocol_error=self._on_protocol_error,
                on_dropped=self._on_dropped,
                on_list_changed=self._list_changed.is_news,
                graceful=lambda: self._graceful_stop,
            )
            return stdio_transport(config, watch)
        return http_transport(config, self._sign_in.auth(config))

    def _step_up_refused(self, refusal: SignInNeeded) -> None:
        self.state.more_scope = refusal.more_scope
        self._mark_down(str(refusal))

    def _sign_in_started(self, url: str) -> None:
        self.state.sign_in_url = url
        self._sign_in.tell(url)
        self._emit("mcp.sign_in_started", "info", server=self.name)
        self._on_change(self)

    # -- bookkeeping -----------------------------------------------------------------------

    def _on_process_start(self, pid: int) -> None:
        self.state.pid = pid
        self._emit("mcp.process_started", "info", server=self.name, pid=pid)
        self._on_change(self)  # the detail view shows the new pid

    def _on_stderr(self, line: str) -> None:
        self.state.stderr.append(SECRET_VALUES.mask(line))  # a server may print its own env

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
            self._mark_down(exit_reason(exit_, self.state.stderr, when))

    def _failure_message(self, exc: BaseException) -> str:
        # A process that ended on its own says more than the closed pipe it left behind.
        exit_ = self._spontaneous_exit
        if exit_ is not None:
            return exit_reason(exit_, self.state.stderr, " before the MCP handshake finished")
        return describe_failure(exc, self.config)

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
