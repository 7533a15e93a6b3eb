"""The attack bench's family of `data_cases()`."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from ..cases import ALLOW_ALL, CLEAR, FACT, Case, Ctx
from ..configs import base, make_fifo, make_loop, make_socket


def real_database(ctx: Ctx) -> None:
    """A data dir diana made: one fact saved and one call logged."""
    base(ctx, policy=ALLOW_ALL)
    ctx.diana("call", "save_fact", "--args", FACT, want=(0,))


def data_cases() -> list[Case]:
    def db(make: Callable[[Ctx, Path], object], real: bool = False) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            if real:
                real_database(ctx)
            else:
                base(ctx, policy=ALLOW_ALL)
                ctx.data.mkdir()
            make(ctx, ctx.data / "diana.db")

        return setup

    def in_data(
        name: str, make: Callable[[Path], object], real: bool = True
    ) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            if real:
                real_database(ctx)
            else:
                base(ctx, policy=ALLOW_ALL)
                ctx.data.mkdir()
            target = ctx.data / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            make(target)

        return setup

    def truncate(ctx: Ctx, p: Path) -> None:
        with open(p, "r+b") as f:
            f.truncate(4096 + 100)

    def scribble(ctx: Ctx, p: Path) -> None:
        with open(p, "r+b") as f:
            f.seek(4096)
            f.write(os.urandom(8192))

    rng = random.Random(7)
    variants: list[tuple[str, Callable[[Ctx], object], Sequence[int]]] = [
        ("diana.db is a directory", db(lambda c, p: p.mkdir()), ()),
        ("diana.db is a FIFO", db(lambda c, p: make_fifo(p)), ()),
        ("diana.db is a socket", db(lambda c, p: make_socket(p)), ()),
        ("diana.db links to /dev/zero", db(lambda c, p: os.symlink("/dev/zero", p)), ()),
        ("diana.db links to /dev/null", db(lambda c, p: os.symlink("/dev/null", p)), ()),
        ("diana.db is a text file", db(lambda c, p: p.write_text("hello, not a database\n")), ()),
        (
            "diana.db is 5 MiB of random bytes",
            db(lambda c, p: p.write_bytes(rng.randbytes(5 * 1024 * 1024))),
            (),
        ),
        ("diana.db is an empty file", db(lambda c, p: p.write_bytes(b"")), (0,)),
        (
            "diana.db is a dangling symlink",
            db(lambda c, p: os.symlink(p.parent / "gone" / "x", p)),
            (0,),
        ),
        ("diana.db is a symlink loop", db(lambda c, p: make_loop(p)), ()),
        ("diana.db truncated", db(truncate, real=True), (0,)),
        ("diana.db with a scribbled page", db(scribble, real=True), (0,)),
        ("diana.db-wal is a directory", in_data("diana.db-wal", lambda p: p.mkdir()), ()),
        (
            "diana.db-wal is garbage",
            in_data("diana.db-wal", lambda p: p.write_bytes(os.urandom(9000))),
            (0,),
        ),
        (
            "diana.db-shm is garbage",
            in_data("diana.db-shm", lambda p: p.write_bytes(os.urandom(40000))),
            (0,),
        ),
        ("proposals.key is a directory", in_data("proposals.key", lambda p: p.mkdir()), ()),
        ("proposals.key is a FIFO", in_data("proposals.key", make_fifo), ()),
        (
            "proposals.key links to /dev/zero",
            in_data("proposals.key", lambda p: os.symlink("/dev/zero", p)),
            (),
        ),
        ("proposals.key is empty", in_data("proposals.key", lambda p: p.write_bytes(b"")), ()),
        (
            "proposals.key is a dangling symlink",
            in_data("proposals.key", lambda p: os.symlink(p.parent / "gone", p)),
            (),
        ),
        ("logs is a regular file", in_data("logs", lambda p: p.write_text("x")), (0,)),
    ]
    cases = []
    commands: list[tuple[str, list[str], Sequence[int]]] = [
        ("proposals", ["proposals"], (0,)),
        ("call save_fact", ["call", "save_fact", "--args", FACT], (0,)),
    ]
    for what, setup, ok in variants:
        for label, command, ok_code in commands:
            if label == "proposals" and what not in (
                "diana.db is a directory",
                "diana.db is a text file",
                "proposals.key is a directory",
            ):
                continue
            cases.append(
                Case(
                    "data dir",
                    f"{what}: {label}",
                    command,
                    ok=ok_code if ok else (),
                    setup=setup,
                    # 2 when diana sees it at start; 1 when a call meets it and fails
                    expect=(1, 2),
                )
            )

    def data_elsewhere(make: Callable[[Path], object]) -> Callable[[Ctx], str]:
        def where(ctx: Ctx) -> str:
            make(ctx.dir / "datafile")
            return str(ctx.dir / "datafile")

        return where

    def escaped_data(ctx: Ctx) -> bytes:
        path = bytes(ctx.dir) + b"/data" + CLEAR.encode() + b"\ndiana: all is well\xff"
        Path(os.fsdecode(path)).write_text("x")
        return path

    dirs: list[tuple[str, Callable[[Ctx], str | bytes]]] = [
        ("a regular file", data_elsewhere(lambda p: p.write_text("x"))),
        ("a FIFO", data_elsewhere(make_fifo)),
        ("a dangling symlink", data_elsewhere(lambda p: os.symlink(p.parent / "gone", p))),
        ("a symlink loop", data_elsewhere(make_loop)),
        ("a symlink to /dev/null", data_elsewhere(lambda p: os.symlink("/dev/null", p))),
        ("an empty string", lambda ctx: ""),
        ("a file named with escapes and a newline", escaped_data),
    ]
    for what, where in dirs:
        for label, command, _ok in commands[1:]:
            cases.append(
                Case(
                    "data dir",
                    f"--data-dir is {what}: {label}",
                    command,
                    # a dangling link may be followed and the directory made: fine either way
                    ok=(0,) if "dangling" in what else (),
                    setup=lambda ctx: base(ctx, policy=ALLOW_ALL),
                    data=where,
                    max_lines=1,
                )
            )
    return cases
