"""The attack bench's family of `config_cases()`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases import DENY_SAVE_FACT, FACT, TITLE, Case, Ctx
from ..checks import no_fact
from ..configs import base, make_chain, make_fifo, make_loop, make_socket, settings_for, write_json

CONFIG_FILES = ("settings.json", "mcp-servers.json", "tools.json", "policy.json")


WRONG_TOP = {
    "settings.json": [1, 2],
    "mcp-servers.json": "servers",
    "tools.json": 42,
    "policy.json": ["deny"],
}


WRONG_FIELD = {
    "settings.json": {"tools": {"default_timeout": "soon"}},
    "mcp-servers.json": {"mcpServers": {"x": {"command": 7}}},
    "tools.json": {"tools": [{"name": 5}]},
    "policy.json": {"tools": {"save_fact": "maybe"}},
}


DUPLICATE_KEYS = {
    "settings.json": '{"logs": {"retention_days": 5}, "logs": {"retention_days": 7}}',
    "mcp-servers.json": '{"mcpServers": {"a": {"command": "/nonexistent-a"}, '
    '"a": {"command": "/nonexistent-b"}}}',
    "tools.json": '{"tools": [], "tools": []}',
    "policy.json": '{"tools": {"save_fact": "deny", "save_fact": "allow"}}',
}


def valid_config(ctx: Ctx, name: str) -> Any:
    return {
        "settings.json": settings_for(ctx),
        "mcp-servers.json": {"mcpServers": {}},
        "tools.json": {"tools": []},
        "policy.json": DENY_SAVE_FACT,
    }[name]


def config_variants(name: str) -> list[tuple[str, Callable[[Ctx, Path], object], bool]]:
    """(variant, writer, rightly accepted?) for one config file."""

    def text(data: bytes | str) -> Callable[[Ctx, Path], object]:
        return lambda ctx, p: p.write_bytes(data if isinstance(data, bytes) else data.encode())

    def symlink_to_regular(ctx: Ctx, p: Path) -> None:
        real = ctx.dir / "elsewhere" / name
        write_json(real, valid_config(ctx, name))
        os.symlink(real, p)

    def padded(ctx: Ctx, p: Path) -> None:
        p.write_text(json.dumps(valid_config(ctx, name)) + " " * (5 * 1024 * 1024))

    def bom(ctx: Ctx, p: Path) -> None:
        p.write_bytes(b"\xef\xbb\xbf" + json.dumps(valid_config(ctx, name)).encode())

    deep = "[" * 100_000 + "]" * 100_000
    variants: list[tuple[str, Callable[[Ctx, Path], object], bool]] = [
        ("dangling symlink", lambda ctx, p: os.symlink(ctx.dir / "nowhere.json", p), False),
        ("symlink loop", lambda ctx, p: make_loop(p), False),
        ("symlink chain of 45", lambda ctx, p: make_chain(p), False),
        ("FIFO", lambda ctx, p: make_fifo(p), False),
        ("socket", lambda ctx, p: make_socket(p), False),
        ("directory", lambda ctx, p: p.mkdir(), False),
        ("symlink to /dev/zero", lambda ctx, p: os.symlink("/dev/zero", p), False),
        ("symlink to /dev/null", lambda ctx, p: os.symlink("/dev/null", p), False),
        (
            "symlink to /proc/self/environ",
            lambda ctx, p: os.symlink("/proc/self/environ", p),
            False,
        ),
        ("5 MiB file", padded, False),
        ("non-UTF-8 bytes", text(b'{"tools": "\xff\xfe\xc3("}'), False),
        ("UTF-8 BOM", bom, False),
        ("100,000-deep nesting", text(deep), False),
        ("5,000-digit number", text('{"tools": 1' + "0" * 5000 + "}"), False),
        ("wrong JSON type at the top", text(json.dumps(WRONG_TOP[name])), False),
        ("wrong JSON type in a field", text(json.dumps(WRONG_FIELD[name])), False),
        ("empty file", text(b""), False),
        ("JSON null", text(b"null"), False),
        ("duplicate keys", text(DUPLICATE_KEYS[name]), True),
        ("symlink to a regular file", symlink_to_regular, True),
    ]
    return variants


# Kinds of file tried on policy.json only (the one that must never fail open): the others are
# read by the same function.
EXTRA_KINDS = (
    "symlink chain of 45",
    "socket",
    "symlink to /dev/null",
    "symlink to /proc/self/environ",
    "UTF-8 BOM",
)


# `diana proposals` (which starts no MCP server) is tried on these; `diana call` on all.
PROPOSALS_KINDS = ("dangling symlink", "FIFO", "directory", "5,000-digit number")


def config_cases() -> list[Case]:
    cases = []
    for name in CONFIG_FILES:
        for variant, writer, accepted in config_variants(name):
            if variant in EXTRA_KINDS and name != "policy.json":
                continue

            def setup(
                ctx: Ctx, name: str = name, writer: Callable[[Ctx, Path], object] = writer
            ) -> None:
                base(ctx, skip=name)
                writer(ctx, ctx.config / name)

            # `proposals` starts no MCP server: it need not read mcp-servers.json.
            lenient = name == "mcp-servers.json"
            if name == "policy.json" and variant in PROPOSALS_KINDS:
                cases.append(
                    Case(
                        "config files",
                        f"{name} {variant}: proposals",
                        ["proposals"],
                        ok=(0,) if accepted or lenient else (),
                        setup=setup,
                        check=no_fact,
                    )
                )
            cases.append(
                Case(
                    "config files",
                    f"{name} {variant}: call save_fact (denied by policy)",
                    ["call", "save_fact", "--args", FACT],
                    # rightly accepted: the call is refused by the deny in policy.json
                    ok=(1,) if accepted else (),
                    setup=setup,
                    check=no_fact,
                )
            )

    def config_dir_setup(ctx: Ctx) -> None:
        base(ctx)

    def elsewhere(make: Callable[[Path], object]) -> Callable[[Ctx], str]:
        def where(ctx: Ctx) -> str:
            path = ctx.dir / "cfg"
            make(path)
            return str(path)

        return where

    def escaped_name(ctx: Ctx) -> bytes:
        path = bytes(ctx.dir) + b"/cfg" + TITLE.encode() + b"\nx\xff"
        Path(os.fsdecode(path)).write_text("{}")
        return path

    def linked_dir(ctx: Ctx) -> str:
        base(ctx)
        os.symlink(ctx.config, ctx.dir / "cfg")
        return str(ctx.dir / "cfg")

    dirs: list[tuple[str, Callable[[Ctx], str | bytes], bool]] = [
        ("a regular file", elsewhere(lambda p: p.write_text("{}")), False),
        ("a FIFO", elsewhere(make_fifo), False),
        ("a dangling symlink", elsewhere(lambda p: os.symlink(p.parent / "nowhere", p)), True),
        ("a symlink loop", elsewhere(make_loop), False),
        ("a symlink to /dev/zero", elsewhere(lambda p: os.symlink("/dev/zero", p)), False),
        ("an empty string", lambda ctx: "", False),
        ("a file named with escapes and a newline", escaped_name, False),
        ("a symlink to a real config dir", linked_dir, True),
    ]
    for what, where, accepted in dirs:
        commands = [(["call", "save_fact", "--args", FACT], 1)]
        if what in ("a regular file", "a FIFO"):
            commands.insert(0, (["proposals"], 0))
        for command, ok_code in commands:
            cases.append(
                Case(
                    "config files",
                    f"--config-dir is {what}: {command[0]}",
                    command,
                    # a dangling link may be refused, or be "nothing there": all defaults
                    ok=(ok_code,) if accepted and "real" in what else ((0,) if accepted else ()),
                    setup=config_dir_setup,
                    config=where,
                    check=no_fact if "real" in what else None,
                    max_lines=1,
                )
            )
    return cases
