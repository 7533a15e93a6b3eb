"""The Conversations view and the chat's /chats, /system and /set, driven with Pilot over
the real app, its database and a fake Ollama over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from diana.tui.app import DianaApp
from diana.tui.modals.chats import ChatsScreen
from diana.tui.modals.dialogs import ConfirmDialog
from diana.tui.panes import ChatPane
from textual.pilot import Pilot
from textual.widgets import Static

from .chat_turns import chat_requests
from .fixtures.fake_ollama import FakeOllama
from .scenarios import app_of, ask, build_app, settle, tables_fitted, type_command, until
from .waits import work_done


async def chats_view(pilot: Pilot[int], key: str = "ctrl+o") -> ChatsScreen:
    app = app_of(pilot)
    await pilot.press("f2", key)
    await until(lambda: isinstance(app.screen, ChatsScreen) and app.screen.loaded.is_set())
    screen = app.screen
    assert isinstance(screen, ChatsScreen)
    await tables_fitted(pilot)
    return screen


def titles(screen: ChatsScreen) -> list[str]:
    table = screen.table
    return [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]


def transcript_text(app: DianaApp) -> str:
    return " ".join(app.query_one(ChatPane).plain_text().split())


async def searched(pilot: Pilot[int], screen: ChatsScreen, text: str) -> None:
    screen.loaded.clear()
    await pilot.press(*text)
    await until(lambda: screen.searched == text.strip() and screen.loaded.is_set())
    await work_done(app_of(pilot), "chats")


async def test_search_as_you_type_then_enter_opens_it_in_the_chat(
    fake: FakeOllama, tmp_path: Path
) -> None:
    fake.add({"content": "Knead it for ten minutes."}, {"content": "Pump the tyres."})
    fake.add({"content": "Then bake at 230 °C."})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await ask(pilot, "how do I make bread?")
        runtime = app.core._runtime
        assert runtime is not None
        bread = runtime.chat.conversation_id
        await type_command(pilot, "/clear")
        await ask(pilot, "my bicycle wobbles")
        screen = await chats_view(pilot)
        assert titles(screen) == ["my bicycle wobbles", "how do I make bread?"]
        assert str(screen.table.get_row_at(0)[0]) == "▶"  # open in the chat
        await searched(pilot, screen, "knea")  # the answer's words, as typed so far
        assert titles(screen) == ["how do I make bread?"]
        await pilot.press("enter")
        await until(lambda: not isinstance(app.screen, ChatsScreen))
        assert runtime.chat.conversation_id == bread
        shown = transcript_text(app)
        assert "Reopened “how do I make bread?” (2 messages)" in shown
        assert "Knead it for ten minutes." in shown and "bicycle" not in shown
        await ask(pilot, "and then?")  # goes on with it
        last = chat_requests(fake)[-1]
        assert [m["content"] for m in last["messages"][1:]] == [
            "how do I make bread?",
            "Knead it for ten minutes.",
            "and then?",
        ]


async def test_rename_delete_after_yes_and_export(fake: FakeOllama, tmp_path: Path) -> None:
    fake.add({"content": "One."}, {"content": "Two."})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await ask(pilot, "first question")
        await type_command(pilot, "/clear")
        await ask(pilot, "second question")
        runtime = app.core._runtime
        assert runtime is not None
        screen = await chats_view(pilot)
        await pilot.press("down")  # to the list: its keys
        await pilot.press("r", "ctrl+u", *"Renamed", "enter")
        await work_done(app, "chats-change", "chats")
        await until(lambda: titles(screen)[0] == "Renamed")
        last = screen.query_one("#chats-last", Static)
        assert str(last.render()) == "✓ renamed: Renamed"

        target = tmp_path / "out.json"
        await pilot.press("e", "ctrl+u", *str(target), "enter")
        await work_done(app, "chats-change")
        assert json.loads(target.read_text())["title"] == "Renamed"
        link = tmp_path / "link.md"
        link.symlink_to(target)
        await pilot.press("e", "ctrl+u", *str(link), "enter")
        await work_done(app, "chats-change")
        assert str(last.render()) == f"✗ {link} is a symbolic link; name the file itself"

        await pilot.press("d")
        await until(lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("n")  # kept
        await until(lambda: app.screen is screen)
        assert titles(screen) == ["Renamed", "first question"]
        await pilot.press("d")
        await until(lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await work_done(app, "chats-change", "chats")
        await until(lambda: titles(screen) == ["first question"])
        assert runtime.chat.conversation_id is None  # the open one went: a new one starts
        assert [c.title for c in await runtime.chats.recent()] == ["first question"]
        await pilot.press("escape")
        assert "That conversation was deleted; this is a new one." in transcript_text(app)
        await ask(pilot, "third question")  # fake: no reply left, the turn fails; kept
        third = runtime.chat.conversation_id
        screen = await chats_view(pilot)
        await pilot.press("down", "n")  # a new one: the chat is emptied, nothing is deleted
        await until(lambda: not isinstance(app.screen, ChatsScreen))
        assert runtime.chat.conversation_id is None
        assert transcript_text(app) == "New conversation."
        assert third in [c.id for c in await runtime.chats.recent()]


async def test_system_and_set_are_shown_validated_and_sent(
    fake: FakeOllama, tmp_path: Path
) -> None:
    fake.add({"content": "Bonjour."})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, "/system Answer in French.")
        await type_command(pilot, "/set temperature 0.2")
        await type_command(pilot, "/set temperature warm")
        await type_command(pilot, "/set warmth 1")
        await type_command(pilot, "/set seed 7")
        await type_command(pilot, "/set")
        shown = transcript_text(app)
        await ask(pilot, "hello")
        runtime = app.core._runtime
        assert runtime is not None
        kept = await runtime.chats.get(runtime.chat.conversation_id or "")
        await type_command(pilot, "/chats")
        assert isinstance(app.screen, ChatsScreen)

    assert "System prompt set for this conversation, after diana's own." in shown
    assert "Options for this conversation: temperature=0.2." in shown
    assert "temperature takes a number from 0 to 2, not 'warm'" in shown
    assert "unknown option 'warmth': the options are temperature, top_p" in shown
    assert "Options: temperature=0.2 seed=7." in shown
    (request,) = chat_requests(fake)
    assert request["options"] == {"temperature": 0.2, "seed": 7}
    assert request["messages"][0]["content"].endswith("Answer in French.")
    assert kept.settings.system == "Answer in French."
    assert kept.settings.options == {"temperature": 0.2, "seed": 7}


async def test_the_palette_and_help_name_the_view(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        offered = {command.title: command for command in app.get_system_commands(app.screen)}
        await type_command(pilot, "/help")
        helped = transcript_text(app)
        offered["Conversations"].callback()
        await until(lambda: isinstance(app.screen, ChatsScreen))
        screen = app.screen
        assert isinstance(screen, ChatsScreen)
        await until(lambda: screen.loaded.is_set())
        empty = str(screen.query_one("#chats-empty", Static).render())

    assert "/chats" in helped and "(Ctrl+O)" in helped
    assert "/system [TEXT|none]" in helped and "/set [NAME VALUE|default]" in helped
    assert empty.startswith("No conversation yet.")


async def test_set_says_how_much_of_the_context_is_filled(fake: FakeOllama, tmp_path: Path) -> None:
    fake.context_length = {"qwen3:30b-a3b": 40960}
    fake.add({"content": ["Lis", "bon", "."]})
    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        await type_command(pilot, "/set")
        before = transcript_text(app)
        await ask(pilot, "where?")
        await type_command(pilot, "/set")
        after = transcript_text(app)

    assert "Context:" not in before
    assert "Options: the model defaults. Context: 4/41k tokens (0%)." in after


@pytest.mark.parametrize("size", [(80, 24), (100, 70)])
async def test_a_long_conversation_is_drawn_from_its_end_then_the_rest_above_in_order(
    fake: FakeOllama, tmp_path: Path, size: tuple[int, int]
) -> None:
    from diana.tui.panes.transcript import AnswerView, Note, SettledAnswer, UserLine

    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        assert app.core is not None
        runtime = app.core._runtime
        at = "2026-01-01T00:00:00+00:00"
        long_answer = " ".join(["a long answer that wraps over many rows"] * 12)

        async def write(connection: Any) -> None:
            await connection.execute(
                "INSERT INTO conversations (id, title, model, created_at, updated_at, origin) "
                "VALUES ('long', 'a long one', 'qwen3:30b-a3b', ?, ?, 'app')",
                (at, at),
            )
            for n in range(30):
                answer = long_answer if n % 7 == 3 else f"answer {n}"
                for role, text in (("user", f"question {n}"), ("assistant", answer)):
                    await connection.execute(
                        "INSERT INTO messages (conversation_id, role, kind, content, "
                        "created_at) VALUES ('long', ?, 'chat', ?, ?)",
                        (role, text, at),
                    )

        await runtime.db.write(write)
        chat = app.query_one(ChatPane)
        await chat.show_conversation(await app.core.chat.open("long"), "a long one")
        # Returned: the screen shows its end, and what was mounted at once fills it.
        transcript = chat.transcript
        answers = AnswerView | SettledAnswer
        drawn = [w for w in transcript.children if isinstance(w, UserLine | answers)]
        last = drawn[-1]
        assert isinstance(last, answers) and last.text == "answer 29"
        region = transcript.region
        bottom = next(
            widget
            for y in range(region.bottom - 1, region.y, -1)
            if (widget := app.screen.get_widget_at(region.x + 1, y)[0]) is not transcript
            and not isinstance(widget, AnswerView)
        )
        assert last in (bottom, *bottom.ancestors)  # the last answer's text, on the screen
        (reopened,) = [w for w in transcript.children if isinstance(w, Note)]
        assert not reopened.region.intersection(region)  # no gap above what was drawn
        assert len(drawn) < 60 and "question 0" not in transcript_text(app)
        await work_done(app, "history")
        shown = transcript_text(app)
        said = [f"question {n} " for n in range(30)]
        assert [shown.index(text) for text in said] == sorted(shown.index(t) for t in said)
        assert shown.index("Reopened “a long one” (60 messages)") < shown.index("question 0")
        assert shown.count(long_answer) == 4 and shown.endswith("answer 29")


async def test_the_view_counts_every_conversation_kept_beyond_those_it_lists(
    fake: FakeOllama, tmp_path: Path
) -> None:
    from diana.tui.modals.chats import LISTED

    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None

        def at(n: int) -> str:
            return f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}+00:00"

        async def write(connection: Any) -> None:
            await connection.executemany(
                "INSERT INTO conversations (id, title, model, created_at, updated_at, origin) "
                "VALUES (?, ?, 'qwen3:30b-a3b', ?, ?, 'cli')",
                [(f"c{n:04d}", f"chat {n}", at(n), at(n)) for n in range(LISTED + 3)],
            )

        await app.core._runtime.db.write(write)
        screen = await chats_view(pilot)
        assert screen.table.row_count == LISTED
        assert str(screen.box.border_title) == f"Conversations — {LISTED + 3:,} conversations"
        await searched(pilot, screen, "chat 50")  # titles holding both, newest first
        held = [f"chat {n}" for n in range(LISTED + 2, -1, -1) if "50" in str(n)]
        assert titles(screen) == held and held[:4] == [
            "chat 502",
            "chat 501",
            "chat 500",
            "chat 450",
        ]
        assert str(screen.box.border_title) == f"Conversations — {LISTED + 3:,} conversations"


async def test_another_conversation_replaces_the_last_with_one_widget_per_line_drawn_whole(
    fake: FakeOllama, tmp_path: Path
) -> None:
    """Opening another conversation leaves nothing of the one before; it mounts one widget
    per line of the transcript (an answer of prose is one widget, not one per paragraph),
    no more than fill the view at first, and what is in view is drawn whole when it
    returns. An answer that is more than prose (a list) is still Markdown's, blocks and all."""
    from diana.tui.panes.transcript import AnswerView, SettledAnswer

    from .screen import on_screen

    app = build_app(tmp_path, ollama=fake.url)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        assert app.core is not None
        at = "2026-01-01T00:00:00+00:00"

        async def write(connection: Any) -> None:
            for name in ("first", "second"):
                await connection.execute(
                    "INSERT INTO conversations (id, title, model, created_at, updated_at, "
                    "origin) VALUES (?, ?, 'qwen3:30b-a3b', ?, ?, 'app')",
                    (name, name, at, at),
                )
                for n in range(25):
                    answer = f"{name} answer {n}, *first* paragraph.\n\nIts **second** one."
                    if n == 5:
                        answer = f"{name} list:\n\n- one item\n- another"
                    for role, text in (("user", f"{name} question {n}"), ("assistant", answer)):
                        await connection.execute(
                            "INSERT INTO messages (conversation_id, role, kind, content, "
                            "created_at) VALUES (?, ?, 'chat', ?, ?)",
                            (name, role, text, at),
                        )

        await app.core._runtime.db.write(write)
        chat = app.query_one(ChatPane)
        await chat.show_conversation(await app.core.chat.open("first"), "first")
        await work_done(app, "history")
        before = list(chat.transcript.walk_children())
        assert len(before) > 50

        await chat.show_conversation(await app.core.chat.open("second"), "second")
        transcript = chat.transcript
        assert not any(widget.display for widget in before)  # going: none laid out or drawn
        shown = transcript.displayed_children
        assert 2 < len(shown) < 20  # what fills the view; the rest come after
        assert not set(before) & set(shown)
        assert all(not widget.children for widget in shown)
        assert on_screen(app, "second answer 24, first paragraph.")
        assert on_screen(app, "Its second one.")

        await work_done(app, "history")
        await until(lambda: not any(widget.is_attached for widget in before))
        answers = [w for w in transcript.children if isinstance(w, AnswerView | SettledAnswer)]
        assert [type(w) for w in answers] == [SettledAnswer] * 5 + [AnswerView] + [
            SettledAnswer
        ] * 19
        assert "second list:\n\n- one item\n- another" in chat.plain_text()
