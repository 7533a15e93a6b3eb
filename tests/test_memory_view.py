"""Memory a person can see and correct: the Memory view (m in Agents, or the command palette)
lists the facts, searches them as you type, shows one in full and forgets one once the person
says yes; it follows facts other processes save. The real app, a real SQLite file, the ollama
client against the fake Ollama (or no Ollama at all)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from diana.tui.app import DianaApp
from diana.tui.modals.dialogs import ConfirmDialog
from diana.tui.modals.memory import FactScreen, FactTable, MemoryScreen
from textual.command import CommandPalette
from textual.widgets import OptionList, Static

from .commands import diana
from .fixtures.fake_ollama import FakeOllama
from .scenarios import NO_OLLAMA, build_app, settle
from .screen import on_screen
from .waits import work_done

SMALL = (80, 24)
FACTS = [
    ("Ada prefers tea over coffee", ["drinks"]),
    ("The user's car is a blue 2018 Honda Civic", ["car"]),
    ("The dentist appointment is on March 3 at 10:00", ["health", "dates"]),
]


@contextmanager
def embedding_ollama() -> Iterator[FakeOllama]:
    """A fake Ollama that has the embedding model (stand-in vectors: words in common)."""
    with FakeOllama(models=["qwen3:30b-a3b", "all-minilm"]) as fake:
        yield fake


async def until(condition: Callable[[], bool], within: float = 15.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - the view's own state
            await asyncio.sleep(0.02)


async def save_facts(app: DianaApp) -> list[int]:
    """FACTS saved as the model saves them: through the save_fact tool."""
    assert app.core is not None
    ids = []
    for content, tags in FACTS:
        result = await app.core._runtime.orchestrator.execute(
            "save_fact", {"content": content, "tags": tags}
        )
        assert result.success, result.error
        ids.append(int(result.data["id"]))
    return ids


async def shown(app: DianaApp) -> MemoryScreen:
    """The Memory view once it has read the facts (and tried to embed what had no vector)."""
    await until(lambda: isinstance(app.screen, MemoryScreen) and app.screen.status is not None)
    await work_done(app, "memory-embed")
    await work_done(app, "memory")
    screen = app.screen
    assert isinstance(screen, MemoryScreen)
    return screen


def rows(screen: MemoryScreen) -> list[list[str]]:
    table = screen.table
    if not table.display:
        return []
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def title(screen: MemoryScreen) -> str:
    return str(screen.box.border_title)


def database(app: DianaApp) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(app.paths.data_dir / "diana.db"))


async def test_m_in_agents_lists_the_facts_saved_through_the_runtime_and_enter_shows_one(
    tmp_path: Path,
) -> None:
    with embedding_ollama() as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=SMALL) as pilot:
            await settle(pilot)
            ids = await save_facts(app)
            assert app.core is not None
            noted = await app.core._runtime.memory.save(
                "Ben's birthday is on 12 July",
                ["dates"],
                metadata={"confidence": "high", "from": "chat"},
                source="a person",
            )
            await pilot.press("f5", "m")
            screen = await shown(app)

            assert title(screen) == "Memory — 4 facts · all-minilm"
            assert rows(screen) == [
                [str(noted.fact.id), "2026-03-14", "yes", "dates", "Ben's birthday is on 12 July"],
                [str(ids[2]), "2026-03-14", "yes", "health dates", FACTS[2][0]],
                [str(ids[1]), "2026-03-14", "yes", "car", FACTS[1][0]],
                [str(ids[0]), "2026-03-14", "yes", "drinks", FACTS[0][0]],
            ]
            # The keys go from the search to the list; Enter shows the fact in full.
            await pilot.press("down", "enter")
            await pilot.pause()
            detail = app.screen
            assert isinstance(detail, FactScreen)
            for line in (
                "by        a person",
                "saved     2026-03-14 09:26:53 UTC",
                "embedded  yes, by all-minilm",
                "Ben's birthday is on 12 July",
                '"confidence": "high"',
                '"from": "chat"',
            ):
                assert on_screen(app, line), line
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is screen


async def test_the_command_palette_opens_the_memory_view(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await save_facts(app)
        await pilot.press("ctrl+p")
        await until(lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"memory")
        results = app.screen.query_one(OptionList)
        await until(
            lambda: any(
                "Memory" in str(results.get_option_at_index(i).prompt)
                for i in range(results.option_count)
            )
        )
        await pilot.press("down", "enter")
        screen = await shown(app)
        assert len(rows(screen)) == 3


async def test_typing_searches_ranked_with_scores_and_escape_clears(tmp_path: Path) -> None:
    with embedding_ollama() as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=SMALL) as pilot:
            await settle(pilot)
            ids = await save_facts(app)
            await pilot.press("f5", "m")
            screen = await shown(app)

            await pilot.press(*"tea")
            await until(lambda: screen.found is not None and screen.found.query == "tea")
            await work_done(app, "memory")
            assert screen.found is not None and screen.found.mode == "hybrid"
            found = rows(screen)
            assert found[0][0] == str(ids[0]) and found[0][-1] == FACTS[0][0]
            scores = [float(row[1]) for row in found]
            assert scores == sorted(scores, reverse=True) and scores[0] > 0
            assert title(screen) == "Memory — 3 facts · all-minilm"
            summary = str(screen.query_one("#memory-summary", Static).render())
            assert "for “tea”" in summary and "by words and meaning" in summary

            await pilot.press("escape")
            await until(lambda: screen.found is None and len(rows(screen)) == 3)
            assert screen.entry.value == ""
            # Cleared, Esc closes the view.
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, MemoryScreen))


async def test_with_ollama_down_it_searches_by_words_and_the_title_says_why(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path, ollama=NO_OLLAMA)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        ids = await save_facts(app)
        await pilot.press("f5", "m")
        screen = await shown(app)
        expected = "Memory — 3 facts · by words: Ollama is not reachable"
        assert title(screen) == expected
        assert [row[2] for row in rows(screen)] == ["not yet"] * 3

        await pilot.press(*"Honda")
        await until(lambda: screen.found is not None and screen.found.query == "Honda")
        await work_done(app, "memory")
        assert screen.found is not None and screen.found.mode == "lexical"
        assert [row[0] for row in rows(screen)] == [str(ids[1])]
        assert title(screen) == expected
        summary = str(screen.query_one("#memory-summary", Static).render())
        assert "By words only: Ollama is not reachable at http://127.0.0.1:9" in summary

        await pilot.press("ctrl+u", *"zeppelin")
        await until(lambda: screen.found is not None and screen.found.query == "zeppelin")
        await work_done(app, "memory")
        assert screen.found is not None and screen.found.hits == []
        empty = str(screen.query_one("#memory-empty", Static).render())
        assert "No fact matches “zeppelin”" in empty


async def test_d_forgets_the_fact_its_vector_and_index_row_after_yes_and_no_keeps_it(
    tmp_path: Path,
) -> None:
    with embedding_ollama() as fake:
        app = build_app(tmp_path, ollama=fake.url)
        async with app.run_test(size=SMALL) as pilot:
            await settle(pilot)
            ids = await save_facts(app)
            await pilot.press("f5", "m")
            screen = await shown(app)
            newest = ids[2]
            with database(app) as db:
                assert db.execute(
                    "SELECT count(*) FROM fact_vectors WHERE fact_id = ?", (newest,)
                ).fetchone() == (1,)

            # n keeps it.
            await pilot.press("down", "d")
            await until(lambda: isinstance(app.screen, ConfirmDialog))
            question = str(app.screen.query_one(".confirm-question", Static).render())
            assert f"Forget fact {newest}?" in question and FACTS[2][0] in question
            await pilot.press("n")
            await until(lambda: app.screen is screen)
            await work_done(app, "memory-forget", "memory")
            assert [row[0] for row in rows(screen)] == [str(i) for i in reversed(ids)]
            assert app.core is not None
            assert await app.core._runtime.memory.get(newest) is not None

            # y forgets it: the fact, its vector and its full-text row.
            await pilot.press("d")
            await until(lambda: isinstance(app.screen, ConfirmDialog))
            await pilot.press("y")
            await until(lambda: app.screen is screen)
            await work_done(app, "memory-forget")
            await work_done(app, "memory")
            assert [row[0] for row in rows(screen)] == [str(ids[1]), str(ids[0])]
            assert title(screen) == "Memory — 2 facts · all-minilm"
            last = str(screen.query_one("#memory-last", Static).render())
            assert last == f"Forgot fact {newest}: {FACTS[2][0]}"
            with database(app) as db:
                for table in (
                    "facts WHERE id",
                    "fact_vectors WHERE fact_id",
                    "facts_fts WHERE rowid",
                ):
                    count = db.execute(f"SELECT count(*) FROM {table} = ?", (newest,)).fetchone()
                    assert count == (0,), table
            found = await app.core._runtime.memory.search("dentist appointment March")
            assert newest not in [hit.fact.id for hit in found.hits]
            # The selection stays in the list, on the next fact.
            assert screen.selected() is not None and screen.selected().id == ids[1]  # type: ignore[union-attr]
            assert isinstance(screen.focused, FactTable)


@pytest.mark.processes
async def test_a_fact_saved_by_another_process_appears_in_the_open_view(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await save_facts(app)
        await pilot.press("f5", "m")
        screen = await shown(app)
        assert len(rows(screen)) == 3

        saved = await asyncio.to_thread(
            diana,
            app.paths.config_dir,
            app.paths.data_dir,
            "call",
            "save_fact",
            "--args",
            json.dumps({"content": "The spare key is under the blue pot", "tags": ["home"]}),
        )
        assert saved.returncode == 0, saved.stderr
        fact_id = json.loads(saved.stdout)["id"]
        await until(lambda: len(rows(screen)) == 4)
        assert rows(screen)[0][0] == str(fact_id)
        assert rows(screen)[0][-1] == "The spare key is under the blue pot"
        assert title(screen).startswith("Memory — 4 facts")

        forgot = await asyncio.to_thread(
            diana, app.paths.config_dir, app.paths.data_dir, "memory", "forget", str(fact_id)
        )
        assert forgot.returncode == 0, forgot.stderr
        await until(lambda: len(rows(screen)) == 3)
