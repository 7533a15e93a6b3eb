"""The attack bench's family of `hosts_cases()`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from ..cases import (
    CLEAR,
    FIXTURES,
    ROOT,
    TIMEOUT,
    TITLE,
    Case,
    Ctx,
    Run,
    SetupFailed,
    printable_bytes,
)
from ..checks import effects, effects_are, no_fact, peak_kb
from ..configs import base, gate, python_server
from .running_app import database


def call_line(arguments: str) -> bytes:
    """A tools/call line (id 900) of gate_append_line with these arguments, as JSON text."""
    return (
        b'{"jsonrpc": "2.0", "id": 900, "method": "tools/call", "params": '
        b'{"name": "gate_append_line", "arguments": ' + arguments.encode() + b"}}"
    )


def deep(depth: int) -> str:
    """Arguments with a list nested ``depth`` deep."""
    return '{"line": "n", "extra": ' + "[" * depth + "]" * depth + "}"


# Bad requests on stdin: (name, the lines sent, whether the one with id 900 must be answered
# with an error, short). Each is answered or passed over, and the host is served on.
BAD_REQUESTS: list[tuple[str, tuple[bytes | dict[str, Any], ...], bool, bool]] = [
    ("a line that is not JSON", (b"{not json",), False, False),
    ("arguments that are a string, not an object", (call_line('"rm -rf"'),), True, False),
    ("arguments that are null", (call_line("null"),), True, False),
    (
        "tools/call without a name",
        (b'{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{}}',),
        True,
        False,
    ),
    (
        "an unknown method",
        ({"jsonrpc": "2.0", "id": 900, "method": "tools/run", "params": {}},),
        True,
        False,
    ),
    ("arguments nested 100 deep (past diana's limit)", (call_line(deep(100)),), True, False),
    ("arguments nested 200 deep (past the SDK's reader)", (call_line(deep(200)),), True, False),
    ("arguments nested 20,000 deep", (call_line(deep(20000)),), True, False),
    ("a 4 MiB line of garbage", (b"x" * (4 << 20),), False, True),
]

# Calls whose arguments are odd: (name, arguments, or the raw line sent instead). Each is
# held like any other, and withdrawn when its host leaves.
ODD_ARGUMENTS: list[tuple[str, Any, bytes | None]] = [
    ("a 2 MiB argument", {"line": "y" * (2 << 20)}, None),
    (
        "non-UTF-8 bytes in an argument",
        None,
        b'{"jsonrpc":"2.0","id":950,"method":"tools/call","params":{"name":"gate_append_line",'
        b'"arguments":{"line":"\xff\xfe\xc3("},"_meta":{"progressToken":950}}}',
    ),
    ("an escape sequence and a NUL in an argument", {"line": f"{TITLE}\u0000x"}, None),
]


def hosts_cases() -> list[Case]:
    """`diana serve` attacked by the MCP hosts that talk to it over stdio: each case's setup
    plays a host on a `diana serve` of its own (raw JSON-RPC lines on its stdin, read back from
    its stdout), and the case's command then looks at what is left. A call the gate holds
    must never run without a person's approval (the gate server's side-effect file), run
    once when approved, be withdrawn when its host goes away, and `diana serve` must exit 0
    on stdin's end with nothing of it left running. Also: 1,000 calls at once, a 1 GiB line,
    servers whose tools are named near diana's built-ins, and an upstream server that floods
    a host's call with elicitations."""
    cases: list[Case] = []
    started = "hosts_serves"

    class Host:
        """One host on one `diana serve`: lines to its stdin, JSON-RPC read from stdout."""

        def __init__(
            self,
            ctx: Ctx,
            name: str | bytes = "attack-host",
            capabilities: dict[str, Any] | None = None,
        ) -> None:
            self.ctx = ctx
            self.errors = ctx.dir / f"serve-{len(ctx.state.setdefault(started, []))}.err"
            argv = [
                sys.executable,
                "-m",
                "diana.tui.cli",
                "--config-dir",
                str(ctx.config),
                "--data-dir",
                str(ctx.data),
                "serve",
                "--keep-alive",
                "0.2",
            ]
            self.start = time.monotonic()
            with self.errors.open("wb") as errors:
                self.process = subprocess.Popen(
                    argv,
                    cwd=ROOT,
                    env=ctx.environment(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    umask=ctx.umask,
                )
            ctx.state[started].append(self)
            ctx.cleanups.append(self.kill)
            self.buffer = b""
            self.out = b""
            self.stopped = False  # told to stop (SIGTERM): exit 130, not 0
            self.progress: list[str] = []
            self.next_id = 1
            client = name if isinstance(name, str) else name.decode("utf-8", "replace")
            self.request(
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities or {},
                    "clientInfo": {"name": client, "version": "1"},
                },
            )
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        def send(self, message: dict[str, Any] | bytes) -> None:
            line = message if isinstance(message, bytes) else json.dumps(message).encode()
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(line + b"\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                raise SetupFailed("diana serve stopped reading its stdin") from None

        def read(self, until: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
            """Messages from diana serve until one ``until`` holds for (progress is kept)."""
            assert self.process.stdout is not None
            deadline = time.monotonic() + within
            while True:
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    try:
                        message = json.loads(line)
                    except ValueError:
                        raise SetupFailed(
                            f"not JSON-RPC on stdout: {printable_bytes(line)}"
                        ) from None
                    if message.get("method") == "notifications/progress":
                        self.progress.append(str(message["params"].get("message", "")))
                    if until(message):
                        return message
                left = deadline - time.monotonic()
                ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, left))
                if not ready:
                    self.hung(f"no answer within {within:.0f} s")
                data = os.read(self.process.stdout.fileno(), 1 << 20)
                if not data:
                    raise SetupFailed("diana serve closed stdout before answering")
                self.buffer += data
                self.out += data

        def request(
            self, method: str, params: dict[str, Any], within: float = TIMEOUT
        ) -> dict[str, Any]:
            number = self.next_id
            self.next_id += 1
            self.send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
            return self.read(lambda m: m.get("id") == number, within)

        def call(self, tool: str, arguments: Any) -> int:
            """Send a tools/call asking for progress; its request id."""
            number = self.next_id
            self.next_id += 1
            params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": number}}
            self.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
            return number

        def held(self, number: int) -> str:
            """The proposal a call waits on, from its first progress notification."""
            message = self.read(
                lambda m: (
                    m.get("id") == number
                    or (
                        m.get("method") == "notifications/progress"
                        and m["params"].get("progressToken") == number
                    )
                ),
                TIMEOUT,
            )
            if "id" in message:
                raise SetupFailed(
                    f"the call was not held: {printable_bytes(json.dumps(message).encode())}"
                )
            return str(message["params"]["message"]).rsplit(" ", 1)[-1]

        def answer(self, number: int) -> dict[str, Any]:
            return self.read(lambda m: m.get("id") == number, TIMEOUT)

        def hung(self, why: str) -> None:
            self.kill()
            self.record(hung=True)
            raise SetupFailed(f"diana serve: {why}")

        def leave(self) -> int | None:
            """The host goes away (stdin closed): diana serve must exit 0 on its own."""
            assert self.process.stdin is not None
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.hung("still running 30 s after its stdin closed")
            assert self.process.stdout is not None
            self.out += self.process.stdout.read()
            self.record(hung=False)
            return self.process.returncode

        def stop(self) -> None:
            """diana serve is told to stop (SIGTERM) while its host still holds stdin."""
            self.stopped = True
            self.process.terminate()
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.hung("still running 30 s after SIGTERM")
            self.record(hung=False)

        def record(self, *, hung: bool) -> None:
            err = self.errors.read_bytes() if self.errors.exists() else b""
            seconds = time.monotonic() - self.start
            self.ctx.runs.append(Run(("serve",), self.process.returncode, b"", err, seconds, hung))

        def kill(self) -> None:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def gateway(ctx: Ctx) -> None:
        base(ctx, servers={"gate": gate(ctx)})

    def proposals(ctx: Ctx) -> dict[str, dict[str, Any]]:
        with database(ctx) as connection:
            rows = connection.execute("SELECT id, status, origin FROM proposals").fetchall()
        return {row[0]: {"status": row[1], "origin": row[2]} for row in rows}

    def exited_cleanly(ctx: Ctx, run: Run) -> list[str]:
        """Every diana serve left with exit 0, nothing but JSON-RPC on its stdout, and no
        proposal of a host left pending."""
        broken = []
        for host in ctx.state.get(started, []):
            if host.process.returncode != (130 if host.stopped else 0):
                broken.append(f"diana serve exited {host.process.returncode}, not 0")
            for line in host.out.splitlines():
                try:
                    if json.loads(line).get("jsonrpc") != "2.0":
                        raise ValueError
                except (ValueError, AttributeError):
                    broken.append(f"not JSON-RPC on stdout: {printable_bytes(line)}")
                    break
        pending = [p for p, row in proposals(ctx).items() if row["status"] == "pending"]
        if pending:
            broken.append(f"proposals left pending after their host left: {pending}")
        return broken

    def and_then(*more: Callable[[Ctx, Run], list[str]]) -> Callable[[Ctx, Run], list[str]]:
        return lambda ctx, run: exited_cleanly(ctx, run) + [b for m in more for b in m(ctx, run)]

    # -- bad requests: each answered (or, unreadable, passed over) and the host served on ----

    def bad_then_ping(*lines: bytes | dict[str, Any], answers: bool) -> Callable[[Ctx], None]:
        """Send the bad lines; one with id 900 that ``answers`` must get an error answer (not
        silence); then the host must still be served."""

        def setup(ctx: Ctx) -> None:
            gateway(ctx)
            host = Host(ctx)
            for line in lines:
                host.send(line)
            if answers:
                ctx.state["answer"] = host.answer(900)
            host.request("ping", {})  # still served after them
            host.leave()

        return setup

    def refused(ctx: Ctx, run: Run) -> list[str]:
        answer = ctx.state.get("answer", {})
        if answer.get("result", {}).get("isError") or "error" in answer:
            return []
        return [f"answered as a success: {printable_bytes(json.dumps(answer).encode())}"]

    for name, lines, answers, short in BAD_REQUESTS:
        cases.append(
            Case(
                "hosts",
                name,
                ["proposals", "--all"],
                ok=(0,),
                setup=bad_then_ping(*lines, answers=answers),
                check=effects_are(),
                verify=and_then(refused) if answers else exited_cleanly,
                short=short,
            )
        )

    # -- calls whose arguments are odd: held like any other, withdrawn when the host leaves --

    def held_then_leave(arguments: Any, raw: bytes | None = None) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            gateway(ctx)
            host = Host(ctx)
            if raw is None:
                number = host.call("gate_append_line", arguments)
            else:
                number = 950
                host.send(raw)
            ctx.state["held"] = host.held(number)
            host.leave()

        return setup

    def withdrawn_on_leaving(ctx: Ctx, run: Run) -> list[str]:
        status = proposals(ctx).get(ctx.state.get("held", ""), {}).get("status")
        return [] if status == "withdrawn" else [f"proposal left {status} after its host left"]

    for name, arguments, raw in ODD_ARGUMENTS:
        cases.append(
            Case(
                "hosts",
                f"{name}: held, host leaves",
                lambda ctx: ["approve", ctx.state["held"]],
                setup=held_then_leave(arguments, raw),
                check=effects_are(),
                verify=and_then(withdrawn_on_leaving),
            )
        )

    # -- names: diana's own tools keep their gate; a host's name is only a label ------------

    def call_built_in(tool: str, arguments: dict[str, Any]) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            gateway(ctx)
            host = Host(ctx, name="diana")
            answer = host.answer(host.call(tool, arguments))
            ctx.state["answer"] = answer
            host.leave()

        return setup

    for name, tool, arguments in [
        ("save_fact, which the policy denies", "save_fact", {"content": "host fact"}),
        ("mcp_sampling, diana's internal tool", "mcp_sampling", {"server": "gate", "messages": []}),
        (
            "gate_get_item, the name two of the server's tools clash on",
            "gate_get_item",
            {"key": "k"},
        ),
        ("a tool named like a built-in with a server prefix", "gate_save_fact", {"content": "x"}),
    ]:
        cases.append(
            Case(
                "hosts",
                f"call {name}",
                ["proposals", "--all"],
                ok=(0,),
                setup=call_built_in(tool, arguments),
                check=lambda ctx, run: effects_are()(ctx, run) + no_fact(ctx, run),
                verify=and_then(refused),
                short=False,
            )
        )

    def names_itself(name: str | bytes) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            gateway(ctx)
            host = Host(ctx, name=name)
            ctx.state["held"] = host.held(host.call("gate_append_line", {"line": "named"}))
            host.leave()

        return setup

    def origin_is_a_host(ctx: Ctx, run: Run) -> list[str]:
        origin = str(proposals(ctx).get(ctx.state.get("held", ""), {}).get("origin"))
        plain = re.fullmatch(r"host:[A-Za-z0-9._@+/-]{1,64}", origin)
        return [] if plain else [f"a host's proposal has origin {printable_bytes(origin.encode())}"]

    for name in ["diana", "proposal abc123", "host:claude-code", f"claude{CLEAR}", "x" * 5000]:
        shown_name = printable_bytes(name.encode(), 40)
        cases.append(
            Case(
                "hosts",
                f"clientInfo names itself {shown_name}",
                lambda ctx: ["approve", ctx.state["held"]],
                setup=names_itself(name),
                check=effects_are(),
                verify=and_then(withdrawn_on_leaving, origin_is_a_host),
            )
        )

    # -- retries: after a disconnect, and with arguments changed after the approval ---------

    def disconnect_then_retry(ctx: Ctx) -> None:
        gateway(ctx)
        first = Host(ctx)
        ctx.state["held"] = first.held(first.call("gate_append_line", {"line": "retry"}))
        first.leave()
        again = Host(ctx)
        number = again.call("gate_append_line", {"line": "retry"})
        second = again.held(number)
        if second == ctx.state["held"]:
            raise SetupFailed("the retry waited on the withdrawn proposal")
        ctx.diana("approve", second, want=(0,))
        ctx.state["answer"] = again.answer(number)
        again.leave()

    def answered(text: str) -> Callable[[Ctx, Run], list[str]]:
        def check(ctx: Ctx, run: Run) -> list[str]:
            result = ctx.state.get("answer", {}).get("result", {})
            said = "".join(part.get("text", "") for part in result.get("content", []))
            return [] if said == text and not result.get("isError") else [f"the host got {said!r}"]

        return check

    cases.append(
        Case(
            "hosts",
            "host disconnects mid-wait, then retries and the retry is approved",
            lambda ctx: ["approve", ctx.state["held"]],
            setup=disconnect_then_retry,
            check=effects_are("retry"),
            verify=and_then(withdrawn_on_leaving, answered("appended retry")),
        )
    )

    def stopped_mid_wait(ctx: Ctx) -> None:
        gateway(ctx)
        host = Host(ctx)
        ctx.state["held"] = host.held(host.call("gate_append_line", {"line": "stopped"}))
        host.stop()

    cases.append(
        Case(
            "hosts",
            "diana serve told to stop (SIGTERM) mid-wait",
            lambda ctx: ["approve", ctx.state["held"]],
            setup=stopped_mid_wait,
            check=effects_are(),
            verify=and_then(withdrawn_on_leaving),
        )
    )

    def changed_after_approval(ctx: Ctx) -> None:
        gateway(ctx)
        host = Host(ctx)
        number = host.call("gate_append_line", {"line": "ok1"})
        ctx.diana("approve", host.held(number), want=(0,))
        ctx.state["answer"] = host.answer(number)
        # One byte changed: a call of its own, held again, never run by the first approval.
        ctx.state["held"] = host.held(host.call("gate_append_line", {"line": "ok2"}))
        host.leave()

    cases.append(
        Case(
            "hosts",
            "retry with arguments changed by one byte after the approval",
            lambda ctx: ["approve", ctx.state["held"]],
            setup=changed_after_approval,
            check=effects_are("ok1"),
            verify=and_then(withdrawn_on_leaving, answered("appended ok1")),
        )
    )

    # -- a thousand calls at once from one host: each answered, run once or withdrawn -------

    def thousand_at_once(decide: int) -> Callable[[Ctx], None]:
        """500 calls the gate holds and 500 it allows, sent in one write; every allowed one
        answered; ``decide`` of the held ones approved (each answered once it ran); the host
        still served (ping); then it leaves, taking the rest back."""

        def setup(ctx: Ctx) -> None:
            servers = {"gate": gate(ctx), "free": gate(ctx)}
            base(ctx, servers=servers, policy={"tools": {}, "servers": {"free": "allow"}})
            host = Host(ctx)
            host.request("tools/list", {})  # every server connected before the flood
            held, free = range(1000, 1500), range(2000, 2500)
            lines = []
            for number in [n for pair in zip(held, free, strict=True) for n in pair]:
                tool, line = (
                    ("gate_append_line", f"held {number}")
                    if number in held
                    else ("free_append_line", f"free {number}")
                )
                params = {"name": tool, "arguments": {"line": line}}
                params["_meta"] = {"progressToken": number}
                lines.append(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}
                    )
                )
            host.send("\n".join(lines).encode())

            def all_of(numbers: range, count: int, seen: set[int]) -> Callable[[Any], bool]:
                """Until ``count`` of the calls numbered ``numbers`` were answered."""

                def until(message: dict[str, Any]) -> bool:
                    if message.get("id") in numbers and "method" not in message:
                        seen.add(message["id"])
                    return len(seen) == count

                return until

            answered: set[int] = set()
            host.read(all_of(free, 500, answered), 120)
            pending: list[str] = []
            deadline = time.monotonic() + TIMEOUT
            while len(pending) < 500 and time.monotonic() < deadline:
                with database(ctx) as db:
                    pending = [
                        r[0]
                        for r in db.execute("SELECT id FROM proposals WHERE status = 'pending'")
                    ]
                time.sleep(0.2)
            if len(pending) < 500:
                raise SetupFailed(f"{len(pending)} of 500 held calls became proposals")
            for proposal in pending[:decide]:
                ctx.diana("approve", proposal, want=(0,))
            ran: set[int] = set()
            if decide:
                host.read(all_of(held, decide, ran), TIMEOUT)
            ctx.state["answers"] = len(answered) + len(ran)
            host.request("ping", {}, within=TIMEOUT)  # still served after the flood
            ctx.state["peak_kb"] = peak_kb(host.process.pid)
            ctx.state["decided"] = decide
            host.leave()

        return setup

    def each_ran_once(ctx: Ctx, run: Run) -> list[str]:
        done = effects(ctx)
        free = [line for line in done if line.startswith("free ")]
        held = [line for line in done if line.startswith("held ")]
        found = []
        if sorted(free) != sorted(f"free {n}" for n in range(2000, 2500)):
            found.append(f"{len(free)} allowed calls ran ({len(set(free))} distinct), not 500")
        if len(held) != ctx.state.get("decided", 0) or len(set(held)) != len(held):
            found.append(f"{len(held)} held calls ran, not the {ctx.state.get('decided')} approved")
        return found

    def thousand_kept(ctx: Ctx, run: Run) -> list[str]:
        broken = []
        statuses = [row["status"] for row in proposals(ctx).values()]
        decided = ctx.state.get("decided", 0)
        if statuses.count("withdrawn") != 500 - decided:
            left = {s: statuses.count(s) for s in set(statuses)}
            broken.append(f"proposals after the host left: {left}")
        peak = ctx.state.get("peak_kb", 0)
        if not 0 < peak < 1024 * 1024:
            broken.append(f"diana serve held {peak // 1024} MiB at its peak (1 GiB at most)")
        return broken

    for decide, short in [(0, False), (3, False)]:
        cases.append(
            Case(
                "hosts",
                f"1,000 calls at once (half held, half allowed), {decide} approved, host leaves",
                ["proposals", "--all"],
                ok=(0,),
                setup=thousand_at_once(decide),
                check=each_ran_once,
                verify=and_then(thousand_kept),
                short=short,
            )
        )

    def endless_line(size: int) -> Callable[[Ctx], None]:
        """A line of ``size`` bytes written 1 MiB at a time, then its newline: diana serve must
        not hold it whole, and must serve the host on."""

        def setup(ctx: Ctx) -> None:
            gateway(ctx)
            host = Host(ctx)
            host.request("ping", {})
            assert host.process.stdin is not None
            chunk = b'{"jsonrpc": "2.0", "id": 900, "method": "ping", "x": "' + b"y" * (1 << 20)
            sent = 0
            try:
                while sent < size:
                    host.process.stdin.write(chunk[: size - sent])
                    sent += len(chunk)
                host.process.stdin.write(b"\n")
                host.process.stdin.flush()
            except BrokenPipeError:
                raise SetupFailed("diana serve stopped reading its stdin") from None
            ctx.state["answer"] = host.answer(900)
            ctx.state["peak_kb"] = peak_kb(host.process.pid)
            host.request("ping", {})  # still served after it
            host.leave()

        return setup

    def line_bounded(ctx: Ctx, run: Run) -> list[str]:
        peak = ctx.state.get("peak_kb", 0)
        return (
            [f"diana serve held {peak // 1024} MiB reading one line"] if peak > 400 * 1024 else []
        )

    cases.append(
        Case(
            "hosts",
            "a 1 GiB line on stdin",
            ["proposals", "--all"],
            ok=(0,),
            setup=endless_line(1 << 30),
            check=effects_are(),
            verify=and_then(refused, line_bounded),
        )
    )

    # -- names that collide with diana's built-ins: the built-in keeps its name and gate ----

    def colliding_server(server: str, tool: str) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            prefix = python_server(
                str(FIXTURES / "prefix_server.py"),
                "--tool",
                tool,
                "--label",
                server,
                "--side-effects",
                str(ctx.effects),
                "--read-only",
                timeout=30,
            )
            base(
                ctx,
                servers={"gate": gate(ctx), server: prefix},
                policy={"tools": {"save_fact": "deny"}, "servers": {server: "allow"}},
            )
            host = Host(ctx)
            listed = host.request("tools/list", {})
            names = [t.get("name") for t in listed.get("result", {}).get("tools", [])]
            ctx.state["listed"] = names
            ctx.state["answer"] = host.answer(host.call("save_fact", {"content": "host fact"}))
            host.leave()

        return setup

    def listed_once(ctx: Ctx, run: Run) -> list[str]:
        names = ctx.state.get("listed", [])
        twice = sorted({n for n in names if names.count(n) > 1})
        return [f"tools listed twice to the host: {twice}"] if twice else []

    for server, tool in [("save", "fact"), ("gate", "save_fact"), ("x", "save_fact")]:
        cases.append(
            Case(
                "hosts",
                f"server {server} offers {tool}, exposed near the built-in save_fact",
                ["proposals", "--all"],
                ok=(0,),
                setup=colliding_server(server, tool),
                check=lambda ctx, run: effects_are()(ctx, run) + no_fact(ctx, run),
                verify=and_then(refused, listed_once),
            )
        )

    # -- an upstream server that floods a host's call with elicitations ---------------------

    def flooded(count: int, capabilities: dict[str, Any]) -> Callable[[Ctx], None]:
        def setup(ctx: Ctx) -> None:
            flood = python_server(str(FIXTURES / "flood_server.py"), timeout=30)
            base(ctx, servers={"flood": flood}, policy={"tools": {}, "servers": {"flood": "allow"}})
            host = Host(ctx, capabilities=capabilities)
            number = host.call("flood_ask_many", {"count": count})
            asked: list[int] = []

            def ended(message: dict[str, Any]) -> bool:
                if message.get("method") == "elicitation/create":  # the host declines each
                    asked.append(1)
                    host.send(
                        {"jsonrpc": "2.0", "id": message["id"], "result": {"action": "decline"}}
                    )
                return message.get("id") == number and "method" not in message

            ctx.state["answer"] = host.read(ended, 60)
            ctx.state["asked_host"] = len(asked)
            host.request("ping", {}, within=10)  # still served after the flood
            host.leave()

        return setup

    def flood_ended_clearly(ctx: Ctx, run: Run) -> list[str]:
        answer = ctx.state.get("answer", {})
        result = answer.get("result", {})
        said = "".join(part.get("text", "") for part in result.get("content", []))
        broken = []
        if not said and "error" not in answer:
            broken.append(
                f"the call ended with nothing said: {printable_bytes(json.dumps(answer).encode())}"
            )
        if ctx.state.get("asked_host", 0) > 20:
            broken.append(f"{ctx.state['asked_host']} elicitations passed on to the host")
        return broken

    takes: list[tuple[str, dict[str, Any], bool]] = [
        ("a host that takes no elicitation", {}, False),
        ("a host that takes elicitation", {"elicitation": {"form": {}}}, False),
    ]
    for name, capabilities, short in takes:
        cases.append(
            Case(
                "hosts",
                f"upstream floods a call with 200 elicitations, {name}",
                ["proposals", "--all"],
                ok=(0,),
                setup=flooded(200, capabilities),
                check=effects_are(),
                verify=and_then(flood_ended_clearly),
                short=short,
            )
        )
    return cases
