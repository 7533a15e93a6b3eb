"""Memory: how well a search finds a fact, how long a search and a save take.

Run from the repository root:  .venv/bin/python bench/bench_memory.py
Every figure is measured in this run; nothing is asserted.

(a) The labelled set (tests/fixtures/memory_set.py) saved through the save_fact tool of a
Runtime on a SQLite file, with the fake Ollama answering /api/embed with all-MiniLM-L6-v2 (in
numpy, tests/fixtures/minilm.py) through the real ollama client: where each question's fact
comes, and what the chat is given (the recall rule, and a cosine of 0.30 alone beside it).

(b) Search latency at 1,000 and 10,000 facts, without the question's embedding (the question's
vector is computed before the clock starts): the facts are saved through Memory.save, their
vectors (384 dimensions, like all-minilm's) from the fake Ollama's deterministic stand-in,
computed in this process. The median of SEARCHES searches, each a different question, with
numpy and in plain Python, on the clock and in CPU time; and the first search of a process,
which reads every vector, and its second (in plain Python, the first sums every vector exactly
and the second makes each vector's bytes: see core/memory/vectors.py).

(c) Save latency: Memory.save with its embedding through the fake Ollama over HTTP, and with
the vector computed in this process (what the database costs).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diana.core.memory import Memory  # noqa: E402
from diana.core.memory import fact_store as store  # noqa: E402
from diana.core.memory.embedding import Role, unit  # noqa: E402
from diana.core.memory.lexical import content_words  # noqa: E402
from diana.core.runtime import Profile, Runtime  # noqa: E402

from tests.conftest import stepping_clock  # noqa: E402
from tests.fixtures.fake_ollama import FakeOllama, standin_vectors  # noqa: E402
from tests.fixtures.memory_set import CASES  # noqa: E402
from tests.memory_eval import Ranks, minilm_ollama, rank_all, save_all, write_settings  # noqa: E402

SIZES = (1_000, 10_000)
GOALS_MS = {1_000: 20.0, 10_000: 100.0}
SEARCHES = 21
DIMENSIONS = 384  # all-minilm's
SAVES = 50


class InProcessEmbedder:
    """The stand-in vectors at all-minilm's size, computed here; each text's vector kept, so
    a question's embedding costs nothing once it has been asked."""

    model = "standin-384"

    def __init__(self) -> None:
        self._known: dict[str, list[float]] = {}

    async def embed(self, texts: Sequence[str], role: Role) -> list[list[float]]:
        fresh = [t for t in texts if t not in self._known]
        for text, vector in zip(fresh, standin_vectors(fresh, DIMENSIONS), strict=True):
            self._known[text] = unit(vector)
        return [self._known[t] for t in texts]

    async def close(self) -> None:
        pass


async def open_runtime(root: Path, host: str) -> Runtime:
    config = root / "config"
    config.mkdir(parents=True)
    (config / "mcp-servers.json").write_text("[]")
    write_settings(config, host)
    return await Runtime.open(
        Profile.APP.but(servers="none", chat=False, share=False, watch=False),
        config,
        root / "data",
        clock=stepping_clock(),
    )


# -- (a) the labelled set ------------------------------------------------------------------


async def labelled(root: Path, host: str) -> tuple[Ranks, tuple[float, float, float]]:
    runtime = await open_runtime(root, host)
    try:
        ids = await save_all(runtime)
        ranks = await rank_all(runtime, ids)
        margin = store.RECALL_MARGIN
        store.RECALL_MARGIN = -1.0  # the cosine alone, for comparison
        try:
            alone = (await rank_all(runtime, ids)).recall_rates()
        finally:
            store.RECALL_MARGIN = margin
        return ranks, alone
    finally:
        await runtime.close()


# -- (b) and (c) latency -------------------------------------------------------------------


def synthetic_facts(count: int, rng: random.Random) -> list[str]:
    """Facts made of the labelled facts' own words, so a question's words match many."""
    vocabulary = sorted({w for case in CASES for w in content_words(case.fact)})
    return [f"The user's {' '.join(rng.sample(vocabulary, 6))} note {n}." for n in range(count)]


def questions() -> list[str]:
    asked = [c.paraphrase for c in CASES[: SEARCHES // 2]]
    asked += [c.lexical for c in CASES if c.lexical][: SEARCHES - len(asked)]
    return asked


async def search_ms(memory: Memory, asked: list[str]) -> tuple[float, float]:
    """The median milliseconds of one search per question (their vectors already known): on
    the clock, and of this process's CPU time (what the search costs on a machine busy with
    other work, where the clock also counts the time other processes had the CPU)."""
    clock, cpu = [], []
    for question in asked:
        start, started = time.perf_counter(), time.process_time()
        await memory.search(question)
        clock.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - started) * 1000)
    return statistics.median(clock), statistics.median(cpu)


async def latency(root: Path) -> tuple[dict[int, dict[str, float]], float]:
    """Search milliseconds by size and way; the median milliseconds of a save (in-process
    vectors) while the set was being saved."""
    runtime = await open_runtime(root, "http://127.0.0.1:9")  # never asked: see embedder
    embedder = InProcessEmbedder()
    asked = questions()
    await embedder.embed(asked, "query")
    rng = random.Random(7)
    figures: dict[int, dict[str, float]] = {}
    saves: list[float] = []
    try:
        writer = Memory(runtime.db, embedder, runtime.clock)
        saved = 0
        for size in SIZES:
            for text in synthetic_facts(size - saved, rng):
                start = time.perf_counter()
                await writer.save(text, ["bench"])
                saves.append((time.perf_counter() - start) * 1000)
            saved = size
            figures[size] = {}
            for way, use_numpy in (("numpy", True), ("plain Python", False)):
                memory = Memory(runtime.db, embedder, runtime.clock, use_numpy=use_numpy)
                start = time.perf_counter()
                await memory.search(asked[0])
                figures[size][f"first search, {way}"] = (time.perf_counter() - start) * 1000
                start = time.perf_counter()
                await memory.search(asked[1])
                figures[size][f"second search, {way}"] = (time.perf_counter() - start) * 1000
                clock, cpu = await search_ms(memory, asked)
                figures[size][way] = clock
                figures[size][f"{way}, CPU time"] = cpu
            print(f"  ({size:,} facts measured)", flush=True)
    finally:
        await runtime.close()
    return figures, statistics.median(saves)


async def save_over_http(root: Path, host: str) -> float:
    runtime = await open_runtime(root, host)
    try:
        taken = []
        for n in range(SAVES):
            start = time.perf_counter()
            saved = await runtime.memory.save(f"The user's bench fact number {n} is kept here")
            taken.append((time.perf_counter() - start) * 1000)
            assert saved.why is None, saved.why
        return statistics.median(taken)
    finally:
        await runtime.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("(a) the labelled set, all-MiniLM-L6-v2 (its vectors computed in numpy) ...")
        with minilm_ollama() as fake:
            ranks, alone = asyncio.run(labelled(Path(tmp, "labelled"), fake.url))
        print(f"  {len(CASES)} facts; questions asked with search(limit=5)")
        print(f"  paraphrase (no shared word) first:  {Ranks.rate(ranks.paraphrase, 1):6.1%}")
        print(f"  paraphrase in the top three:        {Ranks.rate(ranks.paraphrase, 3):6.1%}")
        print(f"  in the fact's own words, first:     {Ranks.rate(ranks.lexical, 1):6.1%}")
        print(f"  keyword or identifier, first:       {Ranks.rate(ranks.keyword, 1):6.1%}")
        print(
            "  what the chat is given (recall)      paraphrase's fact  no-answer gets one"
            "  other facts per paraphrase"
        )
        for rule, (given, no_answer, others) in (
            (
                f"cosine >= {store.RECALL_SIMILARITY} and +{store.RECALL_MARGIN} over the "
                f"next {store.RECALL_CROWD}",
                ranks.recall_rates(),
            ),
            (f"cosine >= {store.RECALL_SIMILARITY} alone", alone),
        ):
            print(f"    {rule:35} {given:10.1%} {no_answer:17.1%} {others:18.2f}")
        print(f"  ({len(ranks.no_answer)} questions no fact answers)")

        print("(b) search latency, without the question's embedding ...")
        figures, save_db_ms = asyncio.run(latency(Path(tmp, "latency")))
        print(
            f"  median of {len(questions())} searches, ms (load average "
            f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)"
        )
        for size, ways in figures.items():
            goal = GOALS_MS[size]
            for way, ms in ways.items():
                mark = (
                    ""
                    if way.startswith(("first", "second"))
                    else f"  (goal <= {goal:.0f} ms) {'met' if ms <= goal else 'NOT met'}"
                )
                print(f"  {size:6,} facts, {way:26} {ms:8.2f}{mark}")

        print("(c) save latency ...")
        with FakeOllama(models=["qwen3:30b-a3b", "all-minilm"]) as fake:
            over_http = asyncio.run(save_over_http(Path(tmp, "saves"), fake.url))
        print(f"  median save, embedded by the fake Ollama over HTTP: {over_http:7.2f} ms")
        print(f"  median save, vector computed in this process:       {save_db_ms:7.2f} ms")


if __name__ == "__main__":
    main()
