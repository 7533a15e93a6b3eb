"""The attack bench's family of `config_edit_cases()`."""

from __future__ import annotations

import json
import os
import threading
import time

from ..cases import Case, Ctx, Run, live_processes_naming
from ..configs import base
from ..fakes import GARBAGE, serve
from .clashes import demanding


def hand_editor(ctx: Ctx, stop: threading.Event) -> None:
    """A person saving mcp-servers.json in an editor again and again, each time with one more
    server (read, changed, written to a new file renamed over the old, as editors do)."""
    path = ctx.config / "mcp-servers.json"
    written: list[str] = ctx.state.setdefault("hand", [])
    while not stop.is_set() and len(written) < 400:  # some 3 s of saving, then it rests
        try:
            current = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        name = f"hand{len(written)}"
        current["mcpServers"][name] = {"command": "/nonexistent/hand", "disabled": True}
        saved = path.with_name(f".{name}.json")
        saved.write_text(json.dumps(current))
        os.replace(saved, path)
        written.append(name)
        time.sleep(0.005)


def no_hand_edit_lost(ctx: Ctx, run: Run) -> list[str]:
    kept = json.loads((ctx.config / "mcp-servers.json").read_text())["mcpServers"]
    lost = [name for name in ctx.state.get("hand", []) if name not in kept]
    return [f"{len(lost)} edit(s) saved by hand meanwhile were lost"] if lost else []


def same_size_copy(ctx: Ctx, stop: threading.Event) -> None:
    """Once the call's server runs, policy.json is overwritten as `cp -p` would: a file of the
    same size, its modification time set back to the old file's."""
    policy = ctx.config / "policy.json"
    while not stop.is_set():
        if live_processes_naming(ctx.marker, running="demanding_server"):
            break
        time.sleep(0.02)
    old = os.stat(policy)
    with open(policy, "r+b") as out:
        out.write(ctx.state["policy after"])
        out.truncate()
    os.utime(policy, ns=(old.st_atime_ns, old.st_mtime_ns))


def many_servers(ctx: Ctx) -> None:
    """300 servers configured, none started by `diana servers disable`: a file that takes a
    while to read and check."""
    servers = {f"s{n}": {"command": f"/nonexistent/s{n}", "args": ["--serve"]} for n in range(300)}
    base(ctx, servers=servers)


def config_edit_cases() -> list[Case]:
    def sampling_allowed_then_denied(ctx: Ctx) -> None:
        hits: list[float] = []
        host, stop = serve(GARBAGE, hits)
        ctx.cleanups.append(stop)
        ctx.state["model asked"] = hits
        server = b'{"servers": {"demanding": "allow"}, '
        before = server + b'"sampling": {"demanding": "allow"}}'
        after = server + b'"sampling": {"demanding": "deny"} }'
        assert len(before) == len(after)
        base(ctx, servers={"demanding": demanding(ctx)}, llm={"host": host})
        (ctx.config / "policy.json").write_bytes(before)
        ctx.state["policy after"] = after

    def model_not_asked(ctx: Ctx, run: Run) -> list[str]:
        if ctx.state["model asked"]:
            return ["the model was asked under a sampling rule replaced by a deny"]
        return []

    return [
        Case(
            "config edits",
            "servers disable while mcp-servers.json is saved by hand",
            ["servers", "disable", "s0"],
            expect=(1, 2),  # the file kept changing: said so, the switch not made
            ok=(0,),
            setup=many_servers,
            during=hand_editor,
            verify=no_hand_edit_lost,
            max_lines=1,
        ),
        Case(
            "config edits",
            "policy.json overwritten by a same-size copy keeping its time",
            ["call", "demanding_sample_many", "--args", '{"n": 1, "delay": 2}'],
            expect=(1,),
            ok=(0,),
            setup=sampling_allowed_then_denied,
            during=same_size_copy,
            check=model_not_asked,
            max_lines=2,
            short=True,
        ),
    ]
