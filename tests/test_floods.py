"""A misbehaving MCP server cannot crash or wedge diana with its own requests: what it asks a
person waits in a queue (one dialog at a time, a few per server, the rest declined at once),
what it sends is cut or refused past its limits, a URL it asks a person to open is opened
only if it is http or https, never as an option, and nothing its requests write to the
database outlives it. The server is tests/fixtures/flood_server.py, on a 2025-11-25
connection (where a server may send requests during a tool call)."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import ProposalStatus
from diana.core.content.text import utf8_size
from diana.core.llm.sampling import SamplingRefused, kept_arguments
from diana.core.mcp.elicitation_form import Answer, Elicitation, UnshowableRequest, fields_of
from diana.core.ports import Ports
from diana.core.runtime import Profile, Runtime
from diana.core.storage.schema import connect
from diana.core.system.browser import UnsafeURL, open_url, web_url
from diana.tui.app import DianaApp
from diana.tui.modals.elicitation import ElicitationScreen
from textual.pilot import Pilot
from textual.widgets import Static

from .browsers import browser_recording
from .commands import diana
from .conftest import stepping_clock
from .scenarios import app_of, build_app, settle, until
from .structured_log import log_events

FIXTURES = Path(__file__).parent / "fixtures"
FLOOD = {"command": sys.executable, "args": [str(FIXTURES / "flood_server.py")]}
ALLOW_FLOOD = {"servers": {"fl": "allow"}}  # its tools; sampling stays a person's decision


def configure(config_dir: Path, **entry: Any) -> None:
    servers = {"mcpServers": {"fl": {**FLOOD, **entry}}}
    (config_dir / "mcp-servers.json").write_text(json.dumps(servers))
    (config_dir / "policy.json").write_text(json.dumps(ALLOW_FLOOD))


def flood_app(tmp_path: Path) -> DianaApp:
    """The app over the flood server, its tools allowed."""
    app = build_app(tmp_path, {"fl": FLOOD})
    (app.paths.config_dir / "policy.json").write_text(json.dumps(ALLOW_FLOOD))
    return app


@asynccontextmanager
async def running(app: DianaApp) -> AsyncIterator[tuple[Pilot[int], Runtime]]:
    """The app running, settled: its pilot and its runtime."""
    async with asyncio.timeout(120), app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        runtime = app_of(pilot).core._runtime
        assert runtime is not None
        yield pilot, runtime


def stored_proposals(data_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every proposal's status and arguments, read from the file once diana has closed it."""
    with sqlite3.connect(data_dir / "diana.db") as db:
        rows = db.execute("SELECT status, arguments FROM proposals").fetchall()
    return [(status, json.loads(arguments)) for status, arguments in rows]


@contextmanager
def lost_task_errors() -> Iterator[list[str]]:
    """What asyncio reports about tasks whose errors nobody retrieved, while inside."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(
        lambda _loop, context: reported.append(
            f"{context.get('message')}: {context.get('exception')!r}"
        )
    )
    try:
        yield reported
    finally:
        gc.collect()  # a finished task's lost error is reported when it is collected
        loop.set_exception_handler(previous)


# --- Questions (elicitation) ------------------------------------------------------------


@pytest.mark.processes
async def test_sixty_questions_at_once_are_asked_one_at_a_time_and_past_eight_declined(
    config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir)
    asking = 0
    most_at_once = 0
    release = asyncio.Event()

    async def person(_request: Elicitation) -> Answer:
        nonlocal asking, most_at_once
        asking += 1
        most_at_once = max(most_at_once, asking)
        try:
            await release.wait()
            return Answer("cancel")
        finally:
            asking -= 1

    ports = Ports(answer_server=person)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        ports=ports,
    ) as runtime:
        await runtime.mcp.wait_ready()
        call = asyncio.create_task(runtime.call_tool("fl_ask_many", {"count": 60}, origin="t"))
        await until(lambda: runtime.elicitations.waiting == 7, within=30)
        await until(lambda: len(log_events(data_dir, "elicitation.declined")) == 52, within=30)
        release.set()
        result = await asyncio.wait_for(call, 30)
    assert result.data == "cancel 8, decline 52"
    assert most_at_once == 1
    (reason,) = {r["reason"] for r in log_events(data_dir, "elicitation.declined")}
    assert reason == "8 requests of MCP server fl already wait for a person (at most 8)"


@pytest.mark.processes
async def test_sixty_questions_show_one_dialog_with_the_count_and_ctrl_q_still_quits(
    tmp_path: Path,
) -> None:
    app = flood_app(tmp_path)
    async with running(app) as (pilot, runtime):

        def dialogs() -> list[ElicitationScreen]:
            return [s for s in app.screen_stack if isinstance(s, ElicitationScreen)]

        def count_shown() -> str:
            return str(app.screen.query_one("#elicit-waiting", Static).render())

        def declined() -> int:
            return len(log_events(app.paths.data_dir, "elicitation.declined"))

        first = asyncio.create_task(runtime.call_tool("fl_ask_many", {"count": 60}, origin="t"))
        await until(lambda: isinstance(app.screen, ElicitationScreen), within=30)
        await until(lambda: runtime.elicitations.waiting == 7, within=30)
        await until(lambda: declined() == 52, within=30)  # all sixty have come
        await pilot.pause()
        assert len(dialogs()) == 1
        assert count_shown() == "7 more waiting"
        for left in range(6, -1, -1):  # Esc on each: the next one comes, the count goes down
            shown = app.screen
            await pilot.press("escape")
            await until(lambda s=shown: app.screen is not s and dialogs() != [], within=10)
            await pilot.pause()
            assert len(dialogs()) == 1
            assert count_shown() == (f"{left} more waiting" if left else "")
        await pilot.press("escape")
        assert (await asyncio.wait_for(first, 30)).data == "cancel 8, decline 52"

        # Another flood, left open: Ctrl+Q quits, answering what waits.
        left_open = asyncio.create_task(runtime.call_tool("fl_ask_many", {"count": 60}, origin="t"))
        await until(lambda: runtime.elicitations.waiting == 7, within=30)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.return_code == 0
    assert app.core is None
    await asyncio.wait_for(asyncio.gather(left_open, return_exceptions=True), 10)
    assert len(log_events(app.paths.data_dir, "elicitation.cancelled")) == 8


@pytest.mark.processes
async def test_a_huge_question_is_cut_and_one_with_too_many_choices_is_refused(
    config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir)
    asked: list[Elicitation] = []

    async def person(request: Elicitation) -> Answer:
        asked.append(request)
        return Answer("decline")

    ports = Ports(answer_server=person)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
        ports=ports,
    ) as runtime:
        await runtime.mcp.wait_ready()

        async def ask_huge(message_kib: int, choices: int) -> Any:
            arguments = {"message_kib": message_kib, "choices": choices}
            return await runtime.call_tool("fl_ask_huge", arguments, origin="t")

        assert (await ask_huge(5 * 1024, 3)).data == "decline None"
        (huge,) = asked
        assert huge.message.endswith("… [cut at 16 KiB of 5.0 MiB]")
        assert utf8_size(huge.message) < 16 * 1024 + 100

        refused = await ask_huge(1, 200_000)
        assert "property 'pick' has 200,000 choices; diana shows at most 1,000" in (
            refused.error or ""
        )
        assert len(asked) == 1  # never put to the person

        assert (await ask_huge(1, 1_000)).data == "decline None"
        assert len(asked[-1].fields[0].choices) == 1_000


def test_a_form_past_its_limits_is_refused_naming_them() -> None:
    many = {f"f{n}": {"type": "string"} for n in range(101)}
    with pytest.raises(UnshowableRequest, match="the form has 101 fields; diana shows at most 100"):
        fields_of({"type": "object", "properties": many})
    wordy = {"type": "string", "description": "w" * (300 << 10)}
    with pytest.raises(UnshowableRequest, match=r"schema is 300\.1 KiB; .* at most 256 KiB"):
        fields_of({"type": "object", "properties": {"x": wordy}})
    (field,) = fields_of({"properties": {"x": {"type": "string", "title": "t" * 5000}}})
    assert field.title == "t" * 1024 + "… [cut at 1 KiB of 4.9 KiB]"
    (choice,) = fields_of({"properties": {"x": {"enum": [str(n) for n in range(1000)]}}})
    assert choice.describe().endswith("… and 980 more (or type a number)")


@pytest.mark.processes
def test_diana_shows_a_huge_question_cut(config_dir: Path, data_dir: Path) -> None:
    configure(config_dir)
    arguments = json.dumps({"message_kib": 5 * 1024, "choices": 3})
    done = diana(config_dir, data_dir, "call", "fl_ask_huge", "--args", arguments)
    assert (done.returncode, done.stdout) == (0, "decline None\n"), done.stderr
    assert "… [cut at 16 KiB of 5.0 MiB]" in done.stderr
    assert len(done.stderr) < 20 * 1024


# --- Requests to the local model (sampling) ---------------------------------------------


def test_a_requests_text_is_shared_fairly_and_what_cannot_be_cut_is_refused() -> None:
    def request(system: str, *texts: str) -> dict[str, Any]:
        messages = [{"role": "user", "text": text} for text in texts]
        return {"server": "fl", "messages": messages, "system_prompt": system, "reply_limit": 16}

    mib = "z" * (1 << 20)
    kept = kept_arguments(request(mib, "short question", mib))
    share = ((256 << 10) - len("short question")) // 2
    assert kept["messages"][0]["text"] == "short question"  # whole: it fits its share
    for text in (kept["system_prompt"], kept["messages"][1]["text"]):
        assert text == "z" * share + f"… [cut at {share / 1024:.1f} KiB of 1 MiB]"
    assert kept_arguments(request("be brief", "hi")) == request("be brief", "hi")

    looking = request("", "look")
    looking["messages"][0]["images"] = [{"mimeType": "image/png", "data": "A" * (3 << 20)}]
    with pytest.raises(SamplingRefused, match="its images are 3 MiB; diana keeps at most 2 MiB"):
        kept_arguments(looking)
    with pytest.raises(SamplingRefused, match=r"\(5,000 messages\); diana keeps at most 64 KiB"):
        kept_arguments(request("", *["hi"] * 5000))
    with pytest.raises(
        SamplingRefused, match=r"the request is 9\.0 MiB; diana takes at most 8 MiB"
    ):
        kept_arguments(request("", "y" * (9 << 20)))


@pytest.mark.processes
async def test_a_flood_of_requests_to_the_model_that_time_out_leaves_nothing_behind(
    config_dir: Path, data_dir: Path
) -> None:
    """Nobody decides, the call times out, diana closes: every proposal made is taken back,
    none past the bound was made, and no task's error was lost along the way."""
    configure(config_dir, toolTimeout=2)
    with lost_task_errors() as lost:
        async with await Runtime.open(
            Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
        ) as runtime:
            await runtime.mcp.wait_ready()
            result = await runtime.call_tool("fl_sample_many", {"count": 60, "kib": 8}, origin="t")
            told = str(result.data or "") + (result.error or "")
            assert "no one decided" in told or "did not finish within 2 s" in told
        # What outlived the database runs to its end (and would fail) before errors are counted
        outlived = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if outlived:
            await asyncio.wait(outlived, timeout=30)
    assert lost == []
    statuses = [status for status, _arguments in stored_proposals(data_dir)]
    assert set(statuses) == {"rejected"}  # none left pending
    assert 0 < len(statuses) <= 8
    refused = log_events(data_dir, "sampling.refused")
    assert len(refused) == 60 - len(statuses)
    assert "already has 8 requests to the local model in hand (at most 8)" in refused[0]["reason"]


@pytest.mark.processes
async def test_huge_requests_to_the_model_are_refused_or_kept_cut(
    config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        await runtime.mcp.wait_ready()
        refused = await runtime.call_tool(
            "fl_sample_many", {"count": 2, "kib": 9 * 1024}, origin="t"
        )
        assert refused.data == (
            "error -32603 (diana cannot ask the local model: the request is 9.0 MiB; "
            "diana takes at most 8 MiB) 2"
        )
        waiting = asyncio.create_task(
            runtime.call_tool("fl_sample_many", {"count": 4, "kib": 2 * 1024}, origin="t")
        )
        for _ in range(1000):
            if len(await runtime.approvals.store.select((ProposalStatus.PENDING,))) == 4:
                break
            await asyncio.sleep(0.02)
    await asyncio.gather(waiting, return_exceptions=True)  # closing ended it
    proposals = stored_proposals(data_dir)
    assert [status for status, _arguments in proposals] == ["rejected"] * 4
    for _status, arguments in proposals:
        (message,) = arguments["messages"]
        assert message["text"].endswith("… [cut at 256 KiB of 2.0 MiB]")
    stored = sum(path.stat().st_size for path in data_dir.glob("diana.db*"))
    assert stored < 4 * 1024 * 1024  # four requests of 2 MiB, and two of 9 MiB, in 4 MiB


# --- URLs a server asks a person to open ------------------------------------------------


def test_only_http_and_https_urls_are_opened_and_never_as_an_option() -> None:
    assert web_url("https://example.com/a?b=c#d") == "https://example.com/a?b=c#d"
    assert web_url("HTTP://Example.com") == "http://Example.com"
    for bad, problem in (
        ("javascript:alert(1)", "a javascript: URL is not opened: diana opens only http and"),
        ("file:///etc/passwd", "a file: URL is not opened"),
        ("--gpu-launcher=touch X", "which has no scheme, is not opened"),
        ("-https://example.com", "which has no scheme, is not opened"),
        ("data:text/html,<script>", "a data: URL is not opened"),
        ("https://example.com/ --new-window", "holds a space or a control character"),
        ("https://example.com/\n", "holds a space or a control character"),
        ("https:///path", "names no host"),
        ("https://" + "a" * 9000 + ".example", "diana opens at most 8 KiB"),
    ):
        with pytest.raises(UnsafeURL, match=problem.replace("(", r"\(")):
            web_url(bad)


@pytest.mark.processes
async def test_a_url_diana_will_not_open_never_reaches_the_browser_and_a_good_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with browser_recording(tmp_path, monkeypatch) as record:
        app = flood_app(tmp_path)
        async with running(app) as (pilot, runtime):

            async def ask_to_open(url: str) -> Any:
                """The server asks; whatever dialog comes, Ctrl+O then Ctrl+S."""
                call = asyncio.create_task(
                    runtime.call_tool("fl_ask_url", {"url": url}, origin="t")
                )
                await until(lambda: call.done() or isinstance(app.screen, ElicitationScreen), 30)
                if isinstance(app.screen, ElicitationScreen):
                    await pilot.press("ctrl+o")
                    await until(lambda: record.exists(), within=10)
                    await pilot.press("ctrl+s")
                return (await asyncio.wait_for(call, 30)).data

            for bad in ("javascript:alert(1)", "file:///etc/passwd", "--gpu-launcher=touch X"):
                assert await ask_to_open(bad) == "decline"
            assert not record.exists()
            reasons = [r["reason"] for r in log_events(app.paths.data_dir, "elicitation.declined")]
            assert reasons[0].startswith("a javascript: URL is not opened")
            assert reasons[1].startswith("a file: URL is not opened")
            assert "'--gpu-launcher=touch X', which has no scheme, is not opened" in reasons[2]

            good = "https://example.com/consent?step=1&x=--gpu-launcher"
            assert await ask_to_open(good) == "accept"
            assert record.read_text().splitlines() == [good]  # one argument, not an option


@pytest.mark.processes
async def test_open_url_refuses_what_web_url_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with browser_recording(tmp_path, monkeypatch) as record:
        with pytest.raises(UnsafeURL):
            await open_url("--gpu-launcher=touch X")
        assert await open_url("http://127.0.0.1:9/page") is True
    assert record.read_text().splitlines() == ["http://127.0.0.1:9/page"]


# --- What a cancelled read leaves behind ------------------------------------------------


async def test_a_read_cancelled_halfway_leaves_no_stale_snapshot_behind(tmp_path: Path) -> None:
    """A read cut short by a cancellation runs to its end: a statement left open would hold
    an old snapshot, and every later write on the connection would be refused as busy."""
    db = await connect(tmp_path / "diana.db", patience=1.0)
    other = await connect(tmp_path / "diana.db")
    for n in range(200):
        await db.execute("INSERT INTO facts (content, created_at) VALUES (?, 'x')", (f"f{n}",))
    reading = asyncio.create_task(db.read("SELECT content FROM facts"))
    await asyncio.sleep(0)  # the statement is running in the database's thread
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    await other.execute("INSERT INTO facts (content, created_at) VALUES ('elsewhere', 'x')")
    await db.execute("INSERT INTO facts (content, created_at) VALUES ('here', 'x')")
    assert len(await db.read("SELECT content FROM facts")) == 202
    await other.close()
    await db.close()
