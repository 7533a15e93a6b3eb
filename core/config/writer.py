"""The one way DIANA changes a config file (policy.json, tools.json, mcp-servers.json).

Changes to a file are applied one at a time: in a process through one asyncio lock per file,
across processes through an exclusive lock on a sidecar ``.FILE.lock``. Each change reads the
file as it is now, is validated before anything is written, and replaces the file atomically
(write a temporary file, fsync, rename), so a reader never sees half a file and a rejected change
leaves the file exactly as it was. Running processes notice the new file and reload it.
A file that is there but cannot be read as a regular file (a dangling link, a FIFO) is an
error, not a file to start afresh; a symlink to a regular file is written through.

A person's editor takes no lock: it may save the file (in place, or by renaming a new file
over it) while a change is being made. So the file is replaced only if it is still the file
that was read, byte for byte: it is swapped with the new one in one step (renameat2's
RENAME_EXCHANGE, where the file system has it), what was swapped out is checked, and if an
editor saved meanwhile its file is put back and the change is made again on what it saved.
After ATTEMPTS such tries the change is refused, saying so; no save is ever overwritten.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import json
import os
import random
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .settings import (
    ConfigError,
    changed_at,
    changed_within,
    config_present,
    parse_config,
    read_config_bytes,
)

SAVE_MOMENT = 0.02  # seconds an editor's save in place, begun before a swap, takes to land

Change = Callable[[Any], Any]  # the current JSON value -> the new one (raise to refuse)
Validate = Callable[[Any, Path], None]  # raise ConfigError to refuse the new value

ATTEMPTS = 20  # reads and writes again when the file changed meanwhile, then refuses
RETRY_PAUSE = 0.01  # the most a new attempt waits, at random, to fall between two saves
# How long a file that does not parse is watched for the rest of a save before it is called
# broken (its change is then refused, naming what is wrong).
HALF_SAVED_WAIT = 0.5
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

_writers: dict[Path, ConfigWriter] = {}


def writer_for(path: Path) -> ConfigWriter:
    """The process's one writer for this file."""
    key = Path(os.path.abspath(path))  # not resolved: the link itself is checked on each read
    writer = _writers.get(key)
    if writer is None:
        writer = _writers[key] = ConfigWriter(key)
    return writer


@dataclass(frozen=True)
class _Read:
    """The file as a change read it: which file it was, and every byte of it."""

    target: Path  # the file itself (a symlink resolved)
    identity: tuple[int, int] | None  # (device, inode); None when there was no file
    data: bytes


def formatted_like(value: Any, original: bytes) -> str:
    """``value`` as JSON laid out as the file was (a person's compact one-line file stays on
    one line; an indented one keeps its indent); a new file is indented by two."""
    text = original.decode("utf-8", "replace").strip()
    end = "\n" if not original or original.endswith(b"\n") else ""
    if text and "\n" not in text:  # one line: the separators it used
        colon = ": " if re.search(r":\s", text) or ":" not in text else ":"
        spaced = re.search(r",\s", text) if "," in text else colon == ": "
        comma = ", " if spaced else ","
        return json.dumps(value, ensure_ascii=False, separators=(comma, colon)) + end
    found = re.search(r"\n([ \t]+)\S", text)
    indent = found.group(1) if found else "  "
    return json.dumps(value, ensure_ascii=False, indent=indent) + end


class ConfigWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    async def update(
        self, change: Change, validate: Validate, *, default: Callable[[], Any] = dict
    ) -> Any:
        """Apply ``change`` to the file's current content and write the result; returns it.
        ``default()`` stands in for a file that does not exist yet. A change that returns the
        very value it was given writes nothing. ``change`` may be called more than once: a
        file saved by another program meanwhile is read again."""
        async with self._lock:
            return await asyncio.to_thread(self._update, change, validate, default)

    def _update(self, change: Change, validate: Validate, default: Callable[[], Any]) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.parent / f".{self.path.name}.lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                for attempt in range(ATTEMPTS):
                    if attempt:
                        time.sleep(random.uniform(0, RETRY_PAUSE))
                    read = self._read()
                    if read is None:
                        continue  # caught half-saved: read it again
                    # Strict: only a file that is not there at all starts from the default.
                    current = (
                        default() if read.identity is None else parse_config(self.path, read.data)
                    )
                    updated = change(current)
                    if updated is current:  # nothing to change: the file is left alone
                        return updated
                    validate(updated, self.path)
                    if self._replace_if_unchanged(read, updated):
                        return updated
                raise ConfigError(
                    self.path,
                    f"another program kept saving it while diana was changing it ({ATTEMPTS} "
                    "tries); nothing was written, so no save of theirs was lost: try again",
                )
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> _Read | None:
        """The file as it is now; None if it was caught changing (being saved in place)."""
        # A symlink to a regular file is written through: the file it names is replaced.
        target = Path(os.path.realpath(self.path))
        if not config_present(self.path):
            return _Read(target, None, b"")
        before = changed_at(target)
        data = read_config_bytes(self.path)
        if before != changed_at(target) or (before is not None and before[2] != len(data)):
            return None
        try:
            parse_config(self.path, data)
        except ConfigError:
            # Half a save in place, or a file that really is broken: an editor stopped
            # between truncating and writing (a busy machine) must not turn a change away.
            if changed_within(target, before, HALF_SAVED_WAIT) or _content(target) != data:
                return None
            raise
        assert before is not None
        return _Read(target, before[:2], data)

    def _replace_if_unchanged(self, read: _Read, value: Any) -> bool:
        """Write ``value`` as the file if it is still the one ``read``; whether it was."""
        target = read.target
        handle, temporary = tempfile.mkstemp(prefix=f".{target.stem}-", dir=target.parent)
        staged = Path(temporary)
        theirs = False  # what ``staged`` names at the end is a save of someone else's
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(formatted_like(value, read.data))
                out.flush()
                os.fsync(out.fileno())
                ours = _identity(os.fstat(out.fileno()))
            if not self._still(read):
                return False
            if read.identity is None:
                try:
                    os.link(staged, target)  # made only if no one made it meanwhile
                except FileExistsError:
                    return False
                return True
            if not _exchange(staged, target):
                os.replace(staged, target)  # no atomic swap here: the check above decides
                return True
            # ``staged`` now names what was at the target when they were swapped.
            if _identity(os.lstat(staged)) == read.identity and _content(staged) == read.data:
                # An editor that had the file open to save it in place writes into the file
                # now out of place: give a save the moment it takes, and if one landed there,
                # it goes back in place (and the change is made again on it).
                time.sleep(SAVE_MOMENT)
                if _content(staged) == read.data:
                    return True
            theirs = not self._put_back(staged, target, ours)
            return False
        finally:
            if not theirs:  # a save of someone else's is never removed
                staged.unlink(missing_ok=True)

    def _still(self, read: _Read) -> bool:
        """Whether the file is the very one ``read`` (the same file, the same bytes)."""
        if Path(os.path.realpath(self.path)) != read.target:
            return False  # the link now leads elsewhere
        if read.identity is None:
            return not os.path.lexists(read.target)
        try:
            identity = _identity(os.lstat(read.target))
        except FileNotFoundError:
            return False
        return identity == read.identity and _content(read.target) == read.data

    @staticmethod
    def _put_back(staged: Path, target: Path, ours: tuple[int, int]) -> bool:
        """Someone saved the file between the check and the swap: their file goes back in
        place (and if they saved once more meanwhile, the newest of their saves). Whether
        ``staged`` then names our file again (else it holds their older save)."""
        _exchange(staged, target)
        if _identity(os.lstat(staged)) == ours:
            return True  # ours is out again, theirs is in place
        # They saved again while ours was in place: that save, not the older one, goes back.
        _exchange(staged, target)
        return False


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _content(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the C
    library or the file system cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE):
        failed = ctypes.get_errno()
        if failed in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return False
        raise OSError(failed, os.strerror(failed), str(second))
    return True


_libc: Any = None


def _renameat2() -> Any:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = False
    return getattr(_libc, "renameat2", None) if _libc else None
