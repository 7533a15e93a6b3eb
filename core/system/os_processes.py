"""What the operating system says about a process: its /proc/PID/stat line read in one
place, whether it still runs, an identity that outlives pid reuse (pid and start time), and
which processes hold a lock file. Only the standard library: a quick command may import it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

UNKNOWN_START = "?"  # an identity's start time where there is no /proc to read it from
ENDED = ("Z", "X")  # states of a process that has ended: a zombie, or one being reaped


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgrp: int
    sid: int
    state: str
    start: int  # clock ticks after boot: with the pid, it names one process for good


def proc_stat(pid: int) -> ProcInfo | None:
    """The process as /proc/PID/stat says now, or None (gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name may hold anything, brackets too: the fields start after its last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcInfo(
            pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode(), int(fields[19])
        )
    except (IndexError, ValueError):
        return None


def _exists(pid: int) -> bool:
    """Whether the pid names a process, as signal 0 tells (a zombie too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except (OSError, OverflowError, ValueError):
        return False
    return True


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that still runs: not gone, not a zombie (a zombie has
    ended; only its exit status is left for its parent). Without /proc, whether it exists."""
    info = proc_stat(pid)
    if info is None:
        return _exists(pid)
    return info.state not in ENDED


def process_identity(pid: int | None = None) -> str:
    """pid plus the process's start time, so a reused pid is not mistaken for us."""
    pid = os.getpid() if pid is None else pid
    info = proc_stat(pid)
    return f"{pid}:{UNKNOWN_START if info is None else info.start}"


def identity_alive(identity: str | None) -> bool:
    """Whether the process ``process_identity`` named still runs: the same pid, started at
    the same time, and not a zombie waiting to be reaped."""
    if not identity:
        return False
    pid_text, _, started = identity.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if not _exists(pid):
        return False
    info = proc_stat(pid)
    if info is None:  # no /proc to ask: the pid is all there is to go by
        return started == UNKNOWN_START
    return info.state not in ENDED and str(info.start) == started


def is_held(path: Path) -> bool:
    """Whether a running process holds a lock (flock) on the file at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone, or not a file we made: no one holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # closing lets go of a shared lock taken just now
    return False


def lock_holders(path: Path) -> set[int] | None:
    """The pids holding the lock file at ``path``, as the kernel lists them (/proc/locks);
    None where it does not."""
    try:
        info = os.stat(path, follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            lines = listing.read(1 << 20).splitlines()
    except OSError:
        return None
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    holders = set()
    for line in lines:
        words = line.split()
        if "->" in words or len(words) < 6:  # a process waiting for the lock holds nothing
            continue
        if words[1] == "FLOCK" and words[5] == inode and words[4].isdigit():
            holders.add(int(words[4]))
    return holders or None
