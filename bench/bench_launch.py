"""Launch: from starting the program to its first paint, and to its chat input taking keys,
for diana-tui and for oterm (https://github.com/ggozad/oterm), measured from outside each
program on a 160x48 pseudo-terminal.

- first paint: the first visible character the program writes to the terminal.
- input ready: a key typed again and again (every 20 ms) from the start, until the program
  draws it in its chat input.

Run from the repository root:  .venv/bin/python bench/bench_launch.py
oterm is looked for in OTERM (default /tmp/oterm-venv/bin/oterm; install it with
`python3 -m venv /tmp/oterm-venv && /tmp/oterm-venv/bin/pip install oterm`); without it,
diana-tui is measured alone. Both talk to the project's fake Ollama (real HTTP) in its own
process. oterm is given one saved chat (so it opens on a chat input, as diana-tui does) and
its splash screen is off (an animation it shows on purpose). Runs alternate between the two
programs, after one warm-up run of each that is not counted (Python's bytecode caches
written, files in the page cache); the ratios are of figures from this run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_chat import fake_ollama
from terminal import Terminal, app_dirs, diana_command

RUNS = 5
OTERM = Path(os.environ.get("OTERM", "/tmp/oterm-venv/bin/oterm"))
MODEL = "qwen3:30b-a3b"
SAVE_CHAT = f"""
import asyncio
from oterm.store.store import Store
from oterm.types import ChatModel

async def main():
    store = await Store.get_store()
    await store.save_chat(ChatModel(name="bench", model="{MODEL}"))

asyncio.run(main())
"""


def oterm_env(tmp: Path, url: str) -> dict[str, str]:
    """oterm's data dir with one chat saved and no splash screen; its environment."""
    data = tmp / "oterm"
    data.mkdir()
    (data / "config.json").write_text(json.dumps({"theme": "textual-dark", "splash-screen": False}))
    env = {"OTERM_DATA_DIR": str(data), "OLLAMA_URL": url}
    python = OTERM.parent / "python"
    subprocess.run([str(python), "-c", SAVE_CHAT], env={**os.environ, **env}, check=True)
    return env


def launch(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Seconds to the first paint and to the input taking keys."""
    terminal = Terminal(argv, env)
    try:
        return terminal.first_paint(), terminal.input_ready()
    finally:
        terminal.close()


Figures = dict[str, list[tuple[float, float]]]  # program: (first paint, input ready) per run


def launches(diana: list[str], oterm: dict[str, str] | None) -> Figures:
    """Alternating runs, after one uncounted run of each."""
    programs = {"diana-tui": lambda: launch(diana)}
    if oterm is not None:
        programs["oterm"] = lambda: launch([str(OTERM)], oterm)
    for run in programs.values():
        run()
    figures: Figures = {name: [] for name in programs}
    for _ in range(RUNS):
        for name, run in programs.items():
            figures[name].append(run())
    return figures


async def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        async with fake_ollama(tmp, []) as url:
            diana = diana_command(*app_dirs(tmp, {"host": url}))
            oterm = oterm_env(tmp, url) if OTERM.is_file() else None  # noqa: ASYNC240
            figures = await asyncio.to_thread(launches, diana, oterm)
    medians = {
        name: (statistics.median(p for p, _ in runs), statistics.median(r for _, r in runs))
        for name, runs in figures.items()
    }
    for name, (paint, ready) in medians.items():
        spread = ", ".join(f"{r:.2f}" for _, r in figures[name])
        print(
            f"{name}: first paint {paint:.2f} s, input ready {ready:.2f} s "
            f"(median of {RUNS}; input ready each run: {spread} s)"
        )
    if "oterm" not in medians:
        print(f"oterm not measured: {OTERM} not found")
        return
    (diana_paint, diana_ready), (oterm_paint, oterm_ready) = medians["diana-tui"], medians["oterm"]
    print(
        f"oterm / diana-tui: first paint {oterm_paint / diana_paint:.2f}x, "
        f"input ready {oterm_ready / diana_ready:.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
