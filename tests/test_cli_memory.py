"""`diana memory`: list, search, show and forget facts from the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from diana.core.memory.fact_store import BACKFILL_BATCH
from diana.core.runtime import Profile, Runtime

from .commands import diana_here, diana_here_async
from .conftest import stepping_clock
from .fixtures.fake_ollama import FakeOllama
from .memory_eval import EMBED_MODEL, write_settings


def test_memory_lists_searches_shows_and_forgets_facts(config_dir: Path, data_dir: Path) -> None:
    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL]) as fake:
        write_settings(config_dir, fake.url)
        for content in ("Ada prefers tea", "Ada's cat is called Miso"):
            args = json.dumps({"content": content, "tags": ["ada"]})
            assert (
                diana_here(config_dir, data_dir, "call", "save_fact", "--args", args).returncode
                == 0
            )
        listed = diana_here(config_dir, data_dir, "memory", "--json")
        assert [f["content"] for f in json.loads(listed.stdout)] == [
            "Ada's cat is called Miso",
            "Ada prefers tea",
        ]
        found = json.loads(
            diana_here(config_dir, data_dir, "memory", "search", "tea", "--json").stdout
        )
        assert found["mode"] == "hybrid" and found["results"][0]["content"] == "Ada prefers tea"
        tea = found["results"][0]["id"]
        shown = diana_here(config_dir, data_dir, "memory", "show", str(tea))
        assert f"fact {tea}: Ada prefers tea" in shown.stdout and "embedded yes" in shown.stdout
        forgot = diana_here(config_dir, data_dir, "memory", "forget", str(tea))
        assert forgot.stdout == f"forgot fact {tea}: Ada prefers tea\n"
        again = diana_here(config_dir, data_dir, "memory", "show", str(tea))
        assert again.returncode == 2
        assert again.stderr == f"diana: no fact {tea} in memory (diana memory list shows them)\n"
        bad = diana_here(config_dir, data_dir, "memory", "forget", "x")
        assert (bad.returncode, bad.stderr) == (2, "diana: a fact id is a number, not 'x'\n")


HUGE = "99999999999999999999999"
ID_RANGE = "a fact id is a number from 1 to 9223372036854775807"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("forget", HUGE), f"diana: {ID_RANGE}, not '{HUGE}'\n"),
        (("show", HUGE), f"diana: {ID_RANGE}, not '{HUGE}'\n"),
        (("forget", "-3"), f"diana: {ID_RANGE}, not '-3'\n"),
        (("show", "0"), f"diana: {ID_RANGE}, not '0'\n"),
        (("forget", "1" * 60), f"diana: {ID_RANGE}, not '{'1' * 40}…'\n"),
        (("list", "--limit", HUGE), f"diana: --limit must be between 1 and 100,000, not {HUGE}\n"),
        (("list", "--limit", "0"), "diana: --limit must be between 1 and 100,000, not 0\n"),
        (("list", "--limit=-5"), "diana: --limit must be between 1 and 100,000, not -5\n"),
        (
            ("search", "tea", "--limit", HUGE),
            f"diana: --limit must be between 1 and 100,000, not {HUGE}\n",
        ),
    ],
)
def test_ids_and_limits_out_of_range_are_refused_in_one_line(
    config_dir: Path, data_dir: Path, args: tuple[str, ...], said: str
) -> None:
    write_settings(config_dir, "http://127.0.0.1:9")
    refused = diana_here(config_dir, data_dir, "memory", *args)
    assert (refused.returncode, refused.stderr, refused.stdout) == (2, said, "")


def test_json_never_holds_nan_when_ollama_answers_nan(config_dir: Path, data_dir: Path) -> None:
    def nan(texts: list[str]) -> list[list[float]]:
        return [[math.nan] * 8 for _ in texts]

    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL], embedder=nan) as fake:
        write_settings(config_dir, fake.url)
        args = json.dumps({"content": "Ada prefers tea"})
        saved = diana_here(config_dir, data_dir, "call", "save_fact", "--args", args, "--json")
        assert saved.returncode == 0, saved.stderr
        assert json.loads(saved.stdout, parse_constant=refuse)["data"]["embedded"] is False
        listed = diana_here(config_dir, data_dir, "memory", "list")
        assert listed.stdout.startswith("1 facts, 0 embedded with all-minilm\n")
        found = diana_here(config_dir, data_dir, "memory", "search", "tea", "--json")
        shown = json.loads(found.stdout, parse_constant=refuse)
        assert shown["mode"] == "lexical" and "NaN or Infinity" in shown["why"]
        assert [r["content"] for r in shown["results"]] == ["Ada prefers tea"]


def refuse(constant: str) -> None:
    raise AssertionError(f"{constant} printed as JSON")


async def test_search_answers_at_once_embedding_one_batch_of_the_facts_not_embedded(
    config_dir: Path, data_dir: Path
) -> None:
    with FakeOllama(models=["qwen3:30b-a3b"]) as fake:  # no embedding model: nothing embedded
        write_settings(config_dir, fake.url)
        async with await Runtime.open(
            Profile.APP.but(servers="none", chat=False, share=False, watch=False),
            config_dir,
            data_dir,
            clock=stepping_clock(),
        ) as runtime:
            for n in range(3 * BACKFILL_BATCH):
                await runtime.memory.save(f"Filler fact number {n} about gardening")
            last = await runtime.memory.save("The user's sailing holiday goes to Zanzibar")
    with FakeOllama(models=["qwen3:30b-a3b", EMBED_MODEL]) as fake:
        write_settings(config_dir, fake.url)
        found = await diana_here_async(
            config_dir, data_dir, "memory", "search", "zanzibar trip", "--json"
        )
        shown = json.loads(found.stdout)
        # One batch and the question were embedded, not every fact.
        assert len(fake.embedded) == BACKFILL_BATCH + 1
        assert shown["why"] == (
            f"{2 * BACKFILL_BATCH + 1} facts are not embedded yet (found by words only)"
        )
        # The fact not embedded is found by the word it holds, merged with the meaning's hits.
        matched = {r["id"]: r["matched"] for r in shown["results"]}
        assert matched[last.fact.id] == ["words"]
        assert "meaning" in matched[1]
