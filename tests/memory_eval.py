"""How well memory search finds the labelled set's facts (tests/fixtures/memory_set.py), through
the real parts: a Runtime on a SQLite file, the ollama client, and the fake Ollama answering
/api/embed with all-MiniLM-L6-v2 in numpy. Shared by the tests and bench/bench_memory.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from diana.core.memory import SearchResult
from diana.core.runtime import Runtime

from .fixtures.fake_ollama import FakeOllama
from .fixtures.memory_set import CASES, NO_ANSWER
from .fixtures.minilm import shared

EMBED_MODEL = "all-minilm"


@contextmanager
def minilm_ollama() -> Iterator[FakeOllama]:
    """A fake Ollama with the chat model and all-minilm installed; vectors from MiniLM."""
    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL], embedder=shared().embed) as fake:
        yield fake


def write_settings(config_dir: Path, host: str, **memory: object) -> None:
    """settings.json pointing the chat and memory at ``host``; the vault under config_dir."""
    settings = {
        "obsidian": {"vault": str(config_dir / "vault")},
        "llm": {"host": host},
        "memory": {"embed_model": EMBED_MODEL, **memory},
    }
    (config_dir / "settings.json").write_text(json.dumps(settings))


@dataclass
class Ranks:
    """Where each kind of question's own fact came (1 is first; None: not in the results),
    and what the questions with no answer got."""

    paraphrase: list[int | None] = field(default_factory=list)
    lexical: list[int | None] = field(default_factory=list)
    keyword: list[int | None] = field(default_factory=list)
    no_answer: list[SearchResult] = field(default_factory=list)
    recalled: list[bool] = field(default_factory=list)  # a paraphrase's fact given to the chat
    others: list[int] = field(default_factory=list)  # other facts given with a paraphrase
    modes: set[str] = field(default_factory=set)

    def recall_rates(self) -> tuple[float, float, float]:
        """What the chat is given: the share of paraphrases whose fact it gets, the share of
        questions with no answer that get some fact, and other facts per paraphrase."""
        return (
            sum(self.recalled) / len(self.recalled),
            sum(1 for r in self.no_answer if r.hits) / len(self.no_answer),
            sum(self.others) / len(self.others),
        )

    @staticmethod
    def rate(ranks: list[int | None], within: int) -> float:
        return sum(1 for r in ranks if r is not None and r <= within) / len(ranks)


async def save_all(runtime: Runtime) -> dict[str, int]:
    """Every fact of the set, saved through the save_fact tool; fact text → id."""
    ids = {}
    for case in CASES:
        result = await runtime.orchestrator.execute("save_fact", {"content": case.fact})
        assert result.success, result.error
        ids[case.fact] = int(result.data["id"])
    return ids


async def rank_all(runtime: Runtime, ids: dict[str, int], limit: int = 5) -> Ranks:
    ranks = Ranks()

    async def rank(question: str, fact: str) -> int | None:
        found = await runtime.memory.search(question, limit)
        ranks.modes.add(found.mode)
        order = [hit.fact.id for hit in found.hits]
        return order.index(ids[fact]) + 1 if ids[fact] in order else None

    for case in CASES:
        ranks.paraphrase.append(await rank(case.paraphrase, case.fact))
        given = await runtime.memory.recall(case.paraphrase)
        given_ids = [hit.fact.id for hit in given.hits]
        ranks.recalled.append(ids[case.fact] in given_ids)
        ranks.others.append(sum(1 for i in given_ids if i != ids[case.fact]))
        if case.lexical:
            ranks.lexical.append(await rank(case.lexical, case.fact))
        if case.keyword:
            ranks.keyword.append(await rank(case.keyword, case.fact))
    for question in NO_ANSWER:
        ranks.no_answer.append(await runtime.memory.recall(question))
    return ranks
