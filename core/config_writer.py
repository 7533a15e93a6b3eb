"""The one way DIANA changes a config file (policy.json, tools.json, mcp-servers.json).

Changes to a file are applied one at a time: in a process through one asyncio lock per file,
across processes through an exclusive lock on a sidecar ``.FILE.lock``. Each change reads the
file as it is now, is validated before anything is written, and replaces the file atomically
(write a temporary file, fsync, rename), so a reader never sees half a file and a rejected change
leaves the file exactly as it was. Running processes notice the new file and reload it.
A file that is there but cannot be read as a regular file (a dangling link, a FIFO) is an
error, not a file to start afresh; a symlink to a regular file is written through.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import config_present, read_json

Change = Callable[[Any], Any]  # the current JSON value -> the new one (raise to refuse)
Validate = Callable[[Any, Path], None]  # raise ConfigError to refuse the new value

_writers: dict[Path, ConfigWriter] = {}


def writer_for(path: Path) -> ConfigWriter:
    """The process's one writer for this file."""
    key = Path(os.path.abspath(path))  # not resolved: the link itself is checked on each read
    writer = _writers.get(key)
    if writer is None:
        writer = _writers[key] = ConfigWriter(key)
    return writer


class ConfigWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    async def update(
        self, change: Change, validate: Validate, *, default: Callable[[], Any] = dict
    ) -> Any:
        """Apply ``change`` to the file's current content and write the result; returns it.
        ``default()`` stands in for a file that does not exist yet. A change that returns the
        very value it was given writes nothing."""
        async with self._lock:
            return await asyncio.to_thread(self._update, change, validate, default)

    def _update(self, change: Change, validate: Validate, default: Callable[[], Any]) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.parent / f".{self.path.name}.lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                # A symlink to a regular file is written through: the file it names is replaced.
                target = Path(os.path.realpath(self.path))
                # Strict: only a file that is not there at all starts from the default.
                current = read_json(self.path) if config_present(self.path) else default()
                updated = change(current)
                if updated is current:  # nothing to change: the file is left alone
                    return updated
                validate(updated, self.path)
                self._replace(target, updated)
                return updated
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _replace(target: Path, value: Any) -> None:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.stem}-", dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(value, out, indent=2, ensure_ascii=False)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
