"""The attack bench's family of `hostile_server_cases()`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..cases import ABUSIVE, ALLOW_ALL, CLEAR, ESCAPES, FIXTURE, SPAWNING, TITLE, Case, Ctx
from ..configs import base, python_server


def hostile_server_cases(silent_url: str, garbage_url: str) -> list[Case]:
    cases: list[Case] = []

    def servers_setup(
        make: Callable[[Ctx], dict[str, Any]], allow: bool = True
    ) -> Callable[[Ctx], object]:
        """The servers configured; with ``allow``, a policy that lets their tools run (a tool
        with no annotations is irreversible and would otherwise wait for a person)."""

        def setup(ctx: Ctx) -> None:
            servers = make(ctx)
            policy = {"tools": {}, "servers": dict.fromkeys(servers, "allow") if allow else {}}
            base(ctx, servers=servers, policy=policy)

        return setup

    def spawning(how: str, *extra: str, n: int = 1) -> Callable[[Ctx], dict[str, Any]]:
        return lambda ctx: {
            f"spawn{i}" if n > 1 else "spawn": python_server(
                SPAWNING,
                "--pids",
                str(ctx.dir / f"sleepers{i}"),
                "--how",
                how,
                *extra,
                timeout=10 if n > 1 else 3,
            )
            for i in range(n)
        }

    shell = "/bin/sh"
    servers: list[tuple[str, Callable[[Ctx], dict[str, Any]], bool, str, str]] = [
        # (what, servers, ready?, tool to call, its arguments)
        ("spawning (setsid sleeper)", spawning("setsid"), True, "spawn_echo", '{"text": "hi"}'),
        (
            "spawning (double-fork sleeper)",
            spawning("double-fork"),
            True,
            "spawn_echo",
            '{"text": "hi"}',
        ),
        (
            "spawning, never answering (setsid)",
            spawning("setsid", "--never-answer"),
            False,
            "spawn_echo",
            '{"text": "hi"}',
        ),
        (
            "spawning, never answering (double-fork)",
            spawning("double-fork", "--never-answer"),
            False,
            "spawn_echo",
            '{"text": "hi"}',
        ),
        (
            "8 spawning servers at once",
            spawning("setsid", n=8),
            True,
            "spawn3_echo",
            '{"text": "hi"}',
        ),
        (
            "list_changed flood",
            lambda ctx: {"abuse": python_server(ABUSIVE, "list-changed-flood")},
            True,
            "abuse_echo",
            '{"text": "hi"}',
        ),
        (
            "stdout not JSON-RPC",
            lambda ctx: {"abuse": python_server(ABUSIVE, "not-jsonrpc")},
            False,
            "abuse_echo",
            '{"text": "hi"}',
        ),
        (
            "endless reply line",
            lambda ctx: {"abuse": python_server(ABUSIVE, "endless-reply")},
            True,
            "abuse_echo",
            '{"text": "hi"}',
        ),
        (
            "64 MiB stderr flood",
            lambda ctx: {
                "abuse": python_server(ABUSIVE, "stderr-flood", "--megabytes", "64", timeout=20)
            },
            True,
            "abuse_echo",
            '{"text": "hi"}',
        ),
        (
            "escape sequences everywhere",
            lambda ctx: {"esc": python_server(ESCAPES)},
            True,
            "esc_explode",
            "{}",
        ),
        (
            "never answering",
            lambda ctx: {"mute": python_server(FIXTURE, "--never-answer")},
            False,
            "mute_echo",
            '{"text": "hi"}',
        ),
        (
            "exits at start with code 3",
            lambda ctx: {
                "dead": python_server(FIXTURE, "--exit-at-start", "3", "--stderr", f"dying{TITLE}")
            },
            False,
            "dead_echo",
            '{"text": "hi"}',
        ),
        (
            "a command that does not exist",
            lambda ctx: {"gone": {"command": "/nonexistent/mcp-server", "timeout": 3}},
            False,
            "gone_x",
            "{}",
        ),
        (
            "a command that is a directory",
            lambda ctx: {"dir": {"command": "/tmp", "timeout": 3}},
            False,
            "dir_x",
            "{}",
        ),
        (
            "a command that prints escapes and exits",
            lambda ctx: {
                "noise": {
                    "command": shell,
                    "args": ["-c", "printf '\\033[2J\\033]0;pwned\\007hello\\n'; exit 7"],
                    "timeout": 3,
                }
            },
            False,
            "noise_x",
            "{}",
        ),
        (
            "a server that closes stdout and sleeps",
            lambda ctx: {
                "shut": {
                    "command": shell,
                    "args": ["-c", "exec 1>&-; exec sleep 600"],
                    "timeout": 3,
                }
            },
            False,
            "shut_x",
            "{}",
        ),
        (
            "a server ignoring SIGTERM with a setsid child",
            lambda ctx: {
                "stub": {
                    "command": shell,
                    "args": [
                        "-c",
                        f"trap '' TERM HUP; setsid sleep 600 & exec {sys.executable} {FIXTURE}",
                    ],
                    "timeout": 5,
                }
            },
            True,
            "stub_echo",
            '{"text": "hi"}',
        ),
        (
            "a URL that refuses connections",
            lambda ctx: {"web": {"url": "http://127.0.0.1:9/mcp", "timeout": 3}},
            False,
            "web_x",
            "{}",
        ),
        (
            "a URL that never answers",
            lambda ctx: {"web": {"url": silent_url, "timeout": 3}},
            False,
            "web_x",
            "{}",
        ),
        (
            "a URL answering garbage",
            lambda ctx: {"web": {"url": garbage_url, "timeout": 3}},
            False,
            "web_x",
            "{}",
        ),
    ]
    # Each server's tool call succeeds only where the server works and the tool answers.
    call_fails = ("endless reply line", "escape sequences everywhere")
    # tools, servers --json and health where the server says something hostile about itself.
    detailed = ("stdout not JSON-RPC", "escape sequences everywhere", "never answering")
    for what, make, ready, tool, arguments in servers:
        setup = servers_setup(make)
        commands: list[tuple[str, list[str], Sequence[int]]] = [
            ("servers", ["servers"], (0,) if ready else ()),
            (
                f"call {tool}",
                ["call", tool, "--args", arguments],
                (0,) if ready and what not in call_fails else (),
            ),
        ]
        if what in detailed:
            commands += [
                ("tools", ["tools"], (0,)),
                ("servers --json", ["servers", "--json"], (0,) if ready else ()),
                ("health", ["health"], (0,) if ready else ()),
            ]
        for label, command, ok in commands:
            cases.append(
                Case(
                    "hostile servers",
                    f"{what}: {label}",
                    command,
                    # servers/health report a server that is down on stdout, exit 1
                    expect=(1, 2) if label.startswith("call") else (1,),
                    ok=ok if label != "tools" else (0,),
                    setup=setup,
                    quiet_ok=not label.startswith("call"),
                    max_lines=1 if label.startswith("call") else 5,
                )
            )
    cases.append(
        Case(
            "hostile servers",
            "exits at start: reconnect --all",
            ["reconnect", "--all"],
            expect=(1,),
            setup=servers_setup(
                lambda ctx: {"dead": python_server(FIXTURE, "--exit-at-start", "3")}
            ),
            max_lines=2,
            prefixes=("diana:", "dead:"),  # one line per server, by name
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "an unset ${VARIABLE} in env",
            ["servers"],
            setup=servers_setup(
                lambda ctx: {"v": python_server(FIXTURE, env={"T": "${ATTACK_UNSET_VARIABLE}"})}
            ),
            max_lines=1,
        )
    )

    # The fixture server's own ways to fail, one call each.
    fixture = servers_setup(
        lambda ctx: {"fx": python_server(FIXTURE, "--large-output", toolTimeout=2)}
    )
    calls: list[tuple[str, str, str, Sequence[int], Sequence[int]]] = [
        ("crashes mid-call", "fx_crash", "{}", (1,), ()),
        ("crashes after answering", "fx_crash_later", '{"seconds": 0.1}', (1,), (0,)),
        ("sleeps past toolTimeout", "fx_slow", '{"seconds": 60}', (1,), ()),
        (
            "fails with escapes and a forged line",
            "fx_fail",
            json.dumps({"message": f"boom{TITLE}{CLEAR}\ndiana: forged"}),
            (1,),
            (),
        ),
        ("answers 20 MB", "fx_big_text", '{"size": 20000000}', (1,), (0,)),
        ("writes a 1 MB stderr line", "fx_write_stderr", '{"size": 1000000}', (1,), (0,)),
        ("answers an image", "fx_picture", "{}", (1,), (0,)),
    ]
    for what, tool, arguments, expect, ok in calls:
        cases.append(
            Case(
                "hostile servers",
                f"a tool that {what}",
                ["call", tool, "--args", arguments],
                expect=expect,
                ok=ok,
                setup=fixture,
                max_lines=1,
            )
        )

    def escape_tool(ctx: Ctx) -> list[str]:
        listed = ctx.diana("tools", "--json", want=(0,))
        names = [t["name"] for t in json.loads(listed.out) if t["name"].startswith("esc_shout")]
        return ["call", names[0] if names else "esc_shout", "--args", "{}"]

    esc = servers_setup(lambda ctx: {"esc": python_server(ESCAPES)})
    cases.append(
        Case(
            "hostile servers",
            "escape server: call its shout tool",
            escape_tool,
            expect=(1, 2),
            ok=(0,),
            setup=esc,
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "escape server: tools --json",
            ["tools", "--json"],
            ok=(0,),
            setup=esc,
        )
    )
    esc_asking = servers_setup(lambda ctx: {"esc": python_server(ESCAPES)}, allow=False)

    def escape_proposal(ctx: Ctx) -> None:
        esc_asking(ctx)
        made = ctx.diana(
            "call",
            "esc_remove",
            "--args",
            json.dumps({"path": f"/x{TITLE}"}, ensure_ascii=False),
            want=(3,),
        )
        ctx.state["id"] = made.out.decode().split()[-1]

    cases.append(
        Case(
            "hostile servers",
            "escape server: approve its destructive call",
            lambda c: ["approve", c.state["id"]],
            ok=(0,),
            setup=escape_proposal,
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "escape server: proposals",
            ["proposals"],
            ok=(0,),
            setup=escape_proposal,
        )
    )

    # Local tools and code_execution that try to leave a process behind.
    def local(script: str, timeout: float = 5) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            tool = {
                "name": "escapee",
                "description": "Leaves a process behind.",
                "parameters": {"type": "object", "properties": {}},
                "script": "escapee.py",
                "timeout": timeout,
                "risk": "reversible",
            }
            base(ctx, tools=[tool], policy=ALLOW_ALL)
            (ctx.config / "tools").mkdir(exist_ok=True)
            (ctx.config / "tools" / "escapee.py").write_text(
                script.replace("PIDS", str(ctx.dir / "sleepers"))
            )

        return setup

    setsid_tool = (
        "import subprocess\ndef run(arguments):\n"
        "    p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "    open('PIDS', 'a').write(f'{p.pid}\\n')\n    return 'left one'\n"
    )
    fork_tool = (
        "import os, time\ndef run(arguments):\n    if os.fork() == 0:\n        os.setsid()\n"
        "        if os.fork() == 0:\n            open('PIDS', 'a').write(f'{os.getpid()}\\n')\n"
        "            time.sleep(600)\n        os._exit(0)\n    return 'left one'\n"
    )
    hang_tool = "import time\ndef run(arguments):\n    time.sleep(600)\n"
    cases.append(
        Case(
            "hostile servers",
            "a local tool that leaves a setsid child",
            ["call", "escapee"],
            ok=(0,),
            setup=local(setsid_tool),
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "a local tool that double-forks",
            ["call", "escapee"],
            ok=(0,),
            setup=local(fork_tool),
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "a local tool past its timeout",
            ["call", "escapee"],
            expect=(1,),
            setup=local(hang_tool, timeout=2),
            max_lines=1,
        )
    )

    def code(snippet: str) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx, policy={"tools": {"code_execution": "allow"}, "servers": {}})
            made = ctx.diana(
                "call",
                "code_execution",
                "--args",
                json.dumps(
                    {
                        "language": "shell",
                        "code": snippet.replace("PIDS", str(ctx.dir / "sleepers")),
                    }
                ),
                want=(3,),
            )
            ctx.state["id"] = made.out.decode().split()[-1]

        return setup

    cases.append(
        Case(
            "hostile servers",
            "code_execution leaving a setsid sleeper (approved)",
            lambda c: ["approve", c.state["id"]],
            ok=(0,),
            setup=code("setsid sleep 600 >/dev/null 2>&1 & echo $! >> PIDS; echo done"),
        )
    )
    cases.append(
        Case(
            "hostile servers",
            "code_execution allowed by policy still asks",
            lambda c: [
                "call",
                "code_execution",
                "--args",
                json.dumps({"language": "shell", "code": f"touch {c.mark}"}),
            ],
            expect=(3,),
            setup=lambda c: base(c, policy={"tools": {"code_execution": "allow"}, "servers": {}}),
            check=lambda c, r: ["code_execution ran without approval"] if c.mark.exists() else [],
        )
    )
    return cases
