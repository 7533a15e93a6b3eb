"""The attack bench's family of `sign_in_cases()`."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cases import FIXTURES, ROOT, Case, Ctx, SetupFailed
from ..configs import base


class OAuthServer:
    """One OAuth-guarded server (tests/fixtures/leaky_oauth_server.py) for every case that
    signs in, started when the first asks for it."""

    def __init__(self, scratch: Path) -> None:
        self.client_secret = "cs-" + secrets.token_hex(12)
        self._scratch = scratch
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def url(self) -> str:
        with self._lock:
            if self._process is None:
                self._start()
            return f"http://127.0.0.1:{self._port}/mcp"

    def _start(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self._port = probe.getsockname()[1]
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fixtures.leaky_oauth_server",
                "--port",
                str(self._port),
                "--client-secret",
                self.client_secret,
            ],
            cwd=ROOT,
            env={**os.environ, "TMPDIR": str(self._scratch)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._process.poll() is None:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self._port), timeout=1),
            ):
                return
            time.sleep(0.1)
        raise RuntimeError("the OAuth server did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


BROWSER = f"{sys.executable} {FIXTURES / 'headless_browser.py'} %s"


# What `diana login` says on stderr as it signs in: where, and the URL for want of a browser.
SIGNING_IN = ("diana:", "Connecting to", "Finish signing in")


def guarded(ctx: Ctx, oauth: OAuthServer, auth: dict[str, Any] | None = None) -> None:
    entry: dict[str, Any] = {"url": oauth.url, "timeout": 15, "toolTimeout": 15}
    if auth is not None:
        entry["auth"] = auth
    base(ctx, servers={"guarded": entry}, policy={"servers": {"guarded": "allow"}})
    ctx.env["BROWSER"] = BROWSER


def signed_in(oauth: OAuthServer, *then: list[str]) -> Callable[[Ctx], object]:
    """Signed in (`diana login`, the browser answering at once), the tokens known as secrets
    that may be kept in oauth/ only; then each command of ``then``."""

    def setup(ctx: Ctx) -> None:
        guarded(ctx, oauth)
        ctx.diana("login", "guarded", want=(0,))
        stored = json.loads((ctx.data / "oauth" / "guarded.json").read_text())
        ctx.token_secrets += tokens_in(stored)
        if not ctx.token_secrets:
            raise SetupFailed("no token was kept after signing in")
        for command in then:
            ctx.diana(*command)

    return setup


def tokens_in(stored: Any) -> list[str]:
    """The access and refresh tokens in a token file, wherever it keeps them."""
    if isinstance(stored, list):
        return [token for value in stored for token in tokens_in(value)]
    if not isinstance(stored, dict):
        return []
    found = []
    for key, value in stored.items():
        if key in ("access_token", "refresh_token") and isinstance(value, str) and value:
            found.append(value)
        else:
            found += tokens_in(value)
    return found


def sign_in_cases(oauth: OAuthServer) -> list[Case]:
    def configured_secret(
        auth: dict[str, Any], value: str | None = None
    ) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            secret = value or "cs-" + secrets.token_hex(12)
            ctx.env["ATTACK_CLIENT_SECRET"] = secret
            ctx.secrets.append(secret)
            guarded(ctx, oauth, {**auth, "client_secret": "${ATTACK_CLIENT_SECRET}"})

        return setup

    whoami_token = ["call", "guarded_whoami_token"]
    return [
        Case(
            "sign-in",
            "a tool that answers with the token it was sent",
            whoami_token,
            expect=(1,),
            ok=(0,),
            setup=signed_in(oauth),
        ),
        Case(
            "sign-in",
            "a tool that fails naming the token it was sent",
            ["call", "guarded_fail_token"],
            expect=(1,),
            setup=signed_in(oauth),
            max_lines=1,
        ),
        Case(
            "sign-in",
            "log --json after a tool answered with the token",
            ["log", "--json"],
            ok=(0,),
            setup=signed_in(oauth, whoami_token),
        ),
        Case(
            "sign-in",
            "login with a client registered beforehand, with its secret",
            ["login", "guarded"],
            expect=(1,),
            ok=(0,),
            setup=configured_secret({"client_id": "registered-beforehand"}),
            prefixes=SIGNING_IN,
            max_lines=4,
        ),
        Case(
            "sign-in",
            "client credentials: call a tool",
            ["call", "guarded_whoami"],
            expect=(1,),
            ok=(0,),
            setup=lambda ctx: configured_secret(
                {"grant": "client_credentials", "client_id": "machine"}, oauth.client_secret
            )(ctx),
        ),
    ]
