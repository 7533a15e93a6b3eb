"""Ollama's models against a fake Ollama over real HTTP, with the real ollama client: the list
with capabilities, context length and the loaded model; one shown; pulls with their progress,
cancelled, refused, broken off and continued; removal; and the chat sending a model only what
it can take (no tools to one without `tools`, no `think` to one without `thinking`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from diana.core.chat.turn_events import Progress, TurnFinished
from diana.core.llm.local_models import PullProgress
from diana.core.llm.ollama import LLMProblem
from diana.core.models import ErrorCode
from diana.core.runtime import Profile, Runtime
from diana.tui.app import DianaApp
from diana.tui.modals.dialogs import ConfirmDialog
from diana.tui.modals.models import ModelsScreen
from diana.tui.panes import ChatPane
from textual.pilot import Pilot
from textual.widgets import Static

from .chat_turns import Events, chat_requests, configure
from .commands import diana_argv, diana_here
from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .network import closed_port
from .scenarios import app_of, build_app, settle, type_command
from .waits import work_done

MODELS = ["qwen3:30b-a3b", "gemma3:1b", "llava:7b"]
CAPABILITIES = {
    "qwen3:30b-a3b": ["completion", "tools", "thinking"],
    "gemma3:1b": ["completion"],
    "llava:7b": ["completion", "vision"],
}


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(
        models=MODELS,
        capabilities=CAPABILITIES,
        context_length={"gemma3:1b": 32768},
        loaded=["qwen3:30b-a3b"],
        pullable={"smollm2:135m": 4000},
    ) as server:
        yield server


async def open_runtime(config_dir: Path, data_dir: Path, host: str, **llm: Any) -> Runtime:
    configure(config_dir, host=host, **llm)
    return await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


# -- the list, one model --------------------------------------------------------------------


async def test_list_has_capabilities_context_length_and_the_loaded_model(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    runtime = await open_runtime(config_dir, data_dir, fake.url)
    try:
        models = {m.name: m for m in await runtime.chat.models.installed()}
        again = await runtime.chat.models.installed()
    finally:
        await runtime.close()
    assert sorted(models) == sorted(MODELS)
    assert models["qwen3:30b-a3b"].can("tools") and models["qwen3:30b-a3b"].can("thinking")
    assert models["qwen3:30b-a3b"].loaded and not models["gemma3:1b"].loaded
    assert not models["gemma3:1b"].can("tools")
    assert models["llava:7b"].can("vision")
    assert models["gemma3:1b"].context_length == 32768
    assert models["llava:7b"].context_length == 40960
    assert models["gemma3:1b"].quantization == "Q4_K_M"
    assert models["gemma3:1b"].family == "gemma"
    assert len(again) == 3
    assert sorted(fake.shown) == sorted(MODELS)  # once per digest: the second list asked none


def test_cli_list_show_and_json(fake: FakeOllama, config_dir: Path, data_dir: Path) -> None:
    configure(config_dir, host=fake.url, model="gemma3:1b")
    listed = diana_here(config_dir, data_dir, "models")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "SIZE",
        "PARAMS",
        "QUANT",
        "CONTEXT",
        "CAN",
        "FAMILY",
        "LOADED",
    ]
    gemma = next(line for line in lines if line.startswith("gemma3:1b"))
    assert "gemma3:1b *" in gemma and "32k" in gemma
    qwen = next(line for line in lines if line.startswith("qwen3"))
    assert "tools,thinking" in qwen and qwen.rstrip().endswith("loaded")
    as_json = json.loads(diana_here(config_dir, data_dir, "models", "list", "--json").stdout)
    assert {m["name"]: m["capabilities"] for m in as_json} == CAPABILITIES
    shown = diana_here(config_dir, data_dir, "models", "show", "llava:7b", "--json")
    assert json.loads(shown.stdout)["capabilities"] == ["completion", "vision"]
    text = diana_here(config_dir, data_dir, "models", "show", "gemma3:1b").stdout
    assert "context      32768 tokens" in text


def test_unknown_model_and_unreachable_ollama_are_one_line(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, host=fake.url)
    shown = diana_here(config_dir, data_dir, "models", "show", "nosuch:1b")
    assert shown.returncode == 2
    assert (
        shown.stderr
        == 'diana: model "nosuch:1b" is not installed — "diana models pull nosuch:1b"\n'
    )
    pulled = diana_here(config_dir, data_dir, "models", "pull", "nosuch:1b")
    assert pulled.returncode == 2
    assert pulled.stderr == (
        'diana: Ollama could not pull "nosuch:1b": pull model manifest: file does not exist\n'
    )
    configure(config_dir, host=f"http://127.0.0.1:{closed_port()}")
    down = diana_here(config_dir, data_dir, "models")
    assert down.returncode == 1
    assert down.stderr.startswith("diana: Ollama is not reachable at http://127.0.0.1:")
    assert len(down.stderr.splitlines()) == 1


# -- pulls ------------------------------------------------------------------------------------


def test_cli_pull_piped_prints_percentages(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, host=fake.url)
    pulled = diana_here(config_dir, data_dir, "models", "pull", "smollm2:135m")
    assert pulled.returncode == 0, pulled.stderr
    lines = pulled.stdout.splitlines()
    assert [line.rsplit(" ", 1)[-1] for line in lines if line.endswith("%")] == [
        "25%",
        "50%",
        "75%",
        "100%",
    ]
    assert lines[-1] == "pulled smollm2:135m"
    assert "\r" not in pulled.stdout and "\x1b" not in pulled.stdout
    assert "smollm2:135m" in fake.models


def on_a_terminal(argv: list[str], answer: bytes | None = None) -> tuple[int, bytes]:
    """Run ``argv`` on a pseudo-terminal (answering its first question with ``answer``):
    its exit code and all it showed."""
    pid, fd = os.forkpty()
    if pid == 0:  # the child: diana on a terminal
        os.execv(argv[0], argv)
    output = b""
    while answer is not None and b"[y/N]" not in output:
        output += os.read(fd, 1024)
    if answer is not None:
        os.write(fd, answer)
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output


@pytest.mark.processes  # on a terminal (a pty)
def test_cli_pull_on_a_terminal_redraws_one_bar(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, host=fake.url)
    code, shown = on_a_terminal(diana_argv(config_dir, data_dir, "models", "pull", "smollm2:135m"))
    assert code == 0
    redrawn = shown.split(b"\r\x1b[2K")
    bars = [line for line in redrawn if b"%" in line]
    assert [bar.split(b"]")[0].split(b"[")[1].count(b"#") for bar in bars] == [8, 15, 22, 30]
    assert b"100% 4.0 kB/4.0 kB" in bars[-1]
    assert shown.rstrip().endswith(b"pulled smollm2:135m")


async def test_pull_streams_progress_and_installs(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    runtime = await open_runtime(config_dir, data_dir, fake.url)
    try:
        steps = [step async for step in runtime.chat.models.pull("smollm2:135m")]
        installed = [m.name for m in await runtime.chat.models.installed()]
    finally:
        await runtime.close()
    percents = [s.percent for s in steps if s.percent is not None]
    assert percents == [25.0, 50.0, 75.0, 100.0]
    assert steps[-1] == PullProgress("success") and steps[-1].done
    assert "smollm2:135m" in installed


async def test_a_pull_is_cancelled_and_the_connection_closed(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    fake.pull_stall_after = 1
    runtime = await open_runtime(config_dir, data_dir, fake.url)
    seen: list[PullProgress] = []
    first = asyncio.Event()

    async def pull() -> None:
        async for step in runtime.chat.models.pull("smollm2:135m"):
            seen.append(step)
            if step.percent is not None:
                first.set()

    try:
        task = asyncio.ensure_future(pull())
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await runtime.close()
    assert [s.percent for s in seen if s.percent is not None] == [25.0]
    assert "smollm2:135m" not in fake.models


async def test_ollama_down_mid_pull_is_one_line_and_pulling_again_continues(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    fake.pull_drop_after = 2
    runtime = await open_runtime(config_dir, data_dir, fake.url)
    first: list[PullProgress] = []
    try:
        with pytest.raises(LLMProblem) as broke:
            async for step in runtime.chat.models.pull("smollm2:135m"):
                first.append(step)
        second = [step async for step in runtime.chat.models.pull("smollm2:135m")]
    finally:
        await runtime.close()
    assert broke.value.code is ErrorCode.OLLAMA_UNAVAILABLE
    assert broke.value.message == (
        'the pull of "smollm2:135m" broke off (RemoteProtocolError) — pull it again to '
        "continue: Ollama keeps what it has downloaded"
    )
    assert [s.percent for s in first if s.percent is not None] == [25.0, 50.0]
    assert [s.percent for s in second if s.percent is not None] == [75.0, 100.0]
    assert second[-1].done


@pytest.mark.processes  # SIGINT to the process
def test_cli_pull_interrupted_exits_130_with_one_line(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    fake.pull_stall_after = 1
    configure(config_dir, host=fake.url)
    process = subprocess.Popen(
        diana_argv(config_dir, data_dir, "models", "pull", "smollm2:135m"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:  # the first step has been shown
            if line.endswith("%\n"):
                break
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert err.splitlines() == [
        "diana: pull of smollm2:135m stopped at 25% — pull it again to continue where it stopped",
        "diana: interrupted",
    ]


# -- removal ------------------------------------------------------------------------------------


def test_cli_rm_needs_yes_without_a_terminal(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    configure(config_dir, host=fake.url)
    refused = diana_here(config_dir, data_dir, "models", "rm", "llava:7b")
    assert refused.returncode == 2
    assert refused.stderr == (
        "diana: removing llava:7b needs --yes when there is no terminal to ask on\n"
    )
    assert "llava:7b" in fake.models
    removed = diana_here(config_dir, data_dir, "models", "rm", "llava:7b", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout == "removed llava:7b\n"
    assert fake.deleted == ["llava:7b"]
    again = diana_here(config_dir, data_dir, "models", "rm", "llava:7b", "--yes")
    assert again.returncode == 2
    assert (
        again.stderr == 'diana: model "llava:7b" is not installed — "diana models pull llava:7b"\n'
    )


@pytest.mark.processes  # on a terminal (a pty)
def test_cli_rm_asks_on_a_terminal(fake: FakeOllama, config_dir: Path, data_dir: Path) -> None:
    configure(config_dir, host=fake.url)
    for answer, kept in ((b"n\n", True), (b"y\n", False)):
        argv = diana_argv(config_dir, data_dir, "models", "rm", "gemma3:1b")
        code, output = on_a_terminal(argv, answer)
        assert code == 0
        assert ("gemma3:1b" in fake.models) is kept
        assert (b"kept gemma3:1b" if kept else b"removed gemma3:1b") in output


# -- the chat sends what the model can take -------------------------------------------------


async def test_no_tools_to_a_model_without_tools_and_said_once(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    fake.add({"content": "hello"}, {"content": "again"})
    runtime = await open_runtime(
        config_dir, data_dir, fake.url, model="gemma3:1b", think=True, gap_check=False
    )
    events = Events()
    try:
        await runtime.chat.run_turn("hi", events)
        await runtime.chat.run_turn("and again", events)
    finally:
        await runtime.close()
    requests = chat_requests(fake)
    assert len(requests) == 2
    assert all(not r.get("tools") for r in requests)
    assert all("think" not in r for r in requests)
    notices = [e.text for e in events.of(Progress) if e.notice]
    assert notices == ['model "gemma3:1b" cannot call tools — it answers without them']
    assert len(events.of(TurnFinished)) == 2


async def test_tools_and_think_still_sent_to_a_model_that_takes_them(
    fake: FakeOllama, config_dir: Path, data_dir: Path
) -> None:
    fake.add({"content": "hello"}, {"content": "seen"})
    runtime = await open_runtime(config_dir, data_dir, fake.url, think=True, gap_check=False)
    events = Events()
    try:
        await runtime.chat.run_turn("hi", events)
        runtime.chat.model = "llava:7b"  # sees, but neither thinks nor calls tools
        await runtime.chat.run_turn("look", events)
    finally:
        await runtime.close()
    first, second = chat_requests(fake)
    assert first["tools"] and first["think"] is True
    assert not second.get("tools") and "think" not in second


# -- the Models view and the chat's commands ---------------------------------------------------


async def until(condition: Callable[[], bool], within: float = 15.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the view's own state
            await asyncio.sleep(0.02)


async def models_view(pilot: Pilot[int]) -> ModelsScreen:
    app = app_of(pilot)
    await settle(pilot)
    await pilot.press("f2", "ctrl+l")
    await until(lambda: isinstance(app.screen, ModelsScreen) and bool(app.screen.models))
    await work_done(app, "models")
    screen = app.screen
    assert isinstance(screen, ModelsScreen)
    return screen


def rows(screen: ModelsScreen) -> list[list[str]]:
    table = screen.table
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_view_lists_marks_and_pull_shows_progress_then_esc_stops_it(
    fake: FakeOllama, tmp_path: Path
) -> None:
    fake.pull_stall_after = 2
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await models_view(pilot)
        listed = {row[1]: row for row in rows(screen)}
        assert listed["qwen3:30b-a3b"][0] == "▶●"  # the chat's, and loaded
        assert listed["gemma3:1b"][0].strip() == "" and listed["gemma3:1b"][-1] == "-"
        assert listed["llava:7b"][-1] == "vision"
        assert screen.table.cursor_row == 2  # on the chat's model
        await pilot.press("p", *"smollm2:135m", "enter")
        await until(lambda: screen.step is not None and screen.step.percent == 50.0)
        progress = str(screen.query_one("#models-progress", Static).render())
        assert "smollm2:135m" in progress and "50%" in progress
        assert "Stop pull" in footer_text(app)
        await pilot.press("escape")
        await work_done(app, "models-pull", "models")
        assert isinstance(app.screen, ModelsScreen)  # Esc stopped the pull, not the view
        shown = str(screen.query_one("#models-progress", Static).render())
        assert shown == "■ pull of smollm2:135m stopped at 50% — pulling again continues"
        assert "smollm2:135m" not in fake.models
        await pilot.press("escape")
        assert not isinstance(app.screen, ModelsScreen)


async def test_view_ctrl_c_stops_a_pull_and_a_finished_one_is_listed(
    fake: FakeOllama, tmp_path: Path
) -> None:
    fake.pull_stall_after = 1
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        screen = await models_view(pilot)
        await pilot.press("p", *"smollm2:135m", "enter")
        await until(lambda: screen.step is not None and screen.step.percent == 25.0)
        await pilot.press("ctrl+c")
        await work_done(app, "models-pull", "models")
        assert "stopped at 25%" in str(screen.query_one("#models-progress", Static).render())
        fake.pull_stall_after = None
        await pilot.press("p", *"smollm2:135m", "enter")
        await until(lambda: any(m.name == "smollm2:135m" for m in screen.models))
        assert str(screen.query_one("#models-progress", Static).render()) == "✓ pulled smollm2:135m"
        await pilot.press("p", *"nosuch:1b", "enter")
        await work_done(app, "models-pull")
        assert str(screen.query_one("#models-progress", Static).render()) == (
            '✗ Ollama could not pull "nosuch:1b": pull model manifest: file does not exist'
        )


async def test_view_removes_after_yes_and_enter_chooses_the_chats_model(
    fake: FakeOllama, tmp_path: Path
) -> None:
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        screen = await models_view(pilot)
        await pilot.press("up", "up")  # from the chat's model to gemma3:1b
        await pilot.press("d")
        await until(lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("n")
        await work_done(app, "models-remove")
        assert "gemma3:1b" in fake.models
        await pilot.press("d")
        await until(lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await work_done(app, "models-remove")
        await until(lambda: [m.name for m in screen.models] == ["llava:7b", "qwen3:30b-a3b"])
        assert fake.deleted == ["gemma3:1b"]
        await pilot.press("up", "enter")  # llava:7b
        await work_done(app, "models-use")
        assert app.core is not None and app.core._runtime.chat.model == "llava:7b"
        assert rows(screen)[0][0].startswith("▶")
        await pilot.press("escape")
        assert "llava:7b" in str(app.query_one(ChatPane).border_title)


async def test_chat_models_and_pull_commands(fake: FakeOllama, tmp_path: Path) -> None:
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, "/pull smollm2:135m")
        await work_done(app, "pull")
        lines = [str(s.render()) for s in app.query(".pull-progress")]
        assert lines == ["✓ pulled smollm2:135m — /model smollm2:135m uses it"]
        assert "smollm2:135m" in fake.models
        await type_command(pilot, "/pull nosuch:1b")
        await work_done(app, "pull")
        lines = [str(s.render()) for s in app.query(".pull-progress")]
        assert lines[-1] == (
            '✗ Ollama could not pull "nosuch:1b": pull model manifest: file does not exist'
        )
        await type_command(pilot, "/models")
        await until(lambda: isinstance(app.screen, ModelsScreen))


def footer_text(app: DianaApp) -> str:
    return " ".join(str(key.render()) for key in app.screen.query("FooterKey"))
