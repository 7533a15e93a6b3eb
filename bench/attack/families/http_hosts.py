"""The attack bench's family of `http_hosts_cases()`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from ..cases import (
    ROOT,
    TIMEOUT,
    Case,
    Ctx,
    Run,
    SetupFailed,
    cmdline,
    live_processes_naming,
    printable_bytes,
)
from ..checks import effects_are, peak_kb
from ..configs import base, gate
from .running_app import database


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def port_of(url: str) -> str:
    return url.split(":")[2].split("/")[0]


# Requests (initialize, then a call) that must not get in: (name, the headers of each given
# the case, its URL and a good token, the status both get, short).
ATTEMPTS: list[tuple[str, Callable[[Ctx, str, str], list[dict[str, str]]], int, bool]] = [
    ("no token at all", lambda ctx, url, good: [{}], 401, False),
    ("a token one character off", lambda ctx, url, good: [bearer(good[:-1] + "A")], 401, False),
    ("a token 100 KB long", lambda ctx, url, good: [bearer("x" * 100_000)], 401, False),
    (
        "the token as Basic, not Bearer",
        lambda ctx, url, good: [{"Authorization": f"Basic {good}"}],
        401,
        False,
    ),
    (
        "a valid token from a page of another site (Origin)",
        lambda ctx, url, good: [{**bearer(good), "Origin": "http://evil.example"}],
        403,
        False,
    ),
    (
        "a valid token through a rebound name (Host)",
        lambda ctx, url, good: [{**bearer(good), "Host": f"evil.example:{port_of(url)}"}],
        403,
        False,
    ),
]


def http_hosts_cases() -> list[Case]:
    """`diana serve --http` attacked over HTTP: requests without a token, with a wrong,
    removed, oversized or another client's token, with a forged Origin or Host (DNS
    rebinding), another client's session, a token removed mid-session, bodies of 1 GiB
    (chunked or not) or not UTF-8, and a tokens file replaced by a FIFO or a link. No request
    without its own
    client's token may reach MCP (401), none from another site (403); a call that gets in is
    named by its token, not by what the host calls itself; the gate server's side effects
    stay empty (nothing ran), and no `diana serve` is left running."""
    cases: list[Case] = []

    def serving(
        ctx: Ctx, policy: dict[str, Any] | None = None, serve: dict[str, Any] | None = None
    ) -> str:
        """`diana serve --http` on a free port in this case's dirs; its URL once it listens.
        ``serve``: settings.json's serve section."""
        base(ctx, servers={"gate": gate(ctx)}, policy=policy)
        if serve is not None:
            path = ctx.config / "settings.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "serve": serve}))
        argv = [sys.executable, "-m", "diana.tui.cli", "--config-dir", str(ctx.config)]
        argv += ["--data-dir", str(ctx.data), "serve", "--http", "--port", "0"]
        process = subprocess.Popen(
            argv, cwd=ROOT, env=ctx.environment(), stderr=subprocess.PIPE, text=True
        )

        def stop() -> None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

        ctx.cleanups.append(stop)
        assert process.stderr is not None
        said = process.stderr.readline()
        if "serving MCP at " not in said:
            raise SetupFailed(f"diana serve --http did not start: {said.strip()}")
        return said.split("serving MCP at ", 1)[1].split()[0]

    def token(ctx: Ctx, name: str) -> str:
        made = ctx.diana("serve", "token", "add", name, want=(0,))
        return made.out.decode().strip()

    def post(url: str, headers: dict[str, str], method: str = "initialize") -> int:
        params: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "attack-host", "version": "1"},
        }
        if method == "tools/call":
            params = {"name": "gate_append_line", "arguments": {"line": "in"}}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        request = urllib.request.Request(url, data=body.encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json, text/event-stream")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as refused:
            return int(refused.code)

    def statuses_are(*expected: int) -> Callable[[Ctx, Run], list[str]]:
        def check(ctx: Ctx, run: Run) -> list[str]:
            got = tuple(ctx.state.get("statuses", ()))
            return [] if got == expected else [f"HTTP statuses {got}, not {expected}"]

        return check

    def requests(
        headers_of: Callable[[Ctx, str, str], list[dict[str, str]]],
        before: Callable[[Ctx], None] | None = None,
    ) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            url = serving(ctx)
            good = token(ctx, "laptop")
            if before is not None:
                before(ctx)
            ctx.state["statuses"] = [
                post(url, headers, method)
                for method in ("initialize", "tools/call")
                for headers in headers_of(ctx, url, good)
            ]

        return setup

    def attacked(
        name: str,
        setup: Callable[[Ctx], None],
        check: Callable[[Ctx, Run], list[str]],
        verify: Callable[[Ctx, Run], list[str]] | None = None,
        short: bool = False,
    ) -> Case:
        """A case whose setup attacks a `diana serve --http`; then the proposals are listed."""
        return Case(
            "http hosts",
            name,
            ["proposals", "--all"],
            ok=(0,),
            setup=setup,
            check=check,
            verify=verify,
            short=short,
        )

    def refused(name: str, setup: Callable[[Ctx], None], status: int, short: bool = False) -> Case:
        """Both requests (initialize, then a call) refused with ``status``; nothing ran."""
        return attacked(
            name,
            setup,
            lambda ctx, run: effects_are()(ctx, run) + statuses_are(status, status)(ctx, run),
            short=short,
        )

    for name, headers_of, status, short in ATTEMPTS:
        cases.append(refused(name, requests(headers_of), status, short))

    def removed(ctx: Ctx) -> None:
        ctx.diana("serve", "token", "remove", "laptop", want=(0,))

    def fifo(ctx: Ctx) -> None:
        tokens = ctx.data / "host-tokens.json"
        tokens.unlink()
        os.mkfifo(tokens, 0o600)

    def linked(ctx: Ctx) -> None:
        tokens = ctx.data / "host-tokens.json"
        elsewhere = ctx.dir / "elsewhere.json"
        elsewhere.write_bytes(tokens.read_bytes())
        tokens.unlink()
        tokens.symlink_to(elsewhere)
        elsewhere.unlink()  # a link to nothing

    for name, before in [
        ("a removed client's token", removed),
        ("the tokens file replaced by a FIFO", fifo),
        ("the tokens file replaced by a dangling link", linked),
    ]:
        cases.append(refused(name, requests(lambda c, u, good: [bearer(good)], before), 401))

    def named_as_another(ctx: Ctx) -> None:
        """A client with its own token calls itself `laptop` (another client) in clientInfo:
        its held call must carry its own token's name."""
        import httpx
        from mcp import ClientSession, types
        from mcp.client.streamable_http import streamable_http_client

        url = serving(ctx)
        token(ctx, "laptop")
        mine = token(ctx, "intruder")

        async def call() -> None:
            async with (
                httpx.AsyncClient(headers=bearer(mine), timeout=TIMEOUT) as http,
                streamable_http_client(url, http_client=http) as (read, write, *_),
                ClientSession(
                    read, write, client_info=types.Implementation(name="laptop", version="1")
                ) as session,
            ):
                await session.initialize()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(3):  # held: it waits for a person
                        await session.call_tool("gate_append_line", {"line": "named"})

        asyncio.run(call())

    def origin_is_the_tokens(ctx: Ctx, run: Run) -> list[str]:
        with database(ctx) as connection:
            origins = [row[0] for row in connection.execute("SELECT origin FROM proposals")]
        return (
            []
            if origins and set(origins) == {"host:intruder"}
            else [f"the proposals' origins are {origins}, not the token's client host:intruder"]
        )

    cases.append(
        Case(
            "http hosts",
            "a client naming itself as another client in clientInfo",
            ["proposals", "--all"],
            ok=(0,),
            setup=named_as_another,
            check=lambda ctx, run: effects_are()(ctx, run) + origin_is_the_tokens(ctx, run),
        )
    )

    # -- a session: another client's taken over with one's own token; a token removed
    # while its session lives; a body too large or not UTF-8 -----------------------------

    def send(
        url: str, headers: dict[str, str], body: bytes, method: str = "POST"
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url, data=body or None, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json, text/event-stream")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(answer.status), dict(answer.headers), answer.read(1 << 16)
        except urllib.error.HTTPError as refused:
            return int(refused.code), dict(refused.headers), refused.read(1 << 16)
        except TimeoutError:  # an event stream that stays open: it was let in
            return 200, {}, b""

    def message(method: str, params: dict[str, Any], number: int | None = 1) -> bytes:
        sent: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if number is not None:
            sent["id"] = number
        return json.dumps(sent).encode()

    def session_of(url: str, headers: dict[str, str]) -> dict[str, str]:
        """A session opened with ``headers``: the headers its later requests carry."""
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "attack-host", "version": "1"},
        }
        status, answer, _ = send(url, headers, message("initialize", hello))
        session = {k.lower(): v for k, v in answer.items()}.get("mcp-session-id")
        if status != 200 or not session:
            raise SetupFailed(f"initialize answered {status} with no session")
        mine = {**headers, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
        send(url, mine, message("notifications/initialized", {}, None))
        return mine

    append = {"name": "gate_append_line", "arguments": {"line": "in"}}

    def taken_over(ctx: Ctx) -> None:
        """An intruder with a token of its own sends on laptop's session: a call, a listen
        (GET: laptop's answers and notifications) and a DELETE (laptop's session ended)."""
        url = serving(ctx)
        laptop = session_of(url, bearer(token(ctx, "laptop")))
        intruder = {**laptop, **bearer(token(ctx, "intruder"))}
        ctx.state["statuses"] = [
            send(url, intruder, message("tools/call", append, 7))[0],
            send(url, intruder, b"", "GET")[0],
            send(url, intruder, b"", "DELETE")[0],
        ]
        still, _, _ = send(url, laptop, message("ping", {}, 8))  # laptop's session goes on
        ctx.state["laptop"] = still

    def laptop_kept(ctx: Ctx, run: Run) -> list[str]:
        still = ctx.state.get("laptop")
        return [] if still == 200 else [f"laptop's own session answered {still} afterwards"]

    def removed_mid_session(ctx: Ctx) -> None:
        url = serving(ctx)
        laptop = session_of(url, bearer(token(ctx, "laptop")))
        ctx.diana("serve", "token", "remove", "laptop", want=(0,))
        ctx.state["statuses"] = [
            send(url, laptop, message("tools/call", append, 7))[0],
            send(url, laptop, b"", "GET")[0],
        ]

    def all_refused(ctx: Ctx, run: Run) -> list[str]:
        got = ctx.state.get("statuses", [])
        let_in = [s for s in got if s < 400]
        return [f"HTTP statuses {got}: let in"] if let_in or not got else []

    for name, setup, verify in [
        ("another client's session, with one's own token", taken_over, laptop_kept),
        ("a token removed while its session lives", removed_mid_session, None),
    ]:
        cases.append(
            attacked(
                name,
                setup,
                lambda ctx, run: effects_are()(ctx, run) + all_refused(ctx, run),
                verify,
            )
        )

    def served_pid(ctx: Ctx) -> int:
        for pid in live_processes_naming(ctx.marker):
            if b"serve\x00--http" in cmdline(pid):
                return pid
        raise SetupFailed("no diana serve --http running")

    def big_body(
        size: int, body: Callable[[int], bytes], chunked: bool = False
    ) -> Callable[[Ctx], None]:
        """A body of ``size`` bytes, sent 1 MiB at a time on a socket of our own (a client
        library would hold it whole), its length said up front or not (chunked); then the
        gateway must still answer."""

        def setup(ctx: Ctx) -> None:
            url = serving(ctx)
            good = bearer(token(ctx, "laptop"))
            port = int(port_of(url))
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: {good['Authorization']}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\n"
                + ("Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}")
                + "\r\n\r\n"
            ).encode()
            pid = served_pid(ctx)
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
                sock.sendall(head)
                sent, chunk = 0, body(1 << 20)
                with contextlib.suppress(OSError):  # refused before its end: the door shut
                    while sent < size:
                        part = chunk[: size - sent]
                        framed = b"%x\r\n%s\r\n" % (len(part), part) if chunked else part
                        sock.sendall(framed)
                        sent += len(part)
                    sock.sendall(b"0\r\n\r\n" if chunked else b"")
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    status = sock.recv(64).split(b" ")[1:2]
                    ctx.state["statuses"] = [int(status[0])] if status else []
            ctx.state["peak_kb"] = peak_kb(pid)
            hello = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "after", "version": "1"},
            }
            ctx.state["after"] = send(url, good, message("initialize", hello))[0]

        return setup

    def body_bounded(ctx: Ctx, run: Run) -> list[str]:
        broken = []
        peak = ctx.state.get("peak_kb", 0)
        if peak > 400 * 1024:
            broken.append(f"diana serve held {peak // 1024} MiB reading one request")
        if ctx.state.get("after") != 200:
            broken.append(f"the next request answered {ctx.state.get('after')}")
        got = ctx.state.get("statuses", [])
        if got and got[0] < 400:
            broken.append(f"the body was taken ({got})")
        return broken

    for name, size, body, chunked, short in [
        ("a 1 GiB request body", 1 << 30, lambda n: b"x" * n, False, True),
        ("a 300 MiB request body, chunked", 300 << 20, lambda n: b" " * n, True, False),
    ]:
        setup = big_body(size, body, chunked)
        cases.append(attacked(name, setup, effects_are(), body_bounded, short=short))

    def odd_body(body: bytes) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            url = serving(ctx)
            laptop = session_of(url, bearer(token(ctx, "laptop")))
            status, _, said = send(url, laptop, body)
            ctx.state["statuses"] = [status]
            ctx.state["said"] = said
            ctx.state["after"] = send(url, laptop, message("ping", {}, 9))[0]

        return setup

    def answered_then_served(ctx: Ctx, run: Run) -> list[str]:
        broken = []
        said = ctx.state.get("said", b"")
        got = ctx.state.get("statuses", [])
        if not got or (got[0] < 400 and b"error" not in said):
            broken.append(f"answered {got}: {printable_bytes(said)}")
        if ctx.state.get("after") != 200:
            broken.append(f"the next request answered {ctx.state.get('after')}")
        return broken

    raw_call = (
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"gate_append_line",'
        b'"arguments":{"line":"\xff\xfe\xc3("}}}'
    )
    for name, sent_body in [
        ("a call whose body is not UTF-8", raw_call),
        (
            "arguments nested 20,000 deep",
            raw_call.split(b'"line"')[0] + b'"line": ' + b"[" * 20000 + b"]" * 20000 + b"}}}",
        ),
    ]:
        cases.append(attacked(name, odd_body(sent_body), effects_are(), answered_then_served))

    # What settings.json `serve` hides from a client, and its tasks (MCP 2025-11-25): a hidden
    # tool called by name never runs, even allowed by the policy; no client reads or cancels
    # another's task, nor a task no one made.
    def hosted(url: str, key: str, *, tasks: bool = True) -> Any:
        import httpx
        from mcp import ClientSession, types
        from mcp.client.streamable_http import streamable_http_client

        class Host(ClientSession):
            def _build_capabilities(self, version: str) -> types.ClientCapabilities:
                found = super()._build_capabilities(version)
                if tasks:
                    found.tasks = types.ClientTasksCapability(cancel=types.TasksCancelCapability())
                return found

        @contextlib.asynccontextmanager
        async def session() -> Any:
            async with (
                httpx.AsyncClient(headers=bearer(key), timeout=TIMEOUT) as http,
                streamable_http_client(url, http_client=http) as (read, write, *_),
                Host(read, write) as opened,
            ):
                await opened.initialize()
                yield opened

        return session()

    async def answer(session: Any, method: str, params: dict[str, Any]) -> str:
        """What diana answered: ``error: MESSAGE`` or ``ok: RESULT`` (the first 200 chars)."""
        from mcp import MCPError

        try:
            found = await session._dispatcher.send_raw_request(method, params, {"timeout": 20})
        except MCPError as exc:
            return f"error: {exc}"[:200]
        return f"ok: {json.dumps(found)}"[:200]

    APPEND = {"name": "gate_append_line", "arguments": {"line": "in"}}

    def hidden_call(ctx: Ctx) -> None:
        allowed = {"tools": {"gate_append_line": "allow"}}
        url = serving(ctx, allowed, {"clients": {"laptop": {"hide": ["gate_*"]}}})
        key = token(ctx, "laptop")

        async def call() -> list[str]:
            async with hosted(url, key) as session:
                plain = await answer(session, "tools/call", APPEND)
                as_task = await answer(session, "tools/call", {**APPEND, "task": {}})
                return [plain, as_task]

        ctx.state["answers"] = asyncio.run(call())

    def anothers_task(ctx: Ctx) -> None:
        url = serving(ctx)
        laptop, intruder = token(ctx, "laptop"), token(ctx, "intruder")

        async def call() -> list[str]:
            async with hosted(url, laptop) as session:
                made = await answer(session, "tools/call", {**APPEND, "task": {}})
            task_id = made.partition('"taskId": "')[2].partition('"')[0] or "none"
            ctx.state["task"] = task_id
            async with hosted(url, intruder) as session:
                return [
                    await answer(session, method, {"taskId": task_id})
                    for method in ("tasks/get", "tasks/result", "tasks/cancel")
                ]

        ctx.state["answers"] = asyncio.run(call())

    def unknown_task(ctx: Ctx) -> None:
        url = serving(ctx)
        key = token(ctx, "laptop")

        async def call() -> list[str]:
            async with hosted(url, key) as session:
                return [
                    await answer(session, "tasks/result", {"taskId": task_id})
                    for task_id in ("no-such-task", "x" * 100_000, "")
                ]

        ctx.state["answers"] = asyncio.run(call())

    def refused_as(word: str) -> Callable[[Ctx, Run], list[str]]:
        def check(ctx: Ctx, run: Run) -> list[str]:
            answers = ctx.state.get("answers") or ["none"]
            wrong = [a for a in answers if not (a.startswith("error: ") and word in a)]
            return [f"not refused as {word!r}: {wrong}"] if wrong else []

        return check

    def still_pending(ctx: Ctx, run: Run) -> list[str]:
        with database(ctx) as connection:
            rows = list(connection.execute("SELECT id, status FROM proposals"))
        wanted = [(ctx.state.get("task"), "pending")]
        return [] if rows == wanted else [f"proposals {rows}, not {wanted}"]

    for name, setup, word, also, short in [
        ("a call of a tool hidden from that client, allowed by the policy", hidden_call,
         "unknown tool", None, False),
        ("tasks/get, tasks/result and tasks/cancel of another client's task", anothers_task,
         "no task", still_pending, False),
        ("tasks/result of a task no one made", unknown_task, "no task", None, False),
    ]:  # fmt: skip
        checks = [effects_are(), refused_as(word), *([also] if also else [])]
        cases.append(
            Case(
                "http hosts",
                name,
                ["proposals", "--all"],
                ok=(0,),
                setup=setup,
                check=lambda ctx, run, checks=checks: [f for c in checks for f in c(ctx, run)],
                short=short,
            )
        )

    # `diana serve --only SERVER`: a name that is not an enabled server of the file is one
    # line naming the file, before anything is served or started.
    def only_servers(ctx: Ctx) -> None:
        base(ctx, servers={"gate": gate(ctx), "off": {**gate(ctx), "disabled": True}})

    for name, only, extra in [
        ("serve --only a path", "../gate", []),
        ("serve --only a name with control characters", "ga\x1b]0;pwned\x07te", []),
        ("serve --http --only a disabled server", "off", ["--http", "--port", "0"]),
    ]:
        cases.append(
            Case(
                "http hosts",
                name,
                ["serve", *extra, "--only", only],
                setup=only_servers,
                check=effects_are(),
                max_lines=1,
            )
        )
    return cases
