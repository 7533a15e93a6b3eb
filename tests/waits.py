"""Waiting on the app as it works: its phase, its workers and the messages it hands on.

The app starts its core in a worker and hands each core event to the pane that shows it as
a message; each pane reads what it shows in its own workers. A test waits for exactly that:
the start to end, the events so far to be handed on and handled, the workers that fill the
panes (and carry out decisions) to finish."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections.abc import Callable

from diana.core.events import Event, Subscription
from diana.tui.app import DianaApp
from textual.message_pump import MessagePump
from textual.worker import WorkerCancelled, WorkerFailed

# The workers that bring the panes up to date, once each; not the ones that run as long as
# the app does (the event pump, the log's watch on other processes) or a chat turn.
FILLING = ("start", "proposals", "health", "ollama", "decisions", "command", "server-rows")


async def started(app: DianaApp, within: float = 30.0) -> None:
    """Until the core is open and every pane shows what it had at start (or start failed)."""
    async with asyncio.timeout(within):
        while app.phase == "starting":  # noqa: ASYNC110 - the phase is the app's own state
            await asyncio.sleep(0.01)
    await settled(app, within)


async def work_done(app: DianaApp, *groups: str) -> None:
    """Until no worker of these groups is running (a failed one counts as done)."""
    while busy := [w for w in app.workers if w.group in groups and not w.is_finished]:
        for worker in busy:
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await worker.wait()


async def handled(app: DianaApp) -> None:
    """Until each widget the app hands core events to has handled what it was given so far:
    a call queued behind them runs only after them."""
    main = app.main
    receivers: list[MessagePump] = [main, *main.panes, app.screen]
    for receiver in receivers:
        done = asyncio.get_running_loop().create_future()
        receiver.call_later(done.set_result, None)
        await done


async def settled(app: DianaApp, within: float = 30.0) -> None:
    """Until every core event so far has been handed on and handled, and the workers that
    fill the panes have finished (what they do may publish more events: until quiet)."""
    async with asyncio.timeout(within):
        while True:
            if app.subscription is not None:
                await app.subscription.drained()
            await handled(app)
            if not any(w.group in FILLING and not w.is_finished for w in app.workers):
                if app.subscription is None or app.subscription.queue.empty():
                    return
            await work_done(app, *FILLING)


def listening(port: int, process: subprocess.Popen[bytes], within: float = 20.0) -> None:
    """Until a server started as ``process`` accepts connections on ``port`` (or exits)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)  # the server is starting in another process


def until(condition: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


async def until_event(
    events: Subscription, match: Callable[[Event], bool], within: float = 15.0
) -> Event:
    async with asyncio.timeout(within):
        while True:
            event = await events.get()
            if match(event):
                return event
