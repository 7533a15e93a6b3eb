"""The kill switch for the other agents on the machine: while hosts are paused (`diana serve
pause`, or the key in diana-tui's Approvals pane), every call a host makes through `diana
serve` waits for a person, whatever the policy allows (a deny still refuses it). The switch
is a file in the data dir, so every process on it sees it at the very next call; anything at
that path, even one that cannot be read, counts as paused (a switch meant to stop calls
fails shut)."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime
from pathlib import Path

from ..models import HOST_ORIGIN
from ..system.files import write_private

PAUSE_FILE = "hosts.paused"
SAID_LIMIT = 200  # bytes of the file read for what it says (who paused, and when)


def is_host(origin: str) -> bool:
    return origin.startswith(HOST_ORIGIN)


def hosts_paused(data_dir: Path) -> str | None:
    """Why hosts' calls wait now ("hosts are paused since …"), or None when they are not."""
    path = data_dir / PAUSE_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return "hosts are paused (`diana serve resume` lets their calls through again)"
    try:
        said = os.read(fd, SAID_LIMIT) if os.path.isfile(path) else b""
    except OSError:
        said = b""
    finally:
        os.close(fd)
    since = " ".join(said.decode("utf-8", "replace").split())[:SAID_LIMIT]
    return (
        f"hosts are paused{f' ({since})' if since else ''}: every call of theirs waits for a "
        "person (`diana serve resume` lets them through again)"
    )


def pause_hosts(data_dir: Path, by: str, now: datetime) -> bool:
    """Pause hosts; whether they were running (False: they were paused already)."""
    was_running = hosts_paused(data_dir) is None
    write_private(data_dir / PAUSE_FILE, f"since {now:%Y-%m-%d %H:%M:%S}, by {by}\n")
    return was_running


def resume_hosts(data_dir: Path) -> bool:
    """Let hosts' calls through the policy again; whether they were paused."""
    path = data_dir / PAUSE_FILE
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
        return True
    return False
