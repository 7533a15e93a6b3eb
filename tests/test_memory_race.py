"""Several processes saving, forgetting, embedding and searching facts on one database at once:
every fact is stored once, embedded once, and forgotten completely."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from diana.core.runtime import Profile, Runtime

from .conftest import stepping_clock
from .fixtures import forking
from .fixtures.fake_ollama import EmbedRefused, FakeOllama, standin_vectors
from .fixtures.memory_writer import fact_text
from .memory_eval import EMBED_MODEL, write_settings

pytestmark = pytest.mark.processes  # every test here starts a process

FIXTURES = Path(__file__).parent / "fixtures"
# `python memory_writer.py ARGS` run from tests/fixtures, its run handed to the suite's fork
# server (forking.py), which has diana's runtime imported: each writer is still a process
# of its own on the shared database, without a second and a half of imports each.
WRITER = (
    "import runpy; from forking import hand_over; hand_over(module='memory_writer'); "
    "runpy.run_module('memory_writer', run_name='__main__', alter_sys=True)"
)
WRITERS = 4
SAVES = 25  # by each writer
OWN_SAVES = 15  # by the runtime in the test's process


FTS_LOOKUP = "SELECT rowid FROM facts_fts WHERE facts_fts MATCH ?"


def own_word(text: str) -> str:
    """The word only this fact holds, as an FTS5 string (see memory_writer.fact_text)."""
    return '"' + text.split()[1].rstrip(":") + '"'


class SlowFlakyEmbedder:
    """The stand-in vectors, a little slow (so embeddings in different processes overlap), and
    refusing each "deferred" fact the first time it is asked for (so it is left to a backfill,
    which every process runs)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> list[list[float]]:
        time.sleep(0.01)  # fixed wait: the model's work, so processes overlap
        with self._lock:
            fresh = [t for t in texts if t.endswith("deferred") and t not in self.refused]
            self.refused.update(fresh)
        if fresh:
            raise EmbedRefused("model runner has unexpectedly stopped")
        return standin_vectors(texts)


async def start_writer(config_dir: Path, data_dir: Path, name: str) -> asyncio.subprocess.Process:
    await asyncio.to_thread(forking.wait_ready)  # (it imports diana first, once a worker)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(config_dir),
        str(data_dir),
        name,
        str(SAVES),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=FIXTURES,
    )
    assert process.stdout is not None
    ready = await process.stdout.readline()
    assert ready == b"ready\n", ready + await process.stderr.read()  # type: ignore[union-attr]
    return process


async def test_processes_saving_and_forgetting_at_once_store_and_embed_each_fact_once(
    config_dir: Path, data_dir: Path
) -> None:
    embedder = SlowFlakyEmbedder()
    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL], embedder=embedder) as fake:
        write_settings(config_dir, fake.url)
        runtime = await Runtime.open(
            Profile.APP.but(servers="none", chat=False, share=False, watch=False),
            config_dir,
            data_dir,
            clock=stepping_clock(),
        )
        try:
            writers = [await start_writer(config_dir, data_dir, f"w{n}") for n in range(WRITERS)]
            for process in writers:
                assert process.stdin is not None
                process.stdin.write(b"go\n")
                await process.stdin.drain()

            memory = runtime.memory
            saved: dict[int, str] = {}
            forgot: list[int] = []
            finished = asyncio.gather(*(p.communicate() for p in writers))
            for n in range(OWN_SAVES):
                fact = (await memory.save(fact_text("main", n), ["race", "main"])).fact
                saved[fact.id] = fact.content
                await memory.backfill()
            for (out, err), process in zip(await finished, writers, strict=True):
                assert process.returncode == 0, err.decode()
                report = json.loads(out)
                more = {int(i): text for i, text in report["saved"].items()}
                assert not set(more) & set(saved)  # no id given to two facts
                saved |= more
                forgot += report["forgot"]
            await memory.backfill()  # what the writers left refused at their end
        finally:
            await runtime.close()

    assert len(saved) == WRITERS * SAVES + OWN_SAVES
    assert len(forgot) == len(set(forgot)) and set(forgot) <= set(saved)
    assert len(forgot) >= WRITERS * 4  # own and others' facts were forgotten
    kept = {i: text for i, text in saved.items() if i not in forgot}

    with sqlite3.connect(data_dir / "diana.db") as db:
        facts = dict(db.execute("SELECT id, content FROM facts"))
        vectors = db.execute("SELECT fact_id, model FROM fact_vectors").fetchall()
        claims = db.execute("SELECT fact_id, owner FROM fact_embedding_claims").fetchall()
        # Each fact's own word ("w2n7"), looked up in the full-text index itself.
        indexed = {
            i: [r[0] for r in db.execute(FTS_LOOKUP, (own_word(text),))]
            for i, text in saved.items()
        }
        db.execute("INSERT INTO facts_fts(facts_fts) VALUES ('integrity-check')")

    assert facts == kept  # every fact saved is there once, unless forgotten
    assert sorted(vectors) == sorted((i, EMBED_MODEL) for i in kept)
    assert indexed == {i: ([i] if i in kept else []) for i in saved}
    assert claims == []
    # Each fact's text went to the embedding model once: never embedded by two processes.
    # (A refused request embedded nothing.)
    embedded = Counter(text for model, text in fake.embedded_by if model == EMBED_MODEL)
    assert {t: embedded[t] for t in kept.values() if embedded[t] != 1} == {}
    assert {t: embedded[t] for t in saved.values() if embedded[t] > 1} == {}
    assert len(embedder.refused) >= WRITERS * 5  # the backfills had facts to share out
