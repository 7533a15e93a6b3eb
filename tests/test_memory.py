"""The facts memory's plumbing, against the fake Ollama's stand-in embedder (a deterministic bag
of words: these tests check where vectors go and what is said, not how good they are)."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from diana.core.memory import Memory
from diana.core.memory.fact_store import CLOSE_WAIT
from diana.core.memory.vectors import pack
from diana.core.runtime import Profile, Runtime
from diana.core.storage.execution_log import recent_calls
from diana.core.storage.schema import MIGRATIONS

from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama, standin_vectors
from .memory_eval import EMBED_MODEL, write_settings

CHAT_MODEL = "qwen3:30b-a3b"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def open_runtime(config_dir: Path, data_dir: Path, host: str, **memory: object) -> Runtime:
    write_settings(config_dir, host, **memory)
    return await Runtime.open(
        Profile.APP.but(servers="none", chat=False, share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


async def vectors(data_dir: Path) -> list[tuple[int, str, int]]:
    async with aiosqlite.connect(data_dir / "diana.db") as db:
        rows = await db.execute_fetchall(
            "SELECT fact_id, model, dimensions FROM fact_vectors ORDER BY fact_id"
        )
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


async def test_with_ollama_down_search_is_lexical_and_says_so_then_backfills_when_it_returns(
    config_dir: Path, data_dir: Path
) -> None:
    port = free_port()  # nothing listens here yet
    async with await open_runtime(config_dir, data_dir, f"http://127.0.0.1:{port}") as runtime:
        saved = await runtime.orchestrator.execute(
            "save_fact", {"content": "The user's car is a blue Honda Civic"}
        )
        assert saved.success and saved.data["embedded"] is False
        assert "Ollama is not reachable" in saved.data["why"]
        found = await runtime.orchestrator.execute("search_memory", {"query": "Honda civic?"})
        assert found.data["mode"] == "lexical"
        assert f"Ollama is not reachable at http://127.0.0.1:{port}" in found.data["why"]
        [hit] = found.data["results"]
        assert hit["content"] == "The user's car is a blue Honda Civic"
        assert hit["matched"] == ["words"]
        assert set(hit) >= {"id", "content", "metadata", "source", "created_at", "score"}

        with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL], port=port) as fake:
            again = await runtime.memory.search("Honda civic?")
            assert again.mode == "hybrid"
            assert (
                again.why == "1 fact is not embedded yet (found by words only; being embedded now)"
            )
            await runtime.memory.wait_backfilled()
            assert await vectors(data_dir) == [(hit["id"], EMBED_MODEL, 64)]
            after = await runtime.memory.search("Honda civic?")
            assert (after.mode, after.why) == ("hybrid", None)
            assert after.hits[0].similarity is not None
            assert fake.embedded.count("The user's car is a blue Honda Civic") == 1


async def test_without_the_embedding_model_search_is_lexical_and_names_the_pull(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            await runtime.memory.save("Ada prefers tea")
            found = await runtime.memory.search("tea")
            assert found.mode == "lexical"
            assert (
                found.why
                == 'embedding model "all-minilm" is not installed — "ollama pull all-minilm"'
            )
            assert [h.fact.content for h in found.hits] == ["Ada prefers tea"]
            assert json.loads(json.dumps(found.as_json()))["why"] == found.why


async def test_a_fact_saved_when_the_app_was_away_is_embedded_at_the_apps_start(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL]) as fake:
        runtime = await open_runtime(config_dir, data_dir, fake.url)
        await runtime.memory.save("Ada prefers tea")
        await runtime.close()
        fake.models.append(EMBED_MODEL)
        write_settings(config_dir, fake.url)
        app = await Runtime.open(
            Profile.APP.but(servers="none", chat=False, watch=False),
            config_dir,
            data_dir,
            clock=stepping_clock(),
        )
        try:
            await app.memory.wait_backfilled()
            assert [v[1] for v in await vectors(data_dir)] == [EMBED_MODEL]
        finally:
            await app.close()


async def test_a_change_of_embedding_model_embeds_every_fact_again(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL, "nomic-embed-text:latest"]) as fake:
        runtime = await open_runtime(config_dir, data_dir, fake.url)
        await runtime.memory.save("Ada prefers tea")
        await runtime.close()
        async with await open_runtime(
            config_dir, data_dir, fake.url, embed_model="nomic-embed-text"
        ) as runtime:
            found = await runtime.memory.search("what does Ada drink?")
            assert found.why is not None and "not embedded yet" in found.why
            await runtime.memory.wait_backfilled()
            assert [v[1] for v in await vectors(data_dir)] == ["nomic-embed-text"]
            # The model's own prefixes, by its name.
            assert "search_document: Ada prefers tea" in fake.embedded
            assert "search_query: what does Ada drink?" in fake.embedded


class SlowEmbedder:
    """The stand-in vectors after ``delay`` seconds; ``started`` is set at each request."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = threading.Event()

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.started.set()
        time.sleep(self.delay)  # fixed wait: the model's work, acted out
        return standin_vectors(texts)


async def test_closing_while_a_fact_is_being_embedded_keeps_the_models_work(
    config_dir: Path, data_dir: Path
) -> None:
    # Cancelled mid-request, the vector Ollama computed would be thrown away and the fact
    # embedded again by the next process: closing lets the batch in flight be stored.
    embedder = SlowEmbedder(0.3)
    with FakeOllama(models=[CHAT_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            await runtime.memory.save("Ada prefers tea")  # no model yet: not embedded
        fake.models.append(EMBED_MODEL)
        fake.embedder = embedder
        runtime = await open_runtime(config_dir, data_dir, fake.url)
        runtime.memory.start_backfill()
        await asyncio.to_thread(embedder.started.wait, 5)
        await runtime.close()
        assert [v[1] for v in await vectors(data_dir)] == [EMBED_MODEL]
        assert fake.embedded.count("Ada prefers tea") == 1


async def test_closing_does_not_wait_long_for_an_ollama_that_never_answers(
    config_dir: Path, data_dir: Path
) -> None:
    embedder = SlowEmbedder(8.0)
    with FakeOllama(models=[CHAT_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            await runtime.memory.save("Ada prefers tea")
        fake.models.append(EMBED_MODEL)
        fake.embedder = embedder
        runtime = await open_runtime(config_dir, data_dir, fake.url)
        runtime.memory.start_backfill()
        await asyncio.to_thread(embedder.started.wait, 5)
        closing = asyncio.ensure_future(runtime.close())
        done, _ = await asyncio.wait({closing}, timeout=CLOSE_WAIT + 4)
        assert done, "closing waited for the embedding request"
        assert await vectors(data_dir) == []
        async with aiosqlite.connect(data_dir / "diana.db") as db:  # its claim let go
            assert await db.execute_fetchall("SELECT * FROM fact_embedding_claims") == []


async def test_forgetting_a_fact_removes_its_row_vector_and_index_entry(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            kept = (await runtime.memory.save("Ada prefers tea")).fact
            gone = (await runtime.memory.save("Ada's tea is Earl Grey")).fact
            assert gone.embedded
            assert await runtime.memory.forget(gone.id) == gone
            assert await runtime.memory.forget(gone.id) is None
            assert await runtime.memory.get(gone.id) is None
            assert [v[0] for v in await vectors(data_dir)] == [kept.id]
            async with aiosqlite.connect(data_dir / "diana.db") as db:
                rows = await db.execute_fetchall(
                    "SELECT rowid FROM facts_fts WHERE facts_fts MATCH 'grey'"
                )
            assert list(rows) == []
            found = await runtime.memory.search("tea")
            assert [h.fact.id for h in found.hits] == [kept.id]


async def test_facts_carry_metadata_and_a_search_keeps_to_a_tag(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            orch = runtime.orchestrator
            saved = await orch.execute(
                "save_fact",
                {
                    "content": "Project X uses Python 3.11 and FastAPI",
                    "tags": ["work"],
                    "metadata": {"project": "X", "stack": ["python"]},
                },
            )
            assert saved.success and saved.data["metadata"] == {"project": "X", "stack": ["python"]}
            await orch.execute("save_fact", {"content": "Project Y uses Python 2", "tags": ["old"]})
            found = await orch.execute(
                "search_memory", {"query": "Which stack does project X use?", "tag": "WORK"}
            )
            assert [r["metadata"] for r in found.data["results"]] == [
                {"project": "X", "stack": ["python"]}
            ]
            assert [f.tags for f in await runtime.memory.recent(tag="old")] == [["old"]]
            too_big = await orch.execute(
                "save_fact", {"content": "x", "metadata": {"blob": "y" * 5000}}
            )
            assert too_big.error_code is not None and "metadata" in (too_big.error or "")


async def test_a_database_of_the_schema_before_memory_by_meaning_is_upgraded(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    data_dir.mkdir()
    # The schema as it was before the migration that stems the index (and those after it).
    before = next(i for i, script in enumerate(MIGRATIONS) if "tokenize='porter" in script)
    async with aiosqlite.connect(data_dir / "diana.db") as old:
        for script in MIGRATIONS[:before]:
            await old.executescript(script)
        await old.execute(
            "INSERT INTO facts (content, tags, created_at) VALUES ('The user drives a Civic', "
            "'car', '2026-01-01T00:00:00+00:00')"
        )
        await old.execute(f"PRAGMA user_version = {before}")
        await old.commit()
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            [fact] = await runtime.memory.recent()
            assert (fact.content, fact.tags, fact.metadata) == (
                "The user drives a Civic",
                ["car"],
                {},
            )
            found = await runtime.memory.search("driving")  # stemmed: the index was rebuilt
            assert [h.fact.id for h in found.hits] == [fact.id]
            await runtime.memory.wait_backfilled()
            assert [v[0] for v in await vectors(data_dir)] == [fact.id]


async def test_ranking_in_plain_python_matches_numpy(config_dir: Path, data_dir: Path) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            for n in range(20):
                await runtime.memory.save(f"fact number {n} about tea and cake {n % 3}")
            plain = Memory(runtime.db, runtime.memory.embedder, runtime.clock, use_numpy=False)
            for query in ("tea", "cake 2", "number 7"):
                fast = await runtime.memory.search(query, 10)
                slow = await plain.search(query, 10)
                assert [h.fact.id for h in fast.hits] == [h.fact.id for h in slow.hits]


def stored_bytes(data_dir: Path) -> bytes:
    """Every byte of the database file, its write-ahead log and its shared memory."""
    return b"".join(path.read_bytes() for path in sorted(data_dir.glob("diana.db*")))


async def test_a_forgotten_fact_is_nowhere_in_the_file_its_wal_the_index_or_the_log(
    config_dir: Path, data_dir: Path
) -> None:
    secret = "The spare key hides under the zanzibar flowerpot"
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            execute = runtime.orchestrator.execute
            kept = await execute("save_fact", {"content": "Ada prefers tea", "tags": ["drinks"]})
            saved = await execute("save_fact", {"content": secret, "tags": ["hideaway"]})
            found = await execute("search_memory", {"query": "where does the spare key hide?"})
            assert secret in json.dumps(found.data)
            await runtime.execution_log.flush()
            assert b"zanzibar" in stored_bytes(data_dir)

            forgot = await runtime.memory.forget(saved.data["id"])
            assert forgot is not None and forgot.content == secret

            # Neither the text nor a word of it as the full-text index keeps it (lower case,
            # stemmed) is left in any page of the file or its WAL.
            stored = stored_bytes(data_dir)
            for word in (secret, "zanzibar", "flowerpot"):
                assert word.encode() not in stored, word
            # The calls that held it are still in the log, the text replaced by a marker.
            calls = {c.tool: c for c in await recent_calls(runtime.db)}
            assert calls["save_fact"].arguments == {"content": "[forgotten]", "tags": ["hideaway"]}
            assert calls["save_fact"].result is not None
            assert calls["save_fact"].result["content"] == "[forgotten]"
            shown = json.dumps(calls["search_memory"].result)
            assert "[forgotten]" in shown and "Ada prefers tea" in shown
            # The other fact, and the index, are whole.
            assert (await runtime.memory.search("tea")).hits[0].fact.id == kept.data["id"]
            after = await runtime.memory.search("zanzibar flowerpot")
            assert [h.fact.id for h in after.hits if h.words] == []


def nan_first(texts: list[str]) -> list[list[float]]:
    return [[math.nan, *v[1:]] for v in standin_vectors(texts)]


def infinity_last(texts: list[str]) -> list[list[float]]:
    return [[*v[:-1], math.inf] for v in standin_vectors(texts)]


def empty(texts: list[str]) -> list[list[float]]:
    return [[] for _ in texts]


def zeros(texts: list[str]) -> list[list[float]]:
    return [[0.0] * 64 for _ in texts]


def too_long(texts: list[str]) -> list[list[float]]:
    return [[0.01] * 20_000 for _ in texts]


@pytest.mark.parametrize(
    ("embedder", "said"),
    [
        (nan_first, "a vector holding NaN or Infinity"),
        (infinity_last, "a vector holding NaN or Infinity"),
        (empty, "an empty vector"),
        (zeros, "a vector of zeros"),
        (too_long, "a vector of 20,000 numbers (at most 16,384)"),
    ],
)
async def test_a_vector_that_is_no_embedding_is_refused_and_the_fact_embedded_again_later(
    config_dir: Path, data_dir: Path, embedder: Any, said: str
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL], embedder=embedder) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            saved = await runtime.orchestrator.execute(
                "save_fact", {"content": "The user's car is a blue Honda Civic"}
            )
            assert saved.success and saved.data["embedded"] is False
            assert said in saved.data["why"] and "asked again later" in saved.data["why"]
            assert await vectors(data_dir) == []
            found = await runtime.memory.search("Honda civic?")
            assert found.mode == "lexical" and said in (found.why or "")
            assert [h.fact.id for h in found.hits] == [saved.data["id"]]

            fake.embedder = standin_vectors  # the model answers properly again
            again = await runtime.memory.search("Honda civic?")
            assert again.mode == "hybrid"
            await runtime.memory.wait_backfilled()
            assert await vectors(data_dir) == [(saved.data["id"], EMBED_MODEL, 64)]


async def test_a_vector_shorter_than_the_models_others_is_refused(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            first = await runtime.memory.save("Ada prefers tea")
            assert first.why is None
            fake.embedder = lambda texts: [[0.6, 0.8, 0.0] for _ in texts]
            short = await runtime.memory.save("Ada's cat is called Miso")
            assert short.why == (
                f'embedding model "{EMBED_MODEL}" gave a vector of 3 numbers where its other '
                "facts have 64; it is not stored, and is asked again later"
            )
            assert await vectors(data_dir) == [(first.fact.id, EMBED_MODEL, 64)]
            found = await runtime.memory.search("cat Miso")
            assert found.mode == "lexical"
            assert "3 numbers where the facts have 64" in (found.why or "")
            assert found.hits[0].fact.id == short.fact.id


async def test_a_nan_vector_stored_before_is_dropped_and_embedded_again(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            saved = (await runtime.memory.save("The user's car is a blue Honda Civic")).fact
        async with aiosqlite.connect(data_dir / "diana.db") as db:  # as an older diana left it
            await db.execute("UPDATE fact_vectors SET vector = ?", (pack([math.nan] * 64),))
            await db.commit()
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            found = await runtime.memory.search("Honda civic?")
            assert [h.fact.id for h in found.hits] == [saved.id]
            assert found.hits[0].similarity is None or math.isfinite(found.hits[0].similarity)
            assert json.loads(json.dumps(found.as_json()), parse_constant=refuse) is not None
            await runtime.memory.wait_backfilled()
            after = await runtime.memory.search("Honda civic?")
            assert after.why is None and (after.hits[0].similarity or 0.0) > 0.3
        assert await vectors(data_dir) == [(saved.id, EMBED_MODEL, 64)]


def refuse(constant: str) -> None:
    raise AssertionError(f"{constant} in JSON")


async def test_a_forgotten_fact_leaves_no_copy_in_the_proposal_that_saved_it(
    config_dir: Path, data_dir: Path
) -> None:
    secret = "The safe's code is written on the zanzibar postcard"
    (config_dir / "policy.json").write_text(json.dumps({"tools": {"save_fact": "ask"}}))
    with FakeOllama(models=[CHAT_MODEL, EMBED_MODEL]) as fake:
        async with await open_runtime(config_dir, data_dir, fake.url) as runtime:
            held = await runtime.orchestrator.execute("save_fact", {"content": secret})
            proposal_id = held.data["proposal_id"]
            decision = await runtime.approvals.approve(proposal_id, by="test")
            assert decision.result is not None and decision.result.success
            await runtime.memory.forget(decision.result.data["id"])

            row = await runtime.db.read_one(
                "SELECT status, arguments, result FROM proposals WHERE id = ?", (proposal_id,)
            )
            assert row is not None and row["status"] == "succeeded"
            assert json.loads(row["arguments"]) == {"content": "[forgotten]"}
            assert json.loads(row["result"])["content"] == "[forgotten]"
            for word in (secret, "zanzibar", "postcard"):
                assert word.encode() not in stored_bytes(data_dir), word
