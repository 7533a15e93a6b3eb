"""A chat turn against the fake Ollama: a sink that keeps the turn's events, a runtime on the
test's directories, scripted replies and the requests the model was sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, TypeVar

from diana.core.chat.turn_events import Progress, TurnEvent
from diana.core.ports import Ports
from diana.core.runtime import NO_PORTS, Profile, Runtime

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama

E = TypeVar("E")


class Events:
    """A sink that keeps every event and lets a test wait for one of a kind."""

    def __init__(self) -> None:
        self.seen: list[TurnEvent] = []
        self._queue: asyncio.Queue[TurnEvent] = asyncio.Queue()

    def __call__(self, event: TurnEvent) -> None:
        self.seen.append(event)
        self._queue.put_nowait(event)

    async def wait_for(self, kind: type[E], within: float = 10.0) -> E:
        async with asyncio.timeout(within):
            while True:
                event = await self._queue.get()
                if isinstance(event, kind):
                    return event

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.seen if isinstance(e, kind)]

    def kinds(self) -> list[str]:
        """The event types in order, without progress notes."""
        return [type(e).__name__ for e in self.seen if not isinstance(e, Progress)]


def configure(config_dir: Path, **llm: Any) -> None:
    """Add an llm block to the settings the conftest fixture wrote."""
    path = config_dir / "settings.json"
    settings = json.loads(path.read_text())
    settings["llm"] = llm
    path.write_text(json.dumps(settings))


async def start(
    config_dir: Path, data_dir: Path, host: str | None, ports: Ports = NO_PORTS, **llm: Any
) -> Runtime:
    configure(config_dir, **({"host": host} if host else {}), **llm)
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        ports=ports,
    )
    await runtime.mcp.wait_ready()
    return runtime


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A fake reply that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def chat_requests(fake: FakeOllama) -> list[dict[str, Any]]:
    """The streamed chat requests, without the gap checks (which carry a format)."""
    return [r for r in fake.requests if not r.get("format")]


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]
