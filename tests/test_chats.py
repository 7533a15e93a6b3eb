"""Conversations as a chat client keeps them, against the real database and a fake Ollama
over real HTTP: listed newest first, found by their words (FTS5, never read as syntax),
renamed, deleted (the call log stays), exported with their tool calls, and each with its own
system prompt and options, sent on every turn and kept when it is reopened."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import aiosqlite
import pytest
from diana.core.chat.chats import BadChatInput, UnknownChat, search_terms
from diana.core.chat.conversation import CLI, ConversationStore, Kind, Message
from diana.core.runtime import Profile, Runtime
from diana.core.storage.schema import MIGRATIONS

from .chat_turns import Events, call, chat_requests, configure, start
from .conftest import START, stepping_clock
from .fixtures.fake_ollama import FakeOllama


async def talk(runtime: Runtime, *questions: str) -> str:
    """A new conversation in which each question was answered; its id."""
    runtime.chat.clear()
    for question in questions:
        outcome = await runtime.chat.run_turn(question, Events())
        assert outcome.problem is None, outcome.problem
    assert runtime.chat.conversation_id is not None
    return runtime.chat.conversation_id


async def test_the_list_is_newest_first_with_title_model_count_and_origin(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": "Paris."}, {"content": "About 2 million."}, {"content": "Blue."})
    fake.add({"content": "Yes."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        first = await talk(runtime, "capital of France?", "how many live there?")
        second = await talk(runtime, "colour of the sky?")
        before = await runtime.chats.recent()
        await runtime.chat.open(first)  # used again: first again
        await runtime.chat.run_turn("sure?", Events())
        after = await runtime.chats.recent()

    assert [c.id for c in before] == [second, first]
    assert [c.id for c in after] == [first, second]
    newest, older = after
    assert (newest.title, newest.messages, newest.origin) == ("capital of France?", 6, "cli")
    assert (older.title, older.messages) == ("colour of the sky?", 2)
    assert newest.model == runtime.settings.llm.model


async def test_search_finds_words_of_messages_and_titles_and_never_reads_syntax(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": "Use a sourdough starter."}, {"content": "Check the tyre pressure."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        bread = await talk(runtime, "how do I bake bread?")
        bike = await talk(runtime, "my bicycle wobbles")
        chats = runtime.chats
        by_answer = await chats.search("sourdough")
        by_prefix = await chats.search("sourd")  # typed so far
        by_stem = await chats.search("baking")  # porter: bake
        by_two = await chats.search("tyre bicycle")
        by_title = await chats.search("BICYCLE WOB")
        nothing = await chats.search("sourdough bicycle")
        hostile = {
            text: await chats.search(text)
            for text in (
                '"',
                'NEAR("zz" "yy")',
                "AND OR NOT",
                "*",
                "-bread",
                "bread)",
                "zz:yy",
                "^",
            )
        }
        everything = await chats.search("   ")

    assert [c.id for c in by_answer] == [bread]
    assert [c.id for c in by_prefix] == [bread]
    assert [c.id for c in by_stem] == [bread]
    assert [c.id for c in by_two] == [bike]
    assert [c.id for c in by_title] == [bike]
    assert nothing == []
    assert [c.id for c in hostile["-bread"]] == [bread]  # a word, not an exclusion
    assert [c.id for c in hostile["bread)"]] == [bread]
    for text in ('NEAR("zz" "yy")', "AND OR NOT", "zz:yy"):
        assert hostile[text] == [], text
    for text in ('"', "*", "^"):  # no word: nothing narrows the list
        assert [c.id for c in hostile[text]] == [bike, bread], text
    assert [c.id for c in everything] == [bike, bread]


def test_search_words_are_quoted_and_the_last_is_a_prefix() -> None:
    assert search_terms('near("x") AND') == [("near", '"near"'), ("x", '"x"'), ("and", '"and"*')]
    assert search_terms("¿?") == []


async def test_rename_keeps_one_line_and_refuses_empty_huge_or_unknown(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": "ok"})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        chat_id = await talk(runtime, "hello")
        renamed = await runtime.chats.rename(chat_id, "  Trip\nplans \x1b[31m\udcff ")
        with pytest.raises(BadChatInput, match="cannot be empty"):
            await runtime.chats.rename(chat_id, " \n\t")
        with pytest.raises(BadChatInput, match="at most 200 characters, not 1,000,000"):
            await runtime.chats.rename(chat_id, "x" * 1_000_000)
        with pytest.raises(UnknownChat, match="no conversation 'nope'"):
            await runtime.chats.rename("nope", "title")
        kept = await runtime.chats.get(chat_id)
        found = await runtime.chats.search("trip")

    assert renamed.title == kept.title == "Trip plans [31m\ufffd"
    assert [c.id for c in found] == [chat_id]


async def test_delete_takes_the_messages_and_leaves_the_call_log(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(call("get_current_time", timezone="UTC"), {"content": "It is noon."})
    fake.add({"content": "Kept."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        gone = await talk(runtime, "what time is it?")
        kept = await talk(runtime, "what time zone?")
        deleted = await runtime.chats.delete(gone)
        with pytest.raises(UnknownChat):
            await runtime.chats.delete(gone)
        with pytest.raises(UnknownChat):
            await runtime.chats.export(gone)
        left = [c.id for c in await runtime.chats.recent()]
        messages = await runtime.db.read(
            "SELECT COUNT(*) AS n FROM messages WHERE conversation_id = ?", (gone,)
        )
        found = await runtime.chats.search("time")
        calls = await runtime.recent_calls()

    assert deleted.id == gone and deleted.messages == 4
    assert left == [kept]
    assert messages[0]["n"] == 0
    assert [c.id for c in found] == [kept]  # its words left the index too
    assert [c.tool for c in calls] == ["get_current_time"]


async def test_export_as_markdown_and_json_has_every_message_and_each_call_outcome(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add(call("get_current_time", timezone="UTC"), {"content": "It is ```noon```."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        await runtime.chat.set_system("Answer in one line.")
        await runtime.chat.set_option("temperature", "0.2")
        await runtime.chat.run_turn("what time is it?", Events())
        chat_id = runtime.chat.conversation_id
        assert chat_id is not None
        markdown = await runtime.chats.export(chat_id, "md")
        document = json.loads(await runtime.chats.export(chat_id, "json"))
        with pytest.raises(BadChatInput, match="md or json, not 'pdf'"):
            await runtime.chats.export(chat_id, "pdf")

    assert markdown.startswith("# what time is it?\n")
    assert "- options: temperature=0.2" in markdown
    assert "Answer in one line." in markdown
    assert "## You (" in markdown and "## DIANA (" in markdown
    assert '- asked to call `get_current_time` {"timezone": "UTC"}' in markdown
    assert "### Tool call `get_current_time`: succeeded" in markdown
    assert '"iso":' in markdown  # the result
    assert "It is ```noon```." in markdown
    assert document["id"] == chat_id
    assert document["system"] == "Answer in one line."
    assert document["options"] == {"temperature": 0.2}
    roles = [m["role"] for m in document["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    outcome = document["messages"][2]["outcome"]
    assert (outcome["name"], outcome["status"]) == ("get_current_time", "succeeded")
    assert outcome["arguments"] == {"timezone": "UTC"}


async def test_system_prompt_and_options_reach_ollama_and_come_back_on_reopening(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": "Bonjour."}, {"content": "Salut."}, {"content": "Hello."})
    fake.models.append("gemma3:1b")  # the model switched to on reopening
    async with await start(config_dir, data_dir, fake.url) as runtime:
        chat = runtime.chat
        await chat.set_system("Answer in French.")
        await chat.set_option("temperature", "0.2")
        await chat.set_option("seed", 7)
        await chat.set_option("num_ctx", "8192")
        await chat.run_turn("hello", Events())
        chat_id = chat.conversation_id
        assert chat_id is not None
        with pytest.raises(BadChatInput, match="temperature takes a number from 0 to 2, not 'hot'"):
            await chat.set_option("temperature", "hot")
        with pytest.raises(BadChatInput, match="seed takes a whole number"):
            await chat.set_option("seed", "1.5")
        with pytest.raises(BadChatInput, match="unknown option 'warmth'"):
            await chat.set_option("warmth", "1")
        chat.clear()  # a new conversation has none of them
        await chat.run_turn("hi", Events())

    configure(config_dir, host=fake.url)
    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        messages = await runtime.chat.open(chat_id)
        runtime.chat.model = "gemma3:1b"  # /model: the conversation keeps the one it uses
        answered = Events()
        await runtime.chat.run_turn("again", answered)
        assert [type(e).__name__ for e in answered.seen][-1] == "TurnFinished"
        kept_model = (await runtime.chats.get(chat_id)).model
        with pytest.raises(UnknownChat):
            await runtime.chat.open("missing")

    first, fresh, reopened = chat_requests(fake)
    assert first["options"] == {"temperature": 0.2, "seed": 7, "num_ctx": 8192}
    system = first["messages"][0]["content"]
    assert system.startswith("You are DIANA")  # diana's own rules stay, first
    assert system.endswith("Answer in French.")
    assert "options" not in fresh or not fresh["options"]
    assert "Answer in French." not in fresh["messages"][0]["content"]
    assert [m.content for m in messages] == ["hello", "Bonjour."]
    assert reopened["options"] == first["options"]
    assert (reopened["model"], kept_model) == ("gemma3:1b", "gemma3:1b")
    assert reopened["messages"][0]["content"].endswith("Answer in French.")
    assert [m["content"] for m in reopened["messages"][1:]] == ["hello", "Bonjour.", "again"]


async def test_rows_another_program_wrote_that_are_not_utf8_still_list_search_and_open(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.add({"content": "Alfama first."})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        chat_id = await talk(runtime, "plan a trip to Lisbon")

    with sqlite3.connect(data_dir / "diana.db") as db:  # bytes that are not UTF-8, by hand
        db.execute(
            "UPDATE conversations SET title = CAST(x'7472697020ff' AS TEXT), "
            "system = CAST(x'6265206272696566fe' AS TEXT)"
        )
        db.execute("UPDATE messages SET content = CAST(x'416c66616d61ff' AS TEXT)")
    db.close()

    async with await Runtime.open(
        Profile.APP.but(share=False, watch=False), config_dir, data_dir, clock=stepping_clock()
    ) as runtime:
        (listed,) = await runtime.chats.recent()
        found = await runtime.chats.search("trip")
        reopened = await runtime.chat.open_latest()
        exported = await runtime.chats.export(chat_id)

    assert listed.title == "trip \ufffd"
    assert listed.settings.system == "be brief\ufffd"
    assert [c.id for c in found] == [chat_id]
    assert [m.content for m in reopened] == ["Alfama\ufffd", "Alfama\ufffd"]
    assert exported.startswith("# trip \ufffd\n")


async def test_the_context_filled_comes_from_ollamas_counts_and_the_models_length(
    config_dir: Path, data_dir: Path, fake: FakeOllama
) -> None:
    fake.context_length = {"qwen3:30b-a3b": 40960}
    fake.add({"content": ["Lis", "bon", "."]}, {"content": ["Yes", "."]})
    async with await start(config_dir, data_dir, fake.url) as runtime:
        chat = runtime.chat
        before = chat.context_fill()
        await chat.run_turn("where?", Events())
        first = chat.context_fill()
        await chat.set_option("num_ctx", "8192")  # the conversation's own window
        await chat.run_turn("sure?", Events())
        second = chat.context_fill()
        chat.clear()
        cleared = chat.context_fill()

    assert before is None and cleared is None
    assert first == (1 + 3, 40960)  # prompt_eval_count + eval_count, of the model's context
    assert second == (1 + 2, 8192)


async def said(
    store: ConversationStore, chat_id: str, at: datetime, *texts: str, origin: str = CLI
) -> None:
    """A conversation of ``texts``, the person's and the model's in turn, written at ``at``."""
    await store.create(chat_id, "qwen3:30b-a3b", at, origin)
    for n, text in enumerate(texts):
        role = "user" if n % 2 == 0 else "assistant"
        await store.append(chat_id, Message(role, Kind.CHAT, text), at + timedelta(seconds=n))


async def test_a_search_of_a_common_word_gives_the_newest_matches_up_to_the_limit(
    config_dir: Path, data_dir: Path
) -> None:
    async with await start(config_dir, data_dir, None) as runtime:
        store = ConversationStore(runtime.db)
        for n in range(40):  # kettle in every one; descaling in every third, said apart
            descaling = "vinegar descaling works" if n % 3 == 0 else "a cup of tea"
            await said(
                store,
                f"c{n:02d}",
                START + timedelta(minutes=n),
                f"hello {n}",
                "the kettle",
                descaling,
            )
        await store.append("c03", Message("user", Kind.CHAT, "thanks"), START + timedelta(hours=2))
        chats = runtime.chats
        five = await chats.search("kettle descaling", 5)
        every = await chats.search("kettle", 1000)
        typed = await chats.search("kettle desc", 3)
        one = await chats.search("KETTLE", 1)
        syntax = await chats.search('descaling" OR "kettle', 2)

    assert [c.id for c in five] == ["c03", "c39", "c36", "c33", "c30"]  # c03: used last
    assert [c.id for c in every] == ["c03", *(f"c{n:02d}" for n in range(39, -1, -1) if n != 3)]
    assert [c.id for c in typed] == ["c03", "c39", "c36"]
    assert [c.id for c in one] == ["c03"]
    assert [c.id for c in syntax] == []  # "or" is a word here, and none holds it


async def test_an_older_database_is_migrated_and_its_conversations_found_by_their_words(
    config_dir: Path, data_dir: Path
) -> None:
    data_dir.mkdir()
    before = next(i for i, script in enumerate(MIGRATIONS) if "conversation_words" in script)
    async with aiosqlite.connect(data_dir / "diana.db") as old:
        for script in MIGRATIONS[:before]:
            await old.executescript(script)
        for n, (title, text) in enumerate(
            (("bread", "knead the sourdough"), ("bike", "pump the tyre"), ("tea", "the kettle"))
        ):
            at = f"2026-01-0{n + 1}T00:00:00+00:00"
            await old.execute(
                "INSERT INTO conversations (id, title, model, created_at, updated_at) "
                "VALUES (?, ?, 'm', ?, ?)",
                (title, title, at, at),
            )
            await old.executemany(
                "INSERT INTO messages (conversation_id, role, kind, content, created_at) "
                "VALUES (?, ?, 'chat', ?, ?)",
                [(title, "user", text, at), (title, "tool", "secret tool words", at)],
            )
        await old.execute("DELETE FROM conversations WHERE id = 'bike'")  # a gap in rowids
        await old.execute("DELETE FROM messages WHERE conversation_id = 'bike'")
        await old.execute(f"PRAGMA user_version = {before}")
        await old.commit()

    async with await start(config_dir, data_dir, None) as runtime:
        chats = runtime.chats
        listed = [(c.id, c.title, c.messages) for c in await chats.recent()]
        found = {word: [c.id for c in await chats.search(word)] for word in ("sourd", "kettle")}
        tool_words = await chats.search("secret")
        gone = await chats.search("tyre")
        store = ConversationStore(runtime.db)
        await said(store, "new", START, "a third kettle")
        kettles = [c.id for c in await chats.search("kettle")]
        await chats.delete("tea")
        after_delete = [c.id for c in await chats.search("kettle")]
        keys = [tuple(r) for r in await runtime.db.read("SELECT id, key FROM conversations")]

    assert listed == [("tea", "tea", 2), ("bread", "bread", 2)]
    assert found == {"sourd": ["bread"], "kettle": ["tea"]}
    assert tool_words == [] and gone == []
    assert kettles == ["new", "tea"] and after_delete == ["new"]
    assert sorted(keys) == [("bread", 1), ("new", 4)]  # kept from before; never reused


async def test_the_index_follows_messages_changed_or_removed_by_hand_and_a_vacuum(
    config_dir: Path, data_dir: Path
) -> None:
    async with await start(config_dir, data_dir, None) as runtime:
        store = ConversationStore(runtime.db)
        for n, text in enumerate(("the kettle", "the garden", "the river", "the orchard")):
            await said(store, f"c{n}", START + timedelta(minutes=n), f"chat {n}", text)

    with sqlite3.connect(data_dir / "diana.db") as db:  # by hand, as another program might
        db.execute("UPDATE messages SET content = 'the violin' WHERE content = 'the kettle'")
        db.execute("UPDATE messages SET role = 'tool' WHERE content = 'the river'")
        db.execute("DELETE FROM conversations WHERE id = 'c1'")
    db.execute("VACUUM")
    db.close()

    async with await start(config_dir, data_dir, None) as runtime:
        chats = runtime.chats
        found = {
            word: [c.id for c in await chats.search(word)]
            for word in ("kettle", "violin", "garden", "river", "orchard")
        }
        left = await runtime.db.read("SELECT COUNT(*) FROM messages WHERE conversation_id = 'c1'")

    assert found == {"kettle": [], "violin": ["c0"], "garden": [], "river": [], "orchard": ["c3"]}
    assert left[0][0] == 0  # a conversation deleted takes its messages
