"""The lock file each running diana-tui holds under its data dir (core/shared/live.py): whether one
is held says, without the database, that an app may answer for the dirs. No import a quick
command would wait on."""

from __future__ import annotations

from pathlib import Path

from ..system.os_processes import is_held

LOCKS_DIR = "apps"  # under the data dir: one lock file per running app


def app_runs_on(data_dir: Path) -> bool:
    """Whether some diana-tui holds a lock under ``data_dir`` (it may run on other config)."""
    try:
        locks = list((data_dir / LOCKS_DIR).glob("*.lock"))
    except OSError:
        return False
    return any(is_held(path) for path in locks)
