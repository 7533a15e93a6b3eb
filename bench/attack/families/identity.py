"""The attack bench's family of `identity_cases()`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases import ALLOW_ALL, FIXTURES, GATE, Case, Ctx, Run
from ..checks import effects, effects_are
from ..configs import base, gate, python_server, write_json
from .records import proposal_status


def identity_cases() -> list[Case]:
    """An "always allow" for MCP server ``srva``'s ``append_line``, as diana wrote it before it
    recorded programs (bound on its first use since), then ``srva`` renamed, edited or
    re-pointed to another program (the gate server writing another file): the new program's
    call must ask. A proposal approved after its server was re-pointed must not run; a
    removed server's rule must not allow another program put under its name."""

    legacy_allow = {"tools": {"srva_append_line": {"rule": "allow", "server": "srva"}}}

    def other(ctx: Ctx) -> Path:
        return ctx.dir / "other.txt"

    def other_gate(ctx: Ctx) -> dict[str, Any]:
        return python_server(GATE, "--side-effects", str(other(ctx)), timeout=10)

    def allowed_then(
        change: Callable[[Ctx], dict[str, Any]], two: bool = False
    ) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            servers = {"srva": gate(ctx)}
            if two:  # srvb runs the other program
                servers["srvb"] = other_gate(ctx)
            base(ctx, servers=servers, policy=legacy_allow)
            ctx.diana("call", "srva_append_line", "--args", '{"line": "allowed"}', want=(0,))
            write_json(ctx.config / "mcp-servers.json", {"mcpServers": change(ctx)})

        return setup

    def new_program_asked(ctx: Ctx, run: Run) -> list[str]:
        found = []
        if other_ran := (other(ctx).read_text().splitlines() if other(ctx).exists() else []):
            found.append(f"the re-pointed server's program ran unasked: {other_ran}")
        if effects(ctx) != ["allowed"]:
            found.append(f"side effects {effects(ctx)} (expected ['allowed'])")
        return found

    def env_command(ctx: Ctx) -> dict[str, Any]:
        """srva started by another command (env), running the other program."""
        command = shutil.which("env") or "/usr/bin/env"
        args = [sys.executable, GATE, "--side-effects", str(other(ctx))]
        return {"srva": {"command": command, "args": args, "timeout": 10}}

    call = ["call", "srva_append_line", "--args", '{"line": "unasked"}']

    def allow_case(
        name: str, change: Callable[[Ctx], dict[str, Any]], two: bool = False, short: bool = False
    ) -> Case:
        return Case(
            "server identity",
            name,
            call,
            expect=(3,),
            setup=allowed_then(change, two),
            check=new_program_asked,
            quiet_ok=True,
            short=short,
        )

    # -- a re-pointed URL: two append servers over HTTP on 127.0.0.1

    def http_servers(ctx: Ctx) -> None:
        urls = []
        for file in (ctx.effects, other(ctx)):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(FIXTURES / "append_server.py"),
                    "--file",
                    str(file),
                    "--transport",
                    "http",
                    "--port",
                    str(port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=ctx.environment(),
            )
            ctx.cleanups.append(lambda process=process: (process.kill(), process.wait()))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and process.poll() is None:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            urls.append(f"http://127.0.0.1:{port}/mcp")
        allow = {"tools": {"srva_append": {"rule": "allow", "server": "srva"}}}
        base(ctx, servers={"srva": {"url": urls[0], "timeout": 10}}, policy=allow)
        ctx.diana("call", "srva_append", "--args", '{"mark": "allowed"}', want=(0,))
        write_json(
            ctx.config / "mcp-servers.json",
            {"mcpServers": {"srva": {"url": urls[1], "timeout": 10}}},
        )

    # -- a proposal made, its server re-pointed, then approved

    def proposed_then_re_pointed(ctx: Ctx) -> None:
        base(ctx, servers={"srva": gate(ctx)}, policy=ALLOW_ALL)
        made = ctx.diana("call", "srva_append_line", "--args", '{"line": "proposed"}', want=(3,))
        ctx.state["id"] = made.out.decode().split()[-1]
        write_json(ctx.config / "mcp-servers.json", {"mcpServers": {"srva": other_gate(ctx)}})

    def nothing_ran(ctx: Ctx, run: Run) -> list[str]:
        ran = effects(ctx) + (other(ctx).read_text().splitlines() if other(ctx).exists() else [])
        return [f"a proposal approved after its server was re-pointed ran: {ran}"] if ran else []

    def withdrawn(ctx: Ctx, run: Run) -> list[str]:
        status = proposal_status(ctx)
        return [] if status == "withdrawn" else [f"the proposal is {status}, not withdrawn"]

    # -- a server removed, its rule kept; another program put under its name

    def removed_then_re_added(ctx: Ctx) -> None:
        base(ctx, servers={"srva": gate(ctx)}, policy=legacy_allow)
        ctx.diana("call", "srva_append_line", "--args", '{"line": "allowed"}', want=(0,))
        ctx.diana("servers", "remove", "srva", want=(0,))
        listed = ctx.diana("policy", want=(0,))
        ctx.state["orphaned"] = b"orphaned" in listed.out
        write_json(ctx.config / "mcp-servers.json", {"mcpServers": {"srva": other_gate(ctx)}})

    def orphaned_shown(ctx: Ctx, run: Run) -> list[str]:
        shown = ctx.state.get("orphaned")
        return [] if shown else ["diana policy does not say the removed server's rule is orphaned"]

    return [
        allow_case(
            "allow, then srva's args edited to another program",
            lambda ctx: {"srva": other_gate(ctx)},
        ),
        allow_case("allow, then srva's command re-pointed (env python ...)", env_command),
        allow_case(
            "allow, then srva and srvb swap names",
            lambda ctx: {"srva": other_gate(ctx), "srvb": gate(ctx)},
            two=True,
        ),
        Case(
            "server identity",
            "allow, then srva's url re-pointed to another server",
            ["call", "srva_append", "--args", '{"mark": "unasked"}'],
            expect=(3,),
            setup=http_servers,
            check=new_program_asked,
            quiet_ok=True,
        ),
        Case(
            "server identity",
            "allow, then srva's env changed only: still allowed",
            call,
            ok=(0,),
            setup=allowed_then(lambda ctx: {"srva": gate(ctx, env={"UNRELATED": "1"})}),
            check=effects_are("allowed", "unasked"),
        ),
        Case(
            "server identity",
            "proposal pending, srva re-pointed, then approve",
            lambda ctx: ["approve", ctx.state["id"]],
            expect=(2,),
            setup=proposed_then_re_pointed,
            check=nothing_ran,
            verify=withdrawn,
            short=True,
        ),
        Case(
            "server identity",
            "allow, srva removed (orphaned), another program added as srva",
            call,
            expect=(3,),
            setup=removed_then_re_added,
            check=new_program_asked,
            verify=orphaned_shown,
            quiet_ok=True,
        ),
    ]
