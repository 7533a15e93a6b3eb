"""Reading a file that must be a readable regular file of bounded size (config files, the
proposal key): whatever else is at the path — a dangling link, a link loop, a FIFO, a socket,
a device, a directory, something larger than the bound — is refused at once with the reason
in words. A FIFO is never waited on, a device never read, nothing past the bound is read.

And saving what a person asked for (a resource) to a path they named: only to a regular file
they may write, made or replaced whole (written beside it, then renamed over it), never
through a link or into a FIFO, a device, a directory or /proc.

And the one home for what diana keeps under its data dir: directories 0700 and files 0600,
whatever the umask (``private_dir``, ``open_private``, ``write_private``), and an existing
data dir that others could read made private when a runtime opens it (``make_private``)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path


class UnreadableFile(Exception):
    """``path`` cannot be read as a file; ``reason`` says why, as the end of a sentence
    naming it ("is a FIFO (named pipe), not a regular file")."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The whole content of the regular file at ``path`` (a symlink to one is fine), at most
    ``limit`` bytes; UnreadableFile otherwise (``what`` the file is: "a config file")."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UnreadableFile(path, unreachable(path, exc)) from None
    _require_regular(path, info, limit, what)
    try:
        # O_NONBLOCK: were it swapped for a FIFO since the stat, opening must not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UnreadableFile(path, unreachable(path, exc)) from None
    try:
        _require_regular(path, os.fstat(fd), limit, what)  # the file opened is the file checked
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnreadableFile(path, _too_large(limit, what))
    return b"".join(chunks)


def _too_large(limit: int, what: str) -> str:
    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return f"is larger than {size}, too large for {what}"


def _require_regular(path: Path, info: os.stat_result, limit: int, what: str) -> None:
    if stat.S_ISREG(info.st_mode):
        if info.st_size > limit:
            raise UnreadableFile(path, _too_large(limit, what))
        return
    kind = file_kind(info.st_mode)
    if os.path.islink(path):
        raise UnreadableFile(
            path, f"is a symbolic link to {_link_target(path)}, {kind}, not a regular file"
        )
    raise UnreadableFile(path, f"is {kind}, not a regular file")


def save_to(path: Path, data: bytes) -> None:
    """Write ``data`` as the whole of the file at ``path``, made if missing, replaced if it is
    a regular file the person may write: written beside it, then renamed over it, so the file
    is never seen half written and nothing else (a link, a FIFO, a device, /proc) is ever
    written through. UnreadableFile (with the reason) for anything else at ``path``, or a
    folder where no file can be made."""
    replaced = _save_target(path)
    fd, temporary = _file_beside(path)
    try:
        try:
            if replaced is not None:  # the file replaced keeps its permissions
                os.fchmod(fd, stat.S_IMODE(replaced.st_mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, path)  # a link or a folder put there meanwhile is not followed
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise UnreadableFile(path, f"cannot be written: {exc.strerror}") from None


def check_save_target(path: Path) -> None:
    """What ``save_to`` would refuse for ``path``, found before anything is fetched to save:
    UnreadableFile with the reason. (``save_to`` checks again when it writes.)"""
    _save_target(path)
    fd, temporary = _file_beside(path)
    os.close(fd)
    os.unlink(temporary)


def _save_target(path: Path) -> os.stat_result | None:
    """The regular file at ``path`` the person may write, None if nothing is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be written: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UnreadableFile(path, "is a symbolic link; name the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFile(path, f"is {file_kind(info.st_mode)}, not a regular file")
    if not os.access(path, os.W_OK, follow_symlinks=False):
        raise UnreadableFile(path, "cannot be written: permission denied")
    return info


def _file_beside(path: Path) -> tuple[int, Path]:
    """A new, empty file in the folder of ``path`` (made as any new file: the umask
    applies), open for writing; UnreadableFile where no file can be made (/proc, /sys)."""
    folder = path.parent
    temporary = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(temporary, flags, 0o666), temporary
    except OSError as exc:
        if not folder.is_dir():
            raise UnreadableFile(path, f"cannot be written: there is no folder {folder}") from None
        raise UnreadableFile(
            path, f"is in {folder}, where no file can be made ({exc.strerror})"
        ) from None


def file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return kind
    return "not a file"


def unreachable(path: Path, exc: OSError) -> str:
    """Why a path that is there cannot be opened, in words (a link that leads nowhere)."""
    if exc.errno == errno.ELOOP:
        return "is a symbolic link that loops (too many levels of links)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"is a symbolic link to {_link_target(path)}, which does not exist"
    if exc.errno == errno.ENXIO:
        return "is a socket or a device with nothing behind it, not a regular file"
    return f"cannot read: {exc.strerror}"


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "something that cannot be read"


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# The bits that let anyone but the owner read, write or enter.
OTHERS = 0o077


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner may enter (0700), made if missing with any
    missing parent (0700 too, as the XDG base directory spec asks); one that exists keeps its
    mode unless others could enter it."""
    missing: list[Path] = []
    at = path
    while not os.path.lexists(at) and at.parent != at:
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:  # another process was first
            continue
        os.chmod(directory, PRIVATE_DIR)  # exactly, whatever the umask
    tighten(path)
    return path


def open_private(path: Path, flags: int) -> int:
    """A descriptor on the file at ``path``, made 0600 if missing (``flags`` say how to open
    it; O_CREAT and O_CLOEXEC are added); an existing file that others could read is made
    0600. Its directory must exist (``private_dir``)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_mode & OTHERS:
            os.fchmod(fd, PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def changing(path: Path) -> Iterator[None]:
    """While the file at ``path`` is read, changed and written again by this process: one
    process at a time (an exclusive lock on a private file beside it), so two that change it
    at once do not lose either change."""
    private_dir(path.parent)
    fd = open_private(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def write_private(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Replace the file at ``path`` with ``data``, readable by its owner only (0600, in a
    directory made 0700): written beside it, then renamed over it, so a reader sees the old
    file or the new one, never a part. ``durable``: on the disk before it replaces the old."""
    private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(temporary, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    try:
        view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def make_private(data_dir: Path) -> int:
    """Make ``data_dir`` private: made 0700 if missing; if it is there, it and every
    directory in it that others could enter made 0700, every file others could read 0600
    (links in it are not followed). How many were tightened."""
    tightened = int(os.path.lexists(data_dir) and tighten(data_dir))
    private_dir(data_dir)
    for folder, directories, files in os.walk(data_dir):
        for name in directories + files:
            tightened += tighten(Path(folder, name), follow=False)
    return tightened


def tighten(path: Path, *, follow: bool = True) -> bool:
    """A directory others could enter made 0700, a regular file others could read 0600 (0700
    for a program: its owner may still run it); whether it was changed. Anything else, a
    link (when not followed), something not ours, or something gone meanwhile is left
    alone."""
    try:
        info = os.stat(path, follow_symlinks=follow)
        if not info.st_mode & OTHERS or info.st_uid != os.getuid():
            return False
        if stat.S_ISDIR(info.st_mode):
            os.chmod(path, PRIVATE_DIR)
        elif stat.S_ISREG(info.st_mode):
            os.chmod(path, PRIVATE_FILE | (info.st_mode & stat.S_IXUSR))
        else:
            return False
    except OSError:
        return False
    return True


MEDIA_DIR = "media"
_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "application/pdf": ".pdf",
    "application/json": ".json",
    "text/plain": ".txt",
}


class MediaFiles:
    """Images, audio and other binaries that tools return, kept as files a person can open
    (one per distinct content, named by its digest), readable by their owner only; files
    older than the retention are removed at start."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def keep(self, data: bytes, mime: str | None) -> Path:
        import hashlib

        suffix = _EXTENSIONS.get((mime or "").split(";")[0].strip().lower(), ".bin")
        path = self.directory / f"{hashlib.sha256(data).hexdigest()[:24]}{suffix}"
        if not path.exists():
            write_private(path, data, durable=False)
        return path

    def prune(self, days: int, now: float) -> int:
        """Remove files last written more than ``days`` ago; how many went."""
        removed = 0
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        for entry in entries:
            try:
                if (
                    entry.is_file(follow_symlinks=False)
                    and now - entry.stat().st_mtime > days * 86400
                ):
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
        return removed


def kept_files(text: str, directory: Path) -> list[Path]:
    """The files under ``directory`` a tool result names (as MediaFiles.keep put them)."""
    import re

    named = re.findall(r": (/[^\]\s]+)\]", text)
    return [Path(p) for p in named if Path(p).parent == directory and Path(p).is_file()]
