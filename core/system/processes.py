"""Every process diana starts, and everything those start, ends with diana or with its call.

Linux does the work (elsewhere see ``CONTAINED``):

- Each child is started by :func:`spawn` in a session of its own, with two settings made in the
  child between fork and exec: ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with diana (even when
  diana is killed with SIGKILL; the signal follows the *thread* that forked, and diana forks
  from its event loop thread, which lives as long as diana), and ``PR_SET_CHILD_SUBREAPER``
  (kept across exec), so whatever it starts that double-forks or calls ``setsid`` is re-parented
  to it rather than to init, and stays in its tree.
- diana is a subreaper too (:func:`become_subreaper`): what a child leaves behind when it ends
  is re-parented to diana, where the child's :class:`ProcessTree` still finds it: by the
  child's session, by a variable only its tree inherits (``DIANA_PROCESS_TREE``), or because it
  was seen in the tree before.
- :meth:`ProcessTree.kill` freezes the tree (SIGSTOP, whole process groups at once), reads it
  again from /proc (walking down from diana only) until nothing new appears and every member
  is stopped (a stopped process cannot fork, so a forking tree cannot outrun it), then
  SIGKILLs every member, and reaps those re-parented to diana. It never waits on a process
  asyncio started (each tree's first process is asyncio's to reap).
- The ``preexec_fn`` runs in the child of a threaded process (aiosqlite, asyncio's child
  watcher), which Python calls unsafe in general: it is kept to two calls of a libc function
  bound at import, with no import, lookup or allocation of note, so no lock another thread
  held at fork time is needed.
- :func:`sweep`, called when the runtime closes, ends every tree still open and what diana
  adopted from them; at interpreter exit the same is done once more, without waiting.

Only processes below diana in the process tree are ever signalled.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import itertools
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .os_processes import ProcInfo, proc_stat

TREE_VARIABLE = "DIANA_PROCESS_TREE"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_SIGKILL = int(signal.SIGKILL)
# Rounds of reading the tree from /proc while freezing it; it normally takes two or three.
FREEZE_SCANS = 200
# How long closing a tree waits for its processes to be gone and reaped (seconds).
CLOSE_LIMIT = 5.0
REAP_POLL = 0.005
_STOPPED_OR_DEAD = frozenset("TtZXx")


def _bind_prctl(use_errno: bool) -> Any:
    """libc's prctl, bound once: the child calls it between fork and exec, where nothing may
    be imported or looked up."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=use_errno).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _bind_prctl(use_errno=True)
_child_prctl = _bind_prctl(use_errno=False)  # in the child: not even errno bookkeeping
# Whether children die with diana and descendants are found and ended: Linux with /proc.
CONTAINED = _prctl is not None and os.path.isdir("/proc/self")

_subreaper_of: int | None = None  # the pid that made itself a subreaper (a fork must redo it)
_spawner = os.getpid()  # diana's pid: the child checks it is still its parent once set up
_trees: dict[int, ProcessTree] = {}  # open trees, by the pid of their first process
_reapable: dict[int, int] = {}  # pid -> start time of processes killed here, not asyncio's
_serial = itertools.count(1)
# Variables diana set in its own environment for itself alone: no child is given them.
NOT_INHERITED: set[str] = set()
_prefix = ""


def become_subreaper() -> bool:
    """Make this process adopt the orphans of what it started (idempotent)."""
    global _subreaper_of
    if _subreaper_of == os.getpid():
        return True
    if not CONTAINED or _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    _subreaper_of = os.getpid()
    atexit.register(end_all_now)
    return True


def _in_child() -> None:
    """Runs in the child between fork and exec (``preexec_fn``): two pre-bound libc calls, no
    import, no allocation worth the name, so the threads diana runs cannot deadlock it."""
    _child_prctl(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    _child_prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if os.getppid() != _spawner:  # diana died before the death signal was set: follow it
        os._exit(127)


# -- /proc -------------------------------------------------------------------------------------


def process_table() -> dict[int, ProcInfo]:
    """Every process this user can see, from /proc (slow on a busy machine: only a fallback)."""
    table = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and (info := proc_stat(int(name))) is not None:
                table[info.pid] = info
    return table


# /proc/PID/task/TID/children lists a thread's children, so a walk down from diana reads only
# diana's own subtree (a full scan of /proc costs ~10 ms on a busy machine, per scan).
_CHILDREN_FILES = CONTAINED and os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (any of its threads), zombies included."""
    if not _CHILDREN_FILES:
        return [info.pid for info in process_table().values() if info.ppid == pid]
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as children:
                found.extend(int(child) for child in children.read().split())
        except OSError:
            continue
    return found


def subtree(seeds: Iterable[int]) -> dict[int, ProcInfo]:
    """The seeds and every process below them, as they are now."""
    found: dict[int, ProcInfo] = {}
    todo = list(seeds)
    while todo:
        pid = todo.pop()
        if pid not in found and (info := proc_stat(pid)) is not None:
            found[pid] = info
            todo.extend(children_of(pid))
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (not ``pid`` itself)."""
    return set(subtree(children_of(pid)))


def _below(pid: int, ancestor: int) -> bool:
    for _step in range(64):  # a chain of parents is short; never loop for ever
        info = proc_stat(pid)
        if info is None or info.ppid <= 1:
            return False
        if info.ppid == ancestor:
            return True
        pid = info.ppid
    return False


def _carries(pid: int, marker: bytes) -> bool:
    """Whether the process was started with ``marker`` (``NAME=value``) in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            data = environ.read()
    except OSError:
        return False
    return (b"\0" + data).find(b"\0" + marker) != -1


# -- ending a set of processes -----------------------------------------------------------------


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def freeze_and_kill(select: Callable[[], dict[int, ProcInfo]]) -> dict[int, int]:
    """SIGSTOP what ``select`` picks, picking again until nothing new is picked and everything
    picked is stopped, then SIGKILL it all. The process groups of picked processes are
    signalled whole, each round (a signal to a group cannot miss a child being forked in it),
    so a forking tree is stopped at once, not one process at a time.
    Returns pid -> start time of every process signalled."""
    me, my_group = os.getpid(), os.getpgrp()
    stopped: dict[int, int] = {}
    groups: set[int] = set()
    confirmed = False
    for _round in range(FREEZE_SCANS):
        picked = select()
        picked.pop(me, None)
        # A picked process's group lies in a session started inside the tree (its own, or
        # one a member made with setsid): the whole group is the tree's.
        groups.update(info.pgrp for info in picked.values() if info.pgrp != my_group)
        for group in groups:
            _signal_group(group, signal.SIGSTOP)
        new = [pid for pid in picked if pid not in stopped]
        for pid in new:
            _signal(pid, signal.SIGSTOP)
            stopped[pid] = picked[pid].start
        if new:
            confirmed = False
            continue
        if not stopped:
            break  # nothing there
        if all(info.state in _STOPPED_OR_DEAD for info in picked.values()):
            # A process seen stopped may have finished a fork just before: one more round,
            # read after it stopped, shows that child.
            if confirmed:
                break
            confirmed = True
        else:
            time.sleep(0.0002)  # a signal is being delivered
    for group in groups:
        _signal_group(group, _SIGKILL)
    for pid in stopped:
        _signal(pid, _SIGKILL)
    return stopped


def kill_tree(pid: int) -> set[int]:
    """Freeze and kill ``pid`` and everything below it; returns the pids killed. Those that
    were re-parented to this process are reaped; ``pid`` itself is left to its parent."""
    killed = freeze_and_kill(lambda: subtree([pid]))
    _reapable.update((p, start) for p, start in killed.items() if p != pid)
    reap()
    return set(killed)


def reap() -> int:
    """Collect the exit status of processes killed here that are now zombie children of this
    process; never touches a child it did not kill. Returns how many are left to collect."""
    me = os.getpid()
    for pid, start in list(_reapable.items()):
        info = proc_stat(pid)
        if info is None or info.start != start:
            del _reapable[pid]  # gone: its own parent collected it
        elif info.state == "Z" and info.ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            del _reapable[pid]
    return len(_reapable)


# -- trees diana starts ------------------------------------------------------------------------


@dataclass(eq=False)
class ProcessTree:
    """A process diana started and everything it starts."""

    process: asyncio.subprocess.Process
    token: str
    start: int | None
    known: dict[int, int] = field(default_factory=dict)  # descendants seen: pid -> start
    _killed: set[int] = field(default_factory=set)  # those of them to reap here
    # The loop its asyncio process belongs to; a tree left open by a loop that has ended is
    # killed without waiting (nothing can be awaited on a closed loop).
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def marker(self) -> bytes:
        return f"{TREE_VARIABLE}={self.token}\0".encode()

    def members(self) -> dict[int, ProcInfo]:
        """This tree's processes: its first process and what is below it, and what it left
        behind that diana adopted (same session, same marker, or seen in the tree before)."""
        me = os.getpid()
        seeds = []
        first = proc_stat(self.pid)
        if first is not None and first.ppid == me and first.start == self.start:
            seeds.append(self.pid)
        for pid in children_of(me):
            if pid in _trees:  # another tree's first process (this one's is seeded above)
                continue
            info = proc_stat(pid)
            if info is not None and (
                info.sid == self.pid
                or self.known.get(pid) == info.start
                or _carries(pid, self.marker)
            ):
                seeds.append(pid)
        for pid, start in self.known.items():
            info = proc_stat(pid)
            if info is not None and info.start == start and _below(pid, me):
                seeds.append(pid)
        return subtree(seeds)

    def remember(self) -> None:
        """Note what is in the tree now, so it is still found after its first process ends."""
        if CONTAINED:
            self.known.update(
                (p, info.start) for p, info in self.members().items() if p != self.pid
            )

    def kill(self) -> int:
        """Freeze and kill the whole tree now (synchronous: safe in a cleanup that is being
        cancelled). Returns how many processes were signalled."""
        if not CONTAINED:
            _signal_group(self.pid, _SIGKILL)
            return 1
        killed = freeze_and_kill(self.members)
        adopted = {p: start for p, start in killed.items() if p != self.pid}
        _reapable.update(adopted)
        self._killed.update(adopted)
        reap()
        return len(killed)

    def _settled(self) -> bool:
        return self.process.returncode is not None and not any(p in _reapable for p in self._killed)

    def signal_group(self, sig: int) -> None:
        """Signal the process group of the first process (what a polite stop sends)."""
        _signal_group(self.pid, sig)

    async def close(self, within: float = CLOSE_LIMIT) -> None:
        """Kill what is left of the tree, wait until its first process is collected and the
        rest reaped, and release its pipes (read what is wanted from them first). Finishes
        even if cancelled meanwhile (the cancellation is raised afterwards), so nothing is
        left running or unreaped."""
        self.kill()
        loop = asyncio.get_running_loop()
        if self.loop is not loop:  # its loop has ended or is another: nothing to wait on
            _trees.pop(self.pid, None)
            return
        deadline = loop.time() + within
        cancelled = False
        while True:
            try:
                while not self._settled() and loop.time() < deadline:
                    await asyncio.sleep(REAP_POLL)
                    reap()
                break
            except asyncio.CancelledError:
                cancelled = True
        _trees.pop(self.pid, None)
        # Every writer of its pipes is dead: release them now, not when the loop is gone.
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()
        if cancelled:
            raise asyncio.CancelledError


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _new_token() -> str:
    global _prefix
    if not _prefix.startswith(f"{os.getpid()}-"):
        _prefix = f"{os.getpid()}-{secrets.token_hex(4)}"
    return f"{_prefix}.{next(_serial)}"


async def spawn(
    argv: list[str],
    *,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> ProcessTree:
    """Start ``argv`` contained: in a session of its own, dying with diana, its descendants
    kept in its tree. ``env`` None means diana's own environment."""
    global _spawner
    become_subreaper()
    token = _new_token()
    environment = dict(os.environ if env is None else env)
    for name in NOT_INHERITED:
        environment.pop(name, None)
    environment[TREE_VARIABLE] = token
    _spawner = os.getpid()
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=environment,
            start_new_session=True,
            preexec_fn=_in_child if CONTAINED else None,
        )
    except BaseException:
        # Cancelled once forked: asyncio kills the child; end what it may have started.
        if CONTAINED:
            marker = f"{TREE_VARIABLE}={token}\0".encode()
            _reapable.update(
                freeze_and_kill(
                    lambda: subtree(p for p in children_of(os.getpid()) if _carries(p, marker))
                )
            )
            reap()
        raise
    info = proc_stat(process.pid) if CONTAINED else None
    tree = ProcessTree(process, token, info.start if info else None)
    _trees[process.pid] = tree
    return tree


def open_trees() -> list[int]:
    """The first pids of the trees started and not yet closed."""
    return list(_trees)


async def sweep() -> None:
    """End every tree still open and whatever diana adopted from them: when diana's runtime
    closes (one runtime per process: its parts have closed their own trees by then)."""
    for tree in list(_trees.values()):
        await tree.close()
    _reapable.update(_kill_adopted())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CLOSE_LIMIT
    while reap() and loop.time() < deadline:  # noqa: ASYNC110 - no event tells of a zombie
        await asyncio.sleep(REAP_POLL)


def _kill_adopted() -> dict[int, int]:
    """Kill the processes diana adopted that came from one of its trees (they carry its
    marker), and what is below them."""
    if not CONTAINED or not _prefix.startswith(f"{os.getpid()}-"):
        return {}
    marker = f"{TREE_VARIABLE}={_prefix}.".encode()
    me = os.getpid()

    def adopted() -> dict[int, ProcInfo]:
        return subtree(p for p in children_of(me) if p not in _trees and _carries(p, marker))

    return freeze_and_kill(adopted)


def end_all_now() -> None:
    """At interpreter exit, whatever is still open is killed (no event loop is left to wait
    with; the kernel reaps what an exiting process leaves)."""
    for pid, tree in list(_trees.items()):
        tree.kill()
        _trees.pop(pid, None)
    _kill_adopted()
