"""The lock file each running diana-tui holds under its data dir (core/live.py): whether one
is held says, without the database, that an app may answer for the dirs. No import a quick
command would wait on."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCKS_DIR = "apps"  # under the data dir: one lock file per running app


def is_held(path: Path) -> bool:
    """Whether a running app holds the lock file at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone, or not a file we made: no app holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # closing lets go of a shared lock taken just now
    return False


def app_runs_on(data_dir: Path) -> bool:
    """Whether some diana-tui holds a lock under ``data_dir`` (it may run on other config)."""
    try:
        locks = list((data_dir / LOCKS_DIR).glob("*.lock"))
    except OSError:
        return False
    return any(is_held(path) for path in locks)
