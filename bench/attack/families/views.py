"""The attack bench's family of `views_cases()`."""

from __future__ import annotations

import fcntl
import json
import subprocess
import termios
from collections.abc import Callable

from ..cases import Case, Ctx, Run, SetupFailed
from ..configs import base

F3_KEY, F4_KEY, DELETE_KEY, QUIT_KEY = "\x1bOR", "\x1bOS", "\x1b[3~", "\x11"


def app_typed(*keys: str) -> Callable[[Ctx], object]:
    """The real diana-tui on a terminal of 80x24 with a deny rule for save_fact: ``keys``
    typed one at a time, each once the screen is still, then Ctrl+Q. The case's command
    then reads the policy the app left."""

    def setup(ctx: Ctx) -> None:
        import struct

        from terminal import Terminal, diana_command

        base(ctx)  # policy.json: save_fact denied
        app = Terminal(diana_command(ctx.config, ctx.data), env=ctx.environment())
        ctx.cleanups.append(app.close)
        fcntl.ioctl(app.master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        try:
            app.wait_for("Ollama", 0, within=60)  # the chat's title, once the core is open
        except TimeoutError as exc:
            raise SetupFailed(f"diana-tui did not start: {exc}") from None
        for key in (*keys, QUIT_KEY):
            app.settle(quiet=0.5)
            app.write(key)
        try:
            app.process.wait(30)
        except subprocess.TimeoutExpired:
            raise SetupFailed("diana-tui did not quit on Ctrl+Q within 30 s") from None

    return setup


def deny_kept(ctx: Ctx, run: Run) -> list[str]:
    rules = json.loads((ctx.config / "policy.json").read_text()).get("tools", {})
    if rules.get("save_fact") != "deny":
        return ["the deny rule for save_fact was removed without a y"]
    return []


def deny_removed(ctx: Ctx, run: Run) -> list[str]:
    rules = json.loads((ctx.config / "policy.json").read_text()).get("tools", {})
    return ["y did not remove the rule"] if "save_fact" in rules else []


def views_cases() -> list[Case]:
    """Keys typed in the app's policy view: a rule goes only after a y, and F4 leaves the
    view rather than sending its keys to a pane it hides."""
    typed = [
        ("d on a deny rule, no answer", (F3_KEY, "p", "d"), deny_kept, False),
        ("Delete on a deny rule, no answer", (F3_KEY, "p", DELETE_KEY), deny_kept, False),
        ("d then n", (F3_KEY, "p", "d", "n"), deny_kept, False),
        ("d then Esc", (F3_KEY, "p", "d", "\x1b"), deny_kept, False),
        ("F4 over the policy view, then d", (F3_KEY, "p", F4_KEY, "d"), deny_kept, True),
        ("d then y", (F3_KEY, "p", "d", "y"), deny_removed, False),
    ]
    return [
        Case(
            "app views",
            f"{what}: policy",
            ["policy", "--json"],
            ok=(0,),
            setup=app_typed(*keys),
            verify=verify,
            quiet_ok=True,
            short=short,
        )
        for what, keys, verify, short in typed
    ]
