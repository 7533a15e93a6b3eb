"""OS processes as a test watches them: whether one is alive, everything it writes."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Running, or a zombie nobody has collected yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_all(fd: int, into: list[bytes]) -> None:
    """Everything read from ``fd`` until it closes, appended to ``into`` (for a thread)."""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        if not data:
            return
        into.append(data)
