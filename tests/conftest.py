from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import webbrowser
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from diana.core.approvals.proposal_store import ProposalStore
from diana.core.runtime import Profile, Runtime
from diana.core.system import processes
from diana.core.system.clock import SteppingClock
from diana.core.system.telemetry import SECRET_VALUES

from .fixtures import forking
from .fixtures.fake_ollama import FakeOllama
from .oauth_guard import guarded  # noqa: F401  (a fixture: an OAuth-guarded MCP server)

# Deterministic rendering: local time is UTC, no animations, no cursor blink.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["TEXTUAL_ANIMATIONS"] = "none"

START = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)

# `sh .ci/dev test fast` runs every test not marked `processes` with DIANA_TEST_TIER=fast.
FAST_TIER = os.environ.get("DIANA_TEST_TIER") == "fast"


def _fork_server() -> None:
    """The MCP fixture servers this worker's tests start are forked from one process that
    has the SDK imported (tests/fixtures/forking.py): each worker gets a $TMPDIR of its own,
    which every process started here inherits (diana passes it on to the servers it
    starts), and the fork server's socket in it. The fork server ends with the worker.
    `mcp-server-time`, the reference server, is not a script of ours: its console script
    hands over too, through tests/fixtures/forked_time/sitecustomize.py on $PYTHONPATH (which
    diana passes on as well)."""
    own = tempfile.mkdtemp(prefix="diana-tests-")
    os.environ["TMPDIR"] = own
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (forking.FORKED_TIME, os.environ.get("PYTHONPATH")) if p
    )
    tempfile.tempdir = None
    server = subprocess.Popen(
        [sys.executable, forking.__file__, "serve", os.path.join(own, forking.SOCKET_NAME)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )

    def stop() -> None:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(own, ignore_errors=True)

    atexit.register(stop)


if not FAST_TIER:  # the fast tier starts no process
    _fork_server()


@pytest.fixture(autouse=True)
def fork_server_ready(request: pytest.FixtureRequest) -> None:
    """A test that starts processes finds the fork server taking them (it imports the SDK
    first, once a worker): else its first processes would start unforked."""
    if not FAST_TIER and request.node.get_closest_marker("processes") is not None:
        forking.wait_ready()


def stepping_clock() -> SteppingClock:
    """Wall time stands still (what is shown cannot depend on how often it was read);
    durations advance 3 ms per reading."""
    return SteppingClock(START, timedelta(milliseconds=3), wall_step=timedelta(0))


async def new_proposal(
    store: ProposalStore, tool: str = "files_delete_file", path: str = "a"
) -> str:
    """A pending proposal to delete ``path``, made as the gate makes them; its id."""
    proposal = await store.create(
        tool=tool,
        agent="mcp-files",
        arguments={"path": path},
        risk="irreversible",
        reason="test",
        confidence=None,
        correlation_id="c1",
        origin="test",
        at=START,
    )
    return proposal.id


def counting_ids(prefix: str = "c0ffee") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):06d}"


@pytest.fixture(autouse=True)
def nothing_left_running() -> Iterator[None]:
    """Whatever a test started through diana is ended and collected by the time it is over."""
    yield
    left = processes.open_trees()
    processes.end_all_now()  # so one test's leftovers do not fail the next
    assert left == [], f"processes diana started were left open: {left}"


@pytest.fixture(autouse=True)
def no_secrets_from_earlier_tests() -> Iterator[None]:
    """Values configured as secret are masked for the rest of a process: each test starts
    with none, so one test's secrets never change what another one shows."""
    SECRET_VALUES._values.clear()  # type: ignore[attr-defined]
    SECRET_VALUES._pattern = None  # type: ignore[attr-defined]
    yield


@pytest.fixture(autouse=True)
def browser_chosen_anew() -> Iterator[None]:
    """The standard library chooses the browser once per process, from $BROWSER as it was
    then: each test that sets $BROWSER gets its own, whichever test ran before it."""
    webbrowser._tryorder = None  # type: ignore[attr-defined]
    webbrowser._browsers.clear()  # type: ignore[attr-defined]
    yield


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """A config dir whose Obsidian vault is inside the test's own directory."""
    path = tmp_path / "config"
    path.mkdir()
    (path / "settings.json").write_text(
        json.dumps({"obsidian": {"vault": str(tmp_path / "vault"), "daily_folder": "Daily"}})
    )
    (path / "mcp-servers.json").write_text("[]")  # tests that want servers write their own
    return path


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    """A fake Ollama on 127.0.0.1 (tests/fixtures/fake_ollama.py), scripted by the test."""
    with FakeOllama() as server:
        yield server


@pytest.fixture
def unforked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fixture servers this test starts run in the very processes started for them, not
    forked from the fork server (tests/fixtures/forking.py): for a test that stops one with
    SIGSTOP, which no process can pass on."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def runtime(config_dir: Path, data_dir: Path) -> AsyncIterator[Runtime]:
    rt = await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    )
    try:
        yield rt
    finally:
        await rt.close()


# --- The fast tier: tests that run in one process --------------------------------------------
# A test in the fast tier that starts an OS process (diana, the app on a terminal, an MCP
# server) fails, naming what it started, so the mark is never missing.
_started: list[str] = []

if FAST_TIER:
    _execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def _noting_execute_child(self: subprocess.Popen[bytes], args: object, *rest: object) -> None:
        shown = args if isinstance(args, str) else " ".join(str(a) for a in list(args)[:3])  # type: ignore[call-overload]
        _started.append(shown)
        return _execute_child(self, args, *rest)  # type: ignore[no-any-return]

    subprocess.Popen._execute_child = _noting_execute_child  # type: ignore[attr-defined]

    def _noting(name: str) -> Callable[..., object]:
        started = getattr(os, name)

        def noting(*args: object) -> object:
            _started.append(f"os.{name}()")
            return started(*args)

        return noting

    for _name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):  # a terminal's test
        setattr(os, _name, _noting(_name))


@pytest.fixture(autouse=True)
def in_one_process_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the fast tier, a test that starts a process must say so with the mark."""
    _started.clear()
    yield
    if FAST_TIER and _started and request.node.get_closest_marker("processes") is None:
        pytest.fail(
            f"this test started a process ({_started[0]}): mark it @pytest.mark.processes "
            "(it then runs in `sh .ci/dev test`, not in the fast tier)"
        )


# --- An app under test draws no frame it was not asked for -------------------------------------
# An app under Pilot lays out and renders each frame as a terminal's would, and nothing reads
# it: a fifth to a third of an app test's CPU. So the frames are laid out (what a test reads of
# the widgets is the same) but rendered only when a test asks what is on the screen (a
# screenshot, a snapshot, screen_lines), and once more, whole, as the app closes: a state that
# cannot be drawn fails its test there. A test of what is drawn frame by frame is marked
# `paints`; DIANA_TEST_FRAMES=all draws every frame of every test.
EVERY_FRAME = os.environ.get("DIANA_TEST_FRAMES") == "all"
_painting = EVERY_FRAME


@pytest.fixture(autouse=True)
def frames_drawn_as_asked(request: pytest.FixtureRequest) -> Iterator[None]:
    global _painting
    _painting = EVERY_FRAME or request.node.get_closest_marker("paints") is not None
    yield


if not EVERY_FRAME:
    from textual.app import App
    from textual.screen import Screen

    _draw = Screen._compositor_refresh
    _shutdown = App._shutdown

    def _drawn_when_asked(self: Screen) -> None:  # type: ignore[type-arg]
        if _painting or not self.app.is_headless:
            return _draw(self)
        self._compositor._dirty_regions.clear()
        self._dirty_widgets.clear()
        self.app._update_mouse_over(self)
        return None

    async def _last_frame_drawn(self: App) -> None:  # type: ignore[type-arg]
        if not _painting and self.is_headless and self._screen_stack:
            screen = self.screen
            if screen.is_attached and screen.size.area:
                screen._compositor.render_update(full=True, screen_stack=self._background_screens)
        await _shutdown(self)

    Screen._compositor_refresh = _drawn_when_asked  # type: ignore[method-assign]
    App._shutdown = _last_frame_drawn  # type: ignore[method-assign]
