"""Conversations at scale: 1,000 conversations of 50 messages each (50,000 messages) in a data
dir; opening one and drawing it in the app, and a search over every message; side by side
with oterm (PyPI `oterm`) where it has the same action: starting with that many chats, and
switching from one chat to another.

Run from the repository root:  .venv/bin/python bench/bench_chats.py [--oterm PYTHON]
[--only switch|search] (one of diana's figures alone: start-up comes with switching)
PYTHON: the interpreter of a throwaway venv with oterm installed (never the project's own),
e.g. `python3 -m venv /tmp/oterm-venv && /tmp/oterm-venv/bin/pip install oterm`; without it,
oterm's column is left out. Every figure is measured in this run: both apps get the same
conversations (diana's written through its own database and schema in one transaction,
oterm's through its own store's schema), run headless in processes of their own at the same
terminal size, alternating, against the project's fake Ollama on 127.0.0.1 (oterm's check
for a newer version on PyPI is switched off: nothing reaches the internet).

- start-up: from starting the process until the app shows its conversation (diana: the one
  last open, drawn; oterm: every chat's tab added, the first one drawn);
- switching: from asking for another conversation (diana: the Conversations view's Enter,
  i.e. the conversation opened from the database and its transcript drawn; oterm: its next
  tab made active) until the frames the app would write to a terminal show it, timed the same
  way in both (FRAMES): the first frame showing any of its messages, and the first showing
  its last message, where both apps leave the view. (oterm's frames show the top of the
  conversation first and scroll to its end later; diana's first frame shows the end.)
- search (diana only; oterm has none): `diana chats --search`'s query over all 50,000
  messages, FTS5, for the newest matches it lists (50 unless --limit says).
Goals: opening one <= 150 ms, a search <= 50 ms, and ours <= 0.5x oterm's time. oterm builds
every chat's tab (and its model agent) at start; one that has not started within OTERM_CAP
seconds is stopped and said so, and its switching is then measured with a store of the first
OTERM_SMALL chats, in runs alternating with diana's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHATS = 1000
MESSAGES = 50
RUNS = 3  # processes of each app, alternating (after one uncounted run of each)
OTERM_CAP = 240.0  # seconds oterm is given to start; past it, it is stopped and said so
OTERM_SMALL = 40  # chats of a second oterm store, for its switching if 1,000 never start
SWITCHES = 8  # conversations switched to in each process
SEARCH_RUNS = 20
SIZE = (120, 35)
SEARCHES = ("windowsill", "kettle descaling", "quantum fie")
WORDS = (
    "the a of to and in is it for on with as this that be by are from at or an was can "
    "garden bread kettle river window cat mountain bicycle recipe station library winter "
    "coffee lantern harbour violin pepper orchard compass ladder meadow engine quantum "
    "field theory descaling vinegar sourdough tyre pressure chain gear saddle"
).split()
STARTED = "STARTED"  # what a child prints once it is ready, then its switch times


# -- the conversations, the same for both ------------------------------------------------------


def conversations(seed: int = 7) -> list[tuple[str, list[tuple[str, str]]]]:
    """CHATS conversations (title, [(role, text)] of MESSAGES each), the same every run."""
    pick = random.Random(seed)
    made = []
    for n in range(CHATS):
        messages = []
        for m in range(MESSAGES):
            words = pick.choices(WORDS, k=pick.randint(12, 80))
            if n % 97 == 0 and m == 10:
                words.append("windowsill")  # a rare word, in about 1 conversation in 100
            if m == MESSAGES - 1:
                words.append(marker(n))  # what shows the conversation is on the screen
            messages.append(("user" if m % 2 == 0 else "assistant", " ".join(words) + "."))
        made.append((f"conversation {n}: {messages[0][1][:40]}", messages))
    return made


def marker(n: int) -> str:
    """The last word of conversation ``n``'s last message, in no other conversation."""
    return f"farewell{n}"


# -- the frames: the same watch in both apps' processes ----------------------------------------

# Each frame Textual would write to a terminal, made into what its driver sends (headless, the
# driver writes nothing), and the time of the first one that shows the conversation's marker:
# its last message, where both apps leave the view. Both apps run Textual; this is the same
# code in each, so a switch is timed from the same start to the same end in both.
FRAMES = r"""
import time as _time
from textual.app import App as _App
from textual._compositor import CompositorUpdate as _Update

class Frames:
    marker = None  # the text the next frame to time must show: the last message's last word
    starts = ()  # the first words of each of the conversation's messages
    shown_at = None  # perf_counter() of the first frame that showed the marker
    begun_at = None  # and of the first that showed any of its messages

def _text(update):
    lines = update.chops if hasattr(update, "chops") else update.strips
    return "\\n".join(
        "".join(s.text for s in (l.values() if hasattr(l, "values") else l) if s is not None)
        for l in lines
    )

_display = _App._display

def _watched(self, screen, renderable):
    _display(self, screen, renderable)
    if Frames.marker is None or self._batch_count or not isinstance(renderable, _Update):
        return
    renderable.render_segments(self.console)  # what would be sent to the terminal
    now = _time.perf_counter()
    text = _text(renderable)
    if Frames.begun_at is None and any(start in text for start in Frames.starts):
        Frames.begun_at = now
    if Frames.shown_at is None and Frames.marker in text:
        Frames.shown_at = now
        if Frames.begun_at is None:
            Frames.begun_at = now

_App._display = _watched

def watch(texts):  # the next conversation's messages: what its frames will show
    Frames.marker = texts[-1].split()[-1]
    Frames.starts = tuple(" ".join(text.split()[:4]) for text in texts)

async def shown(begun):  # "A B": ms from begun to the first frame showing any of its
    import asyncio       # messages (A), and to the first showing its last message (B);
    deadline = _time.perf_counter() + 30  # "-" for one not shown within 30 s
    while Frames.shown_at is None and _time.perf_counter() < deadline:
        await asyncio.sleep(0.002)
    ms = lambda at: "-" if at is None else f"{(at - begun) * 1000:.2f}"
    took = f"{ms(Frames.begun_at)} {ms(Frames.shown_at)}"
    Frames.marker, Frames.starts, Frames.shown_at, Frames.begun_at = None, (), None, None
    return took
"""


def seed_diana(config: Path, data: Path) -> list[str]:
    """The conversations written through diana's own database and schema (its triggers keep
    the FTS5 index), in one transaction; their ids, the last written first."""
    import asyncio

    from diana.core.profiles import Profile
    from diana.core.runtime import Runtime

    chats = conversations()

    async def seed() -> list[str]:
        runtime = await Runtime.open(Profile.APP.but(servers="none"), config, data)
        try:

            async def write(connection: Any) -> None:
                for n, (title, messages) in enumerate(chats):
                    at = f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}+00:00"
                    await connection.execute(
                        "INSERT INTO conversations (id, title, model, created_at, updated_at, "
                        "origin, system, options) VALUES (?, ?, ?, ?, ?, 'app', '', '{}')",
                        (f"c{n:05d}", title, "qwen3:30b-a3b", at, at),
                    )
                    await connection.executemany(
                        "INSERT INTO messages (conversation_id, role, kind, content, "
                        "created_at) VALUES (?, ?, 'chat', ?, ?)",
                        [(f"c{n:05d}", role, text, at) for role, text in messages],
                    )

            await runtime.db.write(write)
        finally:
            await runtime.close()
        return [f"c{n:05d}" for n in reversed(range(CHATS))]

    return asyncio.run(seed())


OTERM_SEED = r"""
import asyncio, json, sqlite3, sys
from oterm.store.store import Store

async def main():
    store = await Store.get_store()
    chats = json.load(open(sys.argv[1]))
    db = sqlite3.connect(store.db_path)
    with db:
        for n, (title, messages) in enumerate(chats):
            db.execute("INSERT INTO chat (id, name, model, system, provider, parameters, tools, "
                       "thinking) VALUES (?, ?, 'qwen3:30b-a3b', NULL, 'ollama', '{}', '[]', 0)",
                       (n + 1, title))
            db.executemany("INSERT INTO message (chat_id, author, text, images) "
                           "VALUES (?, ?, ?, '[]')", [(n + 1, r, t) for r, t in messages])
    db.close()

asyncio.run(main())
"""


def seed_oterm(python: str, data: Path, tmp: Path, count: int = CHATS) -> None:
    """The same conversations (the first ``count``) in oterm's store, made by oterm's own
    Store (its schema and version), then written in one transaction."""
    chats = tmp / "chats.json"
    chats.write_text(json.dumps(conversations()[:count]))
    data.mkdir(parents=True, exist_ok=True)
    (data / "config.json").write_text(json.dumps({"splash-screen": False}))
    subprocess.run(
        [python, "-c", OTERM_SEED, str(chats)],
        check=True,
        env=dict(os.environ, OTERM_DATA_DIR=str(data)),
    )


# -- the children: each app started headless, then switched through conversations ----------


def diana_child(config: str, data: str, ids: list[str]) -> None:
    """diana started; ready once the conversation last open is drawn; then each of ``ids``
    opened as the Conversations view's Enter opens it, timed until it is drawn."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from diana.tui.app import make_app
    from diana.tui.panes.chat import ChatPane

    from tests.waits import started, work_done

    frames: dict[str, Any] = {}
    exec(FRAMES, frames)  # the frame watch both children run
    watch, shown = frames["watch"], frames["shown"]
    texts = {f"c{n:05d}": [text for _, text in chat] for n, (_, chat) in enumerate(conversations())}

    async def run() -> None:
        app = make_app(Path(config), Path(data))
        async with app.run_test(size=SIZE):
            await started(app)
            chat = app.query_one(ChatPane)
            while "Reopened" not in chat.plain_text():  # noqa: ASYNC110 - what is shown
                await asyncio.sleep(0.002)
            app.export_screenshot()
            print(STARTED, flush=True)
            core = app.core
            assert core is not None
            for conversation in ids:
                await work_done(app, "history")  # the last one's earlier messages, untimed
                watch(texts[conversation])
                begun = time.perf_counter()
                messages = await core.chat.open(conversation)
                title = (await core.chats.get(conversation)).title
                await chat.show_conversation(messages, title)
                print(await shown(begun), flush=True)

    asyncio.run(run())


OTERM_CHILD = (
    FRAMES
    + r"""
import asyncio, sys, time
import oterm.app.oterm as oterm_app

async def up_to_date():
    return True, None, None

oterm_app.is_up_to_date = up_to_date  # no request to PyPI
from textual.widgets import TabbedContent
from oterm.app.widgets.chat import ChatContainer, ChatItem

# oterm 0.26.1 (Textual 8.2.8) runs a restored answer's text watcher before the item has
# composed its Markdown, and the app stops on NoMatches: the text is drawn once it has.
draw_text = ChatItem.watch_text

async def watch_text(self, text):
    if self.author != "user" and not self.query(".response"):
        self.call_after_refresh(draw_text, self, text)
        return
    await draw_text(self, text)

ChatItem.watch_text = watch_text

CHATS, SWITCHES, WIDTH, HEIGHT = (int(a) for a in sys.argv[1:5])

def drawn(container):  # every message mounted, every answer's Markdown holding its text
    if not container.loaded:
        return False
    for item in container.query(ChatItem):
        if item.author != "user":
            response = item.query(".response")
            if not response or not response.first().children:
                return False
    return True

async def loaded(pilot, container):
    while not drawn(container):  # (the pilot's pause waits for an idle screen: oterm's never is)
        await asyncio.sleep(0.002)
    pilot.app.export_screenshot()  # the screen composed and drawn, as diana's

async def run():
    app = oterm_app.OTerm()
    async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
        tabs = app.query_one(TabbedContent)
        while tabs.tab_count < CHATS or tabs.active_pane is None:
            await asyncio.sleep(0.002)
        await loaded(pilot, tabs.active_pane.query_one(ChatContainer))
        print("STARTED", flush=True)
        for n in range(SWITCHES):
            pane = f"chat-{CHATS - 1 - n}"  # not loaded yet (the first tab is open)
            container = tabs.get_pane(pane).query_one(ChatContainer)
            # (its messages are in memory since start: read here, nothing is loaded)
            watch([message.text for message in container.messages])
            begun = time.perf_counter()
            tabs.active = pane
            took = await shown(begun)
            await loaded(pilot, container)  # settled before the next, untimed
            print(took, flush=True)

asyncio.run(run())
"""
)


# seconds to start (None: not within the cap); each switch's ms to its first frame and to the
# frame showing its last message (None: not within 30 s)
Run = tuple[float | None, list[tuple[float | None, float | None]]]


def timed(command: list[str], env: dict[str, str], cap: float = 600.0) -> Run:
    """Run a child: seconds from its start until it said STARTED (None if it had not within
    ``cap`` seconds: it is stopped), and its switch times (ms)."""
    import threading

    begun = time.perf_counter()
    errors = tempfile.TemporaryFile("w+")
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=ROOT
    )
    assert child.stdout is not None
    startup = None
    switches: list[tuple[float | None, float | None]] = []

    def stop_unstarted() -> None:
        if startup is None:
            child.kill()

    watchdog = threading.Timer(cap, stop_unstarted)
    watchdog.start()
    try:
        for line in child.stdout:
            if line.strip() == STARTED:
                startup = time.perf_counter() - begun
            elif startup is not None and line.strip():
                first, whole = (None if t == "-" else float(t) for t in line.split())
                switches.append((first, whole))
    finally:
        watchdog.cancel()
    code = child.wait(timeout=600)
    if startup is None and time.perf_counter() - begun >= cap:
        return None, []
    if code != 0 or startup is None:
        errors.seek(0)
        said = errors.read().strip().splitlines()[-15:]
        raise SystemExit(f"bench_chats: {command[0]} failed (exit {code})\n" + "\n".join(said))
    errors.close()
    return startup, switches


# -- search: in this process, through the core -------------------------------------------------


def search_times(config: Path, data: Path) -> dict[str, tuple[float, int]]:
    """The median of SEARCH_RUNS searches for each of SEARCHES (ms), and how many it listed."""
    import asyncio

    from diana.core.api import Core
    from diana.core.profiles import Profile
    from diana.tui.cli.chats import SHOWN

    async def run() -> dict[str, tuple[float, int]]:
        found: dict[str, tuple[float, int]] = {}
        async with await Core.open(Profile.READ, config, data) as core:
            for words in SEARCHES:
                times = []
                for _ in range(SEARCH_RUNS):
                    begun = time.perf_counter()
                    hits = await core.chats.search(words, SHOWN)
                    times.append((time.perf_counter() - begun) * 1000)
                found[words] = (statistics.median(times), len(hits))
        return found

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--oterm", metavar="PYTHON", help="a venv's python with oterm installed")
    parser.add_argument("--only", choices=("switch", "search"), help="one figure of diana's")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only and args.oterm:
        parser.error("--only measures diana alone: leave out --oterm")
    if args.child:
        diana_child(args.child[0], args.child[1], args.child[2].split(","))
        return 0
    sys.path.insert(0, str(ROOT))
    from terminal import app_dirs

    from tests.fixtures.fake_ollama import FakeOllama

    with tempfile.TemporaryDirectory() as name, FakeOllama() as fake:
        tmp = Path(name)
        config, data = app_dirs(tmp / "diana", {"host": fake.url})
        begun = time.perf_counter()
        ids = seed_diana(config, data)
        print(
            f"seeded diana: {CHATS:,} x {MESSAGES} messages in {time.perf_counter() - begun:.1f} s"
        )
        oterm_data = tmp / "oterm"
        if args.oterm:
            begun = time.perf_counter()
            seed_oterm(args.oterm, oterm_data, tmp)
            print(f"seeded oterm: the same in {time.perf_counter() - begun:.1f} s", flush=True)
        searched = search_times(config, data) if args.only != "switch" else {}
        if args.only == "search":
            report(searched, [], [], False)
            return 0
        switch_to = ids[1 : SWITCHES + 1]  # not the one open at start
        env = dict(os.environ, OLLAMA_HOST=fake.url, TEXTUAL_ANIMATIONS="none")
        ours_cmd = [
            sys.executable, __file__, "--child", str(config), str(data), ",".join(switch_to)
        ]  # fmt: skip
        theirs_cmd = [
            str(args.oterm), "-c", OTERM_CHILD, str(CHATS), str(SWITCHES), *map(str, SIZE)
        ]  # fmt: skip
        theirs_env = dict(env, OTERM_DATA_DIR=str(oterm_data), OLLAMA_HOST=fake.url[7:])
        ours: list[Run] = []
        theirs: list[Run] = []
        capped = False  # oterm could not start with every chat within OTERM_CAP
        timed(ours_cmd, env)  # uncounted: bytecode caches written, files in the page cache
        if args.oterm and timed(theirs_cmd, theirs_env, OTERM_CAP)[0] is None:
            # It cannot start within the cap: its switching, then, with a store it can open
            # (the first OTERM_SMALL chats), in runs alternating with diana's as well.
            capped = True
            print(f"oterm did not start within {OTERM_CAP:.0f} s", flush=True)
            small_data = tmp / "oterm-small"
            seed_oterm(args.oterm, small_data, tmp, OTERM_SMALL)
            theirs_cmd[3] = str(OTERM_SMALL)
            theirs_env = dict(theirs_env, OTERM_DATA_DIR=str(small_data))
            timed(theirs_cmd, theirs_env, OTERM_CAP)  # uncounted, as diana's first
        for run in range(RUNS):
            ours.append(timed(ours_cmd, env))
            print(f"run {run + 1}: diana started in {ours[-1][0]:.2f} s", flush=True)
            if args.oterm:
                theirs.append(timed(theirs_cmd, theirs_env, OTERM_CAP))
                said = "did not start" if theirs[-1][0] is None else "started"
                print(f"run {run + 1}: oterm {said} within {OTERM_CAP:.0f} s", flush=True)
    report(searched, ours, theirs, capped)
    return 0


def report(
    searched: dict[str, tuple[float, int]], ours: list[Run], theirs: list[Run], capped: bool
) -> None:
    def startup(runs: list[Run]) -> float | None:
        started = [run[0] for run in runs if run[0] is not None]
        return statistics.median(started) * 1000 if started else None

    def switch(runs: list[Run], which: int) -> float | None:  # of those shown within 30 s
        times = [t[which] for run in runs for t in run[1] if t[which] is not None]
        return statistics.median(times) if times else None

    def missed(runs: list[Run]) -> str:
        switches = [t for run in runs for t in run[1]]
        unshown = sum(1 for t in switches if t[1] is None)
        return f"{unshown} of {len(switches)}"

    def ms(value: float | None, missing: str) -> str:
        return missing if value is None else f"{value:.0f} ms"

    print(f"\n{CHATS:,} conversations x {MESSAGES} messages, {SIZE[0]}x{SIZE[1]}, medians")
    print(f"{'action':<44}{'diana':>10}{'oterm':>12}{'ratio':>8}  goal")
    rows = [
        (
            "start-up until the conversation is drawn",
            startup(ours),
            None if capped else startup(theirs),
            f"> {OTERM_CAP:.0f} s" if capped else "-",
        ),
        ("switching: the first frame of the other one", switch(ours, 0), switch(theirs, 0), "-"),
        ("switching: drawn to its last message", switch(ours, 1), switch(theirs, 1), "-"),
    ]
    for name, mine, other, missing in rows if ours else []:  # (none with --only search)
        ratio = f"{mine / other:.2f}x" if mine and other else "-"
        goal = "<= 150 ms; <= 0.5x oterm" if name.startswith("switching") else "<= 0.5x oterm"
        print(f"{name:<44}{ms(mine, '-'):>10}{ms(other, missing):>12}{ratio:>8}  {goal}")
    for words, (took, hits) in searched.items():
        name = f"search {words!r} ({hits} listed)"
        print(f"{name:<44}{took:>7.1f} ms{'-':>12}{'-':>8}  <= 50 ms (oterm has no search)")
    for name, runs in (("diana", ours), ("oterm", theirs)):
        if runs and any(t[1] is None for run in runs for t in run[1]):
            print(
                f"{name}'s view did not reach the conversation's last message within 30 s in "
                f"{missed(runs)} switches (the medians are of those that did)"
            )
    if capped:
        print(
            f"oterm did not start with {CHATS:,} chats within {OTERM_CAP:.0f} s: its switching "
            f"is measured with a store of {OTERM_SMALL} of the same chats, in runs alternating "
            "with diana's"
        )


if __name__ == "__main__":
    raise SystemExit(main())
