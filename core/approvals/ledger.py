"""The run ledger: a file beside the proposal key with the id of every proposal ever
approved, so no edit or restore of the database makes one run again."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..storage.db import StorageError
from ..system.files import file_kind

RUNS_FILE = "proposals.runs"  # beside the key: one line per proposal ever approved
RUNS_LIMIT = 256 << 20  # 25 million approvals


class RunLedger:
    """The ids of proposals ever approved, one per line, in a file beside the key: it is not
    in the database, so no edit or restore of the database makes an approved proposal run
    again. Lines are appended whole (O_APPEND), so processes never interleave within one. A
    line ``-ID`` takes back the approval before it, written only when the transaction that
    approved it did not commit. The file is only ever opened as itself (never through a
    symbolic link) and must be a regular file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: set[str] = set()
        self._read_to = 0
        self._file: tuple[int, int] | None = None  # (device, inode) of the file read

    def read(self) -> set[str]:
        """Every id in the ledger (what was read before is kept; only the rest is read)."""
        fd = self._open(os.O_RDONLY, "read")
        if fd is None:
            return self._known
        try:
            info = os.fstat(fd)
            if info.st_size > RUNS_LIMIT:
                raise StorageError(
                    f"{self.path} is larger than {RUNS_LIMIT >> 20} MiB, too large for the "
                    "list of proposals that ran; nothing was approved"
                )
            if (info.st_dev, info.st_ino) != self._file or info.st_size < self._read_to:
                # Another file, or one cut shorter: read it from the start.
                self._known, self._read_to = set(), 0
                self._file = (info.st_dev, info.st_ino)
            data = os.pread(fd, info.st_size - self._read_to, self._read_to)
        except OSError as exc:
            raise StorageError(
                f"cannot read {self.path}: {exc.strerror}; nothing was approved"
            ) from None
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode("ascii", "replace").split():
            if line.startswith("-"):
                self._known.discard(line[1:])
            else:
                self._known.add(line)
        self._read_to += end
        return self._known

    def add(self, proposal_id: str) -> None:
        self._append(f"{proposal_id}\n")
        self._known.add(proposal_id)

    def take_back(self, proposal_id: str) -> None:
        """The approval just added did not reach the database: it does not count."""
        self._append(f"-{proposal_id}\n")
        self._known.discard(proposal_id)

    def _append(self, line: str) -> None:
        fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT, "write")
        assert fd is not None
        try:
            os.write(fd, line.encode("ascii", "replace"))
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(self._refusal(f"cannot be written: {exc.strerror}")) from None
        finally:
            os.close(fd)

    def _open(self, flags: int, verb: str) -> int | None:
        """The ledger opened as itself, a regular file; None if there is none (to read).
        StorageError naming the file, what is there instead and what to do."""
        # O_NONBLOCK: a FIFO put in its place is refused, never waited on.
        flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENOENT and verb == "read":
                return None
            raise StorageError(self._refusal(self._what_is_there(exc, verb))) from None
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise StorageError(
                self._refusal(f"is {file_kind(kind)}, not a regular file", move_aside=True)
            )
        return fd

    def _what_is_there(self, exc: OSError, verb: str) -> str:
        try:
            mode = os.lstat(self.path).st_mode
        except OSError:
            return f"cannot be {'read' if verb == 'read' else 'written'}: {exc.strerror}"
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(self.path)
            except OSError:
                target = "something that cannot be read"
            return f"is a symbolic link to {target}, not a regular file"
        if not stat.S_ISREG(mode):
            return f"is {file_kind(mode)}, not a regular file"
        return f"cannot be {'read' if verb == 'read' else 'written'}: {exc.strerror}"

    def _refusal(self, what: str, *, move_aside: bool = False) -> str:
        if "symbolic link" in what:
            todo = "put the file itself there, not a link to it"
        elif move_aside or "not a regular file" in what:
            todo = "move it aside"
        else:
            todo = "make it a file you can read and write"
        return (
            f"the list of proposals that ran {self.path} {what}; {todo}. Nothing was "
            "approved: the proposal still waits"
        )
