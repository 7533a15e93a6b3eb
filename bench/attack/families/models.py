"""The attack bench's family of `models_cases()`."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from ..cases import ALLOW_ALL, CLEAR, ROOT, TITLE, Case, Ctx, Run
from ..configs import base


def models_cases(ollama: dict[str, str]) -> list[Case]:
    """`diana models` against Ollamas that fail: unreachable, answering garbage or escapes,
    not knowing the model, cut off mid-pull, interrupted mid-pull; removal without a yes."""
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.fake_ollama import FakeOllama

    known = FakeOllama(models=["attack", "kept:1b"], pullable={"smollm2:135m": 4000}).start()
    cut = FakeOllama(pullable={f"cut{i}:1b": 4000 for i in range(4)}).start()
    stalled = FakeOllama(pullable={f"stall{i}:1b": 4000 for i in range(4)}).start()
    stalled.pull_stall_after = 1

    def at(host: str, fake: FakeOllama | None = None) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx, policy=ALLOW_ALL, llm={"host": host})
            if fake is cut:
                cut.pull_drop_after = 1  # every pull here is cut off after its first step

        return setup

    def still_installed(name: str) -> Callable[[Ctx, Run], list[str]]:
        def verify(_ctx: Ctx, _run: Run) -> list[str]:
            return [] if name in known.models else [f"{name} was removed without a yes"]

        return verify

    def pulled(fake: FakeOllama, name: str) -> Callable[[Ctx], bool]:
        return lambda _ctx: name in fake.pulls

    cases: list[Case] = []
    for what, host in (
        ("a silent listener", ollama["silent"]),
        ("a server answering garbage", ollama["garbage"]),
        ("a server answering an error with escapes", ollama["escapes"]),
    ):
        for command in (["models"], ["models", "show", "attack"], ["models", "pull", "x:1b"]):
            cases.append(
                Case(
                    "models",
                    f"{' '.join(command)} with Ollama at {what}",
                    command,
                    expect=(1, 2),
                    setup=at(host),
                    max_lines=1,
                )
            )
    for what, command in (
        ("show an unknown model", ["models", "show", "nosuch:1b"]),
        ("pull an unknown model", ["models", "pull", "nosuch:1b"]),
        ("pull a name with escapes", ["models", "pull", f"{TITLE}x{CLEAR}"]),
        ("pull an empty name", ["models", "pull", ""]),
        ("pull a name with spaces", ["models", "pull", "a b"]),
        ("pull a 100 kB name", ["models", "pull", "x" * 100_000]),
        ("rm an unknown model --yes", ["models", "rm", "nosuch:1b", "--yes"]),
        ("show a non-UTF-8 name", ["models", "show", b"\xff\xfe"]),
    ):
        cases.append(
            Case(
                "models",
                what,
                command,
                setup=at(known.url),
                max_lines=1,
            )
        )
    cases.append(
        Case(
            "models",
            "rm without --yes and no terminal",
            ["models", "rm", "kept:1b"],
            setup=at(known.url),
            verify=still_installed("kept:1b"),
            max_lines=1,
        )
    )
    for i in range(2):
        cases.append(
            Case(
                "models",
                f"pull cut off mid-way ({i + 1})",
                ["models", "pull", f"cut{i}:1b"],
                expect=(1,),
                setup=at(cut.url, cut),
                max_lines=1,
                serial=True,
            )
        )
        cases.append(
            Case(
                "models",
                f"SIGINT during a pull ({i + 1})",
                ["models", "pull", f"stall{i}:1b"],
                expect=(130,),
                setup=at(stalled.url),
                signals=[(pulled(stalled, f"stall{i}:1b"), signal.SIGINT)],
                max_lines=2,
                serial=True,
                short=i == 0,
            )
        )
    return cases
