"""The attack bench's family of `secret_cases()`."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ..cases import ALLOW_ALL, FIXTURE, GATE, Case, Ctx
from ..configs import base, gate, python_server
from .proposals import propose


def secret_cases() -> list[Case]:
    cases: list[Case] = []

    def vault(ctx: Ctx) -> str:
        token = ctx.state.setdefault("token", "tok-" + secrets.token_hex(12))
        ctx.secrets.append(token)
        base(
            ctx,
            servers={
                "vault": gate(
                    ctx,
                    env={"API_TOKEN": token},
                    args=[GATE, "--side-effects", str(ctx.effects), "--print-env", "API_TOKEN"],
                )
            },
            policy=ALLOW_ALL,
        )
        return token

    def vault_called(ctx: Ctx) -> None:
        vault(ctx)
        ctx.diana("call", "vault_get_env", "--args", '{"name": "API_TOKEN"}', want=(0,))

    get_env = ["call", "vault_get_env", "--args", '{"name": "API_TOKEN"}']
    steps: list[tuple[str, Callable[[Ctx], object], list[str], Sequence[int], bool]] = [
        ("servers", vault, ["servers"], (0,), False),
        ("servers --json (stderr tail holds it)", vault, ["servers", "--json"], (0,), False),
        ("tools --json", vault, ["tools", "--json"], (0,), False),
        ("call get_env", vault, get_env, (0,), False),
        ("call get_env --json", vault, [*get_env, "--json"], (0,), False),
        ("log --json after get_env", vault_called, ["log", "--json"], (0,), False),
    ]

    def expanded(ctx: Ctx) -> None:
        token = "exp-" + secrets.token_hex(12)
        ctx.secrets.append(token)
        ctx.env["ATTACK_SECRET"] = token
        base(
            ctx,
            servers={"vault": gate(ctx, env={"API_TOKEN": "${ATTACK_SECRET}"})},
            policy=ALLOW_ALL,
        )

    def url_password(ctx: Ctx) -> None:
        token = "pw-" + secrets.token_hex(12)
        ctx.secrets.append(token)
        base(
            ctx,
            servers={"web": {"url": f"http://user:{token}@127.0.0.1:9/mcp", "timeout": 2}},
            policy=ALLOW_ALL,
        )

    def header(ctx: Ctx) -> None:
        token = "hdr-" + secrets.token_hex(12)
        ctx.secrets.append(token)
        base(
            ctx,
            servers={
                "web": {
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": f"Bearer {token}"},
                    "timeout": 2,
                }
            },
            policy=ALLOW_ALL,
        )

    def in_error(ctx: Ctx) -> None:
        token = "err-" + secrets.token_hex(12)
        ctx.secrets.append(token)
        ctx.state["token"] = token
        base(
            ctx,
            servers={"fx": python_server(FIXTURE, env={"FIXTURE_TOKEN": token})},
            policy={"tools": {}, "servers": {"fx": "allow"}},
        )

    def in_error_logged(ctx: Ctx) -> None:
        in_error(ctx)
        ctx.diana(
            "call",
            "fx_fail",
            "--args",
            json.dumps({"message": f"leaking {ctx.state['token']}"}),
            want=(1,),
        )

    def crash_stderr(ctx: Ctx) -> None:
        token = "crash-" + secrets.token_hex(12)
        ctx.secrets.append(token)
        base(
            ctx,
            servers={
                "dead": python_server(
                    FIXTURE,
                    "--exit-at-start",
                    "3",
                    "--stderr",
                    f"token={token}",
                    env={"FIXTURE_TOKEN": token},
                )
            },
            policy=ALLOW_ALL,
        )

    def secret_argument(decision: str) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            token = "arg-" + secrets.token_hex(12)
            ctx.stored_secrets.append(token)
            proposal_id = propose(ctx, api_key=token)
            ctx.diana(decision, proposal_id, want=(0,))

        return setup

    steps += [
        ("${VAR}-expanded env: call get_env", expanded, get_env, (0,), False),
        ("password in a URL: servers --json", url_password, ["servers", "--json"], (), True),
        ("password in a URL: servers", url_password, ["servers"], (), True),
        ("header value: servers --json", header, ["servers", "--json"], (), True),
        (
            "secret in a tool's error",
            in_error,
            ["call", "fx_fail", "--args", '{"message": "x"}'],
            (),
            False,
        ),
        ("secret in a tool's error: log --json", in_error_logged, ["log", "--json"], (0,), False),
        (
            "secret on a crashing server's stderr: servers --json",
            crash_stderr,
            ["servers", "--json"],
            (),
            True,
        ),
        (
            "secret-named argument, rejected: proposals --all --json",
            secret_argument("reject"),
            ["proposals", "--all", "--json"],
            (0,),
            False,
        ),
        (
            "secret-named argument, approved: log --json",
            secret_argument("approve"),
            ["log", "--json"],
            (0,),
            False,
        ),
    ]
    for what, setup, command, ok, reported in steps:
        if what == "secret in a tool's error":

            def command_for(ctx: Ctx) -> list[str]:
                return [
                    "call",
                    "fx_fail",
                    "--args",
                    json.dumps({"message": f"leaking {ctx.state['token']}"}),
                ]

            args: Any = command_for
        else:
            args = command
        cases.append(
            Case(
                "secrets",
                what,
                args,
                expect=(1,),
                ok=ok,
                setup=setup,
                quiet_ok=reported,
                max_lines=2,
            )
        )
    return cases
