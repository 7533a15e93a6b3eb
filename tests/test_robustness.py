"""Bad input and bad luck: secrets, odd handlers, shutdown mid-call, a locked database."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from diana.core.calls.agents import FunctionAgent, FunctionTool
from diana.core.calls.orchestrator import Orchestrator
from diana.core.config.settings import ConfigError, Paths, load_settings
from diana.core.events import CallFinished, EventBus
from diana.core.models import AgentHealth, ErrorCode, RiskLevel
from diana.core.runtime import Profile, Runtime
from diana.core.storage.call_record import CallRecord
from diana.core.storage.execution_log import ExecutionLog, recent_calls
from diana.core.storage.schema import connect
from diana.core.system.telemetry import StructuredLog, redact

from .agents_fixtures import ScriptedAgent, tool
from .conftest import stepping_clock


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "api_key",
        "privateKey",
        "private-key",
        "accessKey",
        "AWS_SECRET_ACCESS_KEY",
        "passphrase",
        "pwd",
        "ssh-key",
        "Authorization",
        "session_token",
        "client_secret",
    ],
)
def test_secret_looking_names_are_redacted(name: str) -> None:
    assert redact({name: "s3cr3t", "nested": [{name: "s3cr3t"}]}) == {
        name: "***",
        "nested": [{name: "***"}],
    }


def test_ordinary_names_are_kept() -> None:
    kept = {"author": "Ada", "monkey_count": 3, "query": "tea", "path": "/tmp"}
    assert redact(kept)["author"] == "Ada" and redact(kept)["query"] == "tea"


async def test_a_schema_error_on_a_secret_field_never_quotes_its_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "password": {"type": "string", "minLength": 12},
            "api_key": {"type": "string", "pattern": "^sk-"},
        },
    }
    bus = EventBus()
    events = bus.subscribe()
    orch = Orchestrator(bus=bus)
    orch.register_agent_factory(
        "vault",
        lambda: FunctionAgent(
            "vault", "Vault", [FunctionTool(tool("login", schema), lambda p: "ok")]
        ),
    )
    await orch.start_all()

    short = await orch.execute("login", {"password": "hunter2"})
    wrong = await orch.execute("login", {"api_key": "TOPSECRETVALUE"})

    assert short.error == (
        'invalid arguments for login: argument "password" does not satisfy '
        '"minLength" (value hidden)'
    )
    assert "TOPSECRETVALUE" not in (wrong.error or "")
    everything = repr([events.queue.get_nowait() for _ in range(events.queue.qsize())])
    assert "hunter2" not in everything and "TOPSECRETVALUE" not in everything


async def test_handlers_returning_awaitables_are_awaited() -> None:
    async def real(params: dict[str, Any]) -> str:
        return "awaited"

    class AsyncCallable:
        async def __call__(self, params: dict[str, Any]) -> str:
            return "called"

    orch = Orchestrator()
    orch.register_agent_factory(
        "odd",
        lambda: FunctionAgent(
            "odd",
            "Odd",
            [
                FunctionTool(tool("via_lambda"), lambda p: real(p)),
                FunctionTool(tool("via_object"), AsyncCallable()),
            ],
        ),
    )
    await orch.start_all()

    assert (await orch.execute("via_lambda", {})).data == "awaited"
    assert (await orch.execute("via_object", {})).data == "called"


async def test_a_result_json_cannot_hold_is_still_returned_logged_and_announced(
    tmp_path: Path,
) -> None:
    db = await connect(tmp_path / "d.db")
    log = StructuredLog(tmp_path / "l.jsonl", stepping_clock())
    execution_log = ExecutionLog(db, log)
    execution_log.start()
    bus = EventBus()
    events = bus.subscribe()
    orch = Orchestrator(bus=bus, log=log, execution_log=execution_log)
    orch.register_agent_factory(
        "odd",
        lambda: FunctionAgent(
            "odd", "Odd", [FunctionTool(tool("pairs"), lambda p: {(1, 2): "tuple key"})]
        ),
    )
    await orch.start_all()

    result = await orch.execute("pairs", {})
    await execution_log.close()

    assert result.success
    finished = [
        e
        for e in [events.queue.get_nowait() for _ in range(events.queue.qsize())]
        if isinstance(e, CallFinished)
    ]
    assert finished and finished[0].status == "succeeded" and "tuple key" in finished[0].summary
    rows = await recent_calls(db)
    assert rows[0].status == "succeeded" and "tuple key" in json.dumps(rows[0].result)
    await db.close()
    log.close()


async def test_a_timeout_raised_by_the_tool_itself_is_not_reported_as_ours() -> None:
    async def upstream(params: dict[str, Any]) -> str:
        raise TimeoutError("upstream socket timed out")

    orch = Orchestrator()
    orch.register_agent_factory(
        "net", lambda: FunctionAgent("net", "Net", [FunctionTool(tool("fetch"), upstream)])
    )
    await orch.start_all()

    result = await orch.execute("fetch", {})
    assert result.error_code is ErrorCode.TOOL_EXECUTION_FAILED
    assert result.error == "fetch failed: TimeoutError: upstream socket timed out"


async def test_a_call_in_flight_at_shutdown_is_cancelled_and_recorded(
    config_dir: Path, data_dir: Path
) -> None:
    runtime = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    entered = asyncio.Event()

    async def forever(params: dict[str, Any]) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    runtime.orchestrator.register_agent_factory(
        "stuck",
        lambda: FunctionAgent(
            "stuck",
            "Stuck",
            [FunctionTool(tool("wait_forever", risk=RiskLevel.REVERSIBLE), forever)],
        ),
    )
    await runtime.orchestrator.start_agent("stuck")
    call = asyncio.create_task(
        runtime.orchestrator.execute("wait_forever", {}, correlation_id="late")
    )
    await entered.wait()

    await asyncio.wait_for(runtime.close(), timeout=10)

    assert call.cancelled()
    async with aiosqlite.connect(data_dir / "diana.db") as db:
        async with db.execute(
            "SELECT status, error_code FROM execution_log WHERE correlation_id = 'late'"
        ) as cursor:
            assert await cursor.fetchall() == [("cancelled", "cancelled")]


async def test_a_locked_database_delays_the_log_but_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    db = await connect(path, busy_timeout_ms=20)
    log = StructuredLog(tmp_path / "l.jsonl", stepping_clock())
    execution_log = ExecutionLog(db, log)
    execution_log.start()
    blocker = await aiosqlite.connect(path, isolation_level=None)
    await blocker.execute("BEGIN IMMEDIATE")
    now = datetime.now(UTC)
    execution_log.record(
        CallRecord("held", "t", "a", {}, "succeeded", None, "r", None, "test", now, now, 1.0)
    )
    # fixed wait: the lock held far past the 20 ms busy timeout; the writer keeps trying
    await asyncio.sleep(0.5)
    assert await blocker.execute_fetchall("SELECT count(*) FROM execution_log") == [(0,)]
    await blocker.rollback()
    await blocker.close()

    await asyncio.wait_for(execution_log.flush(), timeout=10)

    assert [r.correlation_id for r in await recent_calls(db)] == ["held"]
    await execution_log.close()
    await db.close()
    log.close()


async def test_health_runs_concurrently_and_a_hung_agent_does_not_hold_others() -> None:
    # Each healthy agent waits until all of them are inside health() at once: a sequential
    # check could never get there and would report them all timed out.
    barrier = asyncio.Barrier(4)

    class Gathering(ScriptedAgent):
        async def health(self) -> AgentHealth:
            await barrier.wait()
            return await super().health()

    orch = Orchestrator(health_timeout=2.0)
    orch.register_agent_factory("hung", lambda: ScriptedAgent("hung", hang_health=True))
    for i in range(4):
        orch.register_agent_factory(f"ok-{i}", lambda i=i: Gathering(f"ok-{i}"))
    await orch.start_all()

    reports = {r.agent_id: r for r in await orch.health()}

    assert all(reports[f"ok-{i}"].status == "healthy" for i in range(4))
    assert reports["hung"].status == "unhealthy"


async def test_shutdown_stops_agents_in_parallel() -> None:
    barrier = asyncio.Barrier(3)
    stopped: list[str] = []

    class Gathering(ScriptedAgent):
        async def shutdown(self) -> None:
            await barrier.wait()
            stopped.append(self.agent_id)

    orch = Orchestrator(shutdown_timeout=2.0)
    for i in range(3):
        orch.register_agent_factory(f"a-{i}", lambda i=i: Gathering(f"a-{i}"))
    await orch.start_all()
    await orch.shutdown()
    assert sorted(stopped) == ["a-0", "a-1", "a-2"]


async def test_a_malformed_health_report_marks_the_agent_unhealthy() -> None:
    class Liar(ScriptedAgent):
        async def health(self) -> AgentHealth:
            return "fine"  # type: ignore[return-value]

    orch = Orchestrator()
    orch.register_agent_factory("liar", lambda: Liar("liar"))
    await orch.start_all()
    (report,) = await orch.health()
    assert report.status == "unhealthy" and "AttributeError" in (report.message or "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"tools": {"timeouts": {"save_fact": -1}}}', "tools.timeouts.save_fact"),
        (b'{"tools": {"timeouts": {"save_fact": 0}}}', "tools.timeouts.save_fact"),
        (b"\xff\xfe{}", "not UTF-8 text"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_bad_settings_are_config_errors(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "settings.json").write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_settings(Paths(tmp_path, tmp_path / "data"))


def test_an_empty_directory_option_is_refused() -> None:
    with pytest.raises(ConfigError, match="--data-dir: must name a directory"):
        Paths.resolve("/tmp/c", "")
