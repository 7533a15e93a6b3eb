"""A proposal that arrives while diana-tui is not the focused window rings the terminal's bell
and asks the terminal for a desktop notification; while it is focused, nothing is sent."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from diana.core.approvals.proposal import Proposal, ProposalStatus
from diana.core.config.settings import ConfigError, Paths, load_settings
from diana.tui.nudge import BELL, TITLE, desktop_notification, nudge, waiting_text

from .commands import diana
from .live_apps import read_log
from .processes import read_all
from .scenarios import prepare_dirs

FOCUS_OUT, FOCUS_IN = b"\x1b[O", b"\x1b[I"  # what a terminal sends with focus reporting on
OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def proposal(tool: str, risk: str) -> Proposal:
    return Proposal(
        id="p1",
        tool=tool,
        agent="a",
        arguments={},
        risk=risk,
        reason="",
        confidence=None,
        correlation_id="c",
        origin="chat",
        status=ProposalStatus.PENDING,
        created_at="2026-01-01T00:00:00+00:00",
    )


def test_the_nudge_follows_the_setting_and_the_terminal() -> None:
    waiting = [proposal("files_delete_file", "irreversible"), proposal("obsidian_log", "x")]
    text = "files_delete_file (irreversible) waits in Approvals, and 1 more"
    assert waiting_text(waiting) == text
    plain: dict[str, str] = {"TERM": "xterm-256color"}
    assert nudge(waiting, "none", plain) == ""
    assert nudge(waiting, "bell", plain) == BELL
    assert nudge(waiting, "desktop", plain) == f"{BELL}\x1b]9;{TITLE}: {text}\a"
    # Terminals that speak OSC 777 get it; inside tmux it is passed through, ESC doubled.
    foot = desktop_notification("T", "b", {"TERM": "foot"})
    assert foot == "\x1b]777;notify;T;b\a"
    assert desktop_notification("T", "b", {"TERM": "xterm", "VTE_VERSION": "7600"}) == foot
    tmux = desktop_notification("T", "b", {"TERM": "tmux-256color", "TMUX": "/tmp/t,1,0"})
    assert tmux == "\x1bPtmux;\x1b\x1b]9;T: b\a\x1b\\"
    # A tool name cannot end the sequence early or add a field.
    hostile = desktop_notification("T", "x\x1b]0;owned\a;y\x9c", {"TERM": "foot"})
    assert hostile == "\x1b]777;notify;T;x ]0 owned y\a"
    assert nudge([], "desktop", plain) == ""


def test_a_notify_setting_that_is_not_known_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"notify": "loud"}')
    with pytest.raises(ConfigError) as raised:
        load_settings(Paths.resolve(tmp_path, tmp_path / "data"))
    assert "settings.json" in str(raised.value) and "notify" in raised.value.message


def _until(condition: Callable[[], Any], within: float = 60.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("not within the time allowed")


def _nudges(data_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_log(data_dir) if e.get("event") == "approvals.nudge"]


@pytest.mark.processes
def test_a_proposal_from_another_process_nudges_only_when_the_app_is_not_focused(
    tmp_path: Path,
) -> None:
    """diana-tui on a real terminal (a pty), a `diana call` beside it making proposals."""
    config_dir, data_dir = prepare_dirs(tmp_path, extra={"notify": "desktop"})
    terminal, app_side = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("TMUX", "VTE_VERSION")}
    dirs = ["--config-dir", str(config_dir), "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [sys.executable, "-m", "diana.tui.app", *dirs],
        stdin=app_side,
        stdout=app_side,
        stderr=app_side,
        env=dict(environ, TERM="xterm-256color"),
    )
    os.close(app_side)
    drawn: list[bytes] = []
    reader = threading.Thread(target=read_all, args=(terminal, drawn), daemon=True)
    reader.start()

    def output(since: int) -> str:
        return b"".join(drawn[since:]).decode(errors="replace")

    def typed_and_drawn(text: str) -> None:
        """Type into the chat's input and wait until the terminal shows it."""
        since = len(drawn)
        os.write(terminal, text.encode())
        _until(lambda: text in output(since))

    def propose(entry: str) -> None:
        made = diana(
            config_dir, data_dir, "call", "obsidian_log", "--args", f'{{"entry": "{entry}"}}'
        )
        assert "needs approval" in made.stderr + made.stdout, made.stderr

    try:
        _until(lambda: "\x1b[?1004h" in output(0))  # focus reporting on: the app runs
        _until(lambda: any(e.get("event") == "runtime.started" for e in read_log(data_dir)))
        os.write(terminal, FOCUS_OUT)
        # fixed wait: a focus report is read as its own sequence only with a pause after it,
        # and nothing drawn tells it was read (a key would give the app its focus back)
        time.sleep(0.5)
        mark = len(drawn)
        propose("away")
        (away,) = _until(lambda: _nudges(data_dir))
        assert (away["focused"], away["sent"], away["notify"]) == (False, True, "desktop")
        told = _until(lambda: "\x1b]9;" in output(mark) and output(mark))
        assert f"\x1b]9;{TITLE}: obsidian_log (reversible with delay) waits in Approvals\a" in told
        assert BELL in OSC.sub("", told)  # the bell itself, not only an OSC's terminator

        os.write(terminal, FOCUS_IN)
        time.sleep(0.5)  # fixed wait: as above
        mark = len(drawn)
        propose("here")
        _until(lambda: len(_nudges(data_dir)) == 2)
        here = _nudges(data_dir)[1]
        assert (here["focused"], here["sent"]) == (True, False)
        typed_and_drawn("n3")  # drawn after anything the nudge would have written first
        quiet = output(mark)
        assert "\x1b]9;" not in quiet and BELL not in OSC.sub("", quiet)
    finally:
        process.kill()
        process.wait()
        os.close(terminal)
        reader.join(timeout=10)
