"""The attack bench's family of `images_cases()`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..cases import ALLOW_ALL, CLEAR, ROOT, TITLE, Case, Ctx, Run
from ..configs import base


def images_cases() -> list[Case]:
    """`diana ask --image PATH`: files that are no picture (a PNG name on text, empty, a name
    with escapes), too large, a FIFO (never waited on), links to /dev/zero or in a loop, a
    directory, too many pictures; names that look like options, hold `..` or are not UTF-8
    (read as files); a picture for a model that does not take images (nothing sent)."""
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.fake_ollama import VISION_MODEL, FakeOllama

    fake = FakeOllama([{"content": "A cat."}] * 40, models=["attack", VISION_MODEL]).start()
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64

    def files(model: str = VISION_MODEL) -> Callable[[Ctx], object]:
        def setup(ctx: Ctx) -> None:
            base(ctx, policy=ALLOW_ALL, llm={"host": fake.url, "model": model, "gap_check": False})
            (ctx.dir / "cat.png").write_bytes(png)
            (ctx.dir / "--help").write_bytes(png)
            (ctx.dir / "sub").mkdir()
            (ctx.dir / "notes.png").write_text("not a picture\n")
            (ctx.dir / "empty.png").write_bytes(b"")
            (ctx.dir / f"{TITLE}x{CLEAR}.png").write_text("not a picture\n")
            with (ctx.dir / "huge.png").open("wb") as out:  # sparse: nothing to read
                out.write(png)
                out.truncate((20 << 20) + 1)
            os.mkfifo(ctx.dir / "pipe.png")
            (ctx.dir / "zero.png").symlink_to("/dev/zero")
            (ctx.dir / "loop.png").symlink_to(ctx.dir / "loop.png")
            with open(bytes(ctx.dir) + b"/caf\xe9.png", "wb") as out:
                out.write(png)

        return setup

    def asked(prompt: str, wanted: bool) -> Callable[[Ctx, Run], list[str]]:
        def verify(_ctx: Ctx, _run: Run) -> list[str]:
            sent = any(
                (r.get("messages") or [{}])[-1].get("content") == prompt for r in fake.requests
            )
            if sent == wanted:
                return []
            return [f"{prompt!r} {'was not' if wanted else 'was'} sent to the model"]

        return verify

    def image(name: str | bytes) -> Callable[[Ctx], list[str | bytes]]:
        def args(ctx: Ctx) -> list[str | bytes]:
            path = bytes(ctx.dir) + b"/" + name if isinstance(name, bytes) else f"{ctx.dir}/{name}"
            return ["ask", prompt_of[name], "--image", path]

        return args

    refused = {
        "notes.png": "text with a PNG name",
        "empty.png": "an empty file",
        f"{TITLE}x{CLEAR}.png": "not a picture, its name with escapes",
        "huge.png": "a 20 MiB + 1 byte file",
        "pipe.png": "a FIFO",
        "zero.png": "a symlink to /dev/zero",
        "loop.png": "a symlink loop",
        "sub": "a directory",
        "missing.png": "a file that is not there",
    }
    accepted: dict[str | bytes, str] = {
        "--help": "a picture named --help",
        "sub/../cat.png": "a path through ..",
        b"caf\xe9.png": "a picture whose name is not UTF-8",
    }
    prompt_of: dict[str | bytes, str] = {
        name: f"look at picture {n}" for n, name in enumerate([*refused, *accepted])
    }
    cases: list[Case] = []
    for name, what in refused.items():
        cases.append(
            Case(
                "images",
                f"ask --image {what}",
                image(name),
                setup=files(),
                verify=asked(prompt_of[name], False),
                max_lines=1,
                short=name == "huge.png",
            )
        )
    for name, what in accepted.items():
        cases.append(
            Case(
                "images",
                f"ask --image {what}",
                image(name),
                ok=(0,),
                setup=files(),
                verify=asked(prompt_of[name], True),
                # The picture's line, and that the model answers without tools.
                prefixes=("diana:", "📷 ", "… "),
            )
        )
    cases += [
        Case(
            "images",
            "ask --image=--help (an option-looking name that is not there)",
            ["ask", "look at --help", "--image=--help"],
            setup=files(),
            verify=asked("look at --help", False),
            max_lines=1,
        ),
        Case(
            "images",
            "ask --image with a model that does not take images",
            lambda ctx: ["ask", "look, no vision", "--image", f"{ctx.dir}/cat.png"],
            setup=files("attack"),
            verify=asked("look, no vision", False),
            max_lines=1,
        ),
        Case(
            "images",
            "ask with 9 pictures",
            lambda ctx: ["ask", "look at nine", *["--image", f"{ctx.dir}/cat.png"] * 9],
            setup=files(),
            verify=asked("look at nine", False),
            max_lines=1,
        ),
    ]
    return cases
