"""The attack bench's family of `memory_cases()`."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from ..cases import ALLOW_ALL, ROOT, TITLE, Case, Ctx, Run, shown
from ..configs import base

FORGOTTEN_FACT = "The spare key hides under the zanzibar flowerpot"


FORGOTTEN_WORDS = (FORGOTTEN_FACT, "zanzibar", "flowerpot")  # as the full-text index keeps them


HUGE_NUMBER = "99999999999999999999999"


def fake_ollama(ctx: Ctx, embedder: Callable[[list[str]], list[list[float]]] | None = None) -> Any:
    """A fake Ollama on 127.0.0.1 (tests/fixtures/fake_ollama.py) serving the chat model and
    all-minilm, stopped when the case ends; the case's settings point at it."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.fixtures.fake_ollama import FakeOllama, standin_vectors

    fake = FakeOllama(models=["attack", "all-minilm"], embedder=embedder or standin_vectors)
    fake.start()
    ctx.cleanups.append(fake.stop)
    ctx.state["ollama"] = fake
    base(ctx, policy=ALLOW_ALL, llm={"host": fake.url})
    return fake


def stored_vectors(ctx: Ctx) -> list[list[float]]:
    try:
        with contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=2)) as db:
            blobs = [bytes(r[0]) for r in db.execute("SELECT vector FROM fact_vectors")]
    except sqlite3.Error:
        return []
    return [array_of_floats(blob) for blob in blobs]


def array_of_floats(blob: bytes) -> list[float]:
    from array import array

    values = array("f")
    values.frombytes(blob[: len(blob) // 4 * 4])
    return list(values)


def only_sound_vectors(ctx: Ctx, run: Run) -> list[str]:
    """Every stored vector finite, not all zeros, of one length; what was printed as JSON
    is JSON (no NaN, no Infinity)."""
    import math

    found = []
    vectors = stored_vectors(ctx)
    if any(not all(map(math.isfinite, v)) for v in vectors):
        found.append("a vector with NaN or Infinity stored as embedded")
    if any(v and not any(v) for v in vectors) or any(not v for v in vectors):
        found.append("an empty or all-zero vector stored as embedded")
    if len({len(v) for v in vectors}) > 1:
        found.append(f"vectors of {len({len(v) for v in vectors})} lengths stored for one model")
    for r in ctx.runs:
        if "--json" in r.args and r.rc == 0:
            try:
                json.loads(r.out, parse_constant=no_constant)
            except ValueError as exc:
                found.append(f"`{shown(r.args)[:40]}` printed invalid JSON ({exc})")
    return found


def no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def forgotten_everywhere(ctx: Ctx, run: Run) -> list[str]:
    """The forgotten fact's text and indexed words in no byte of diana.db or its -wal, and
    not in what `diana log --json` prints."""
    found = []
    for path in sorted(ctx.data.glob("diana.db*")):
        try:
            content = path.read_bytes()
        except OSError:
            continue
        for word in FORGOTTEN_WORDS:
            if word.encode() in content:
                found.append(f"forgotten {word!r} still in {path.name}")
                break
    logged = ctx.diana("log", "--json", "--limit", "100")
    if FORGOTTEN_FACT.encode() in logged.out:
        found.append("forgotten fact still in `diana log`")
    return found


def saved_then_searched(ctx: Ctx) -> None:
    fake_ollama(ctx)
    fact = json.dumps({"content": FORGOTTEN_FACT, "tags": ["keys"]})
    ctx.diana("call", "save_fact", "--args", fact, want=(0,))
    query = json.dumps({"query": "where does the spare key hide"})
    ctx.diana("call", "search_memory", "--args", query, want=(0,))


def saved_searched_forgotten(ctx: Ctx) -> None:
    saved_then_searched(ctx)
    ctx.diana("memory", "forget", "1", want=(0,))


def with_embedder(
    embedder: Callable[[list[str]], list[list[float]]], first: bool = False
) -> Callable[[Ctx], object]:
    """A fake Ollama whose embed answers with ``embedder``'s vectors (after one sound fact
    when ``first``), and a fact saved through it."""

    def setup(ctx: Ctx) -> None:
        fake = fake_ollama(ctx)
        if first:
            ctx.diana("call", "save_fact", "--args", '{"content": "Ada prefers tea"}', want=(0,))
        fake.embedder = embedder
        fact = json.dumps({"content": "Ada's cat is called Miso"})
        ctx.diana("call", "save_fact", "--args", fact, "--json", want=(0,))

    return setup


def many_unembedded(ctx: Ctx) -> None:
    """2,000 facts written while nothing could embed them, then a fake Ollama."""
    ctx.diana("memory", "list", want=(0,))  # the database, made by diana
    with contextlib.closing(sqlite3.connect(ctx.data / "diana.db", timeout=5)) as db:
        db.executemany(
            "INSERT INTO facts (content, tags, metadata, source, created_at) "
            "VALUES (?, '', '{}', 'bench', '2026-01-01T00:00:00+00:00')",
            [(f"Filler fact {n} about gardening and roses",) for n in range(2000)],
        )
        db.commit()
    fake_ollama(ctx)


def embedded_at_most(texts: int) -> Callable[[Ctx, Run], list[str]]:
    def check(ctx: Ctx, run: Run) -> list[str]:
        fake = ctx.state.get("ollama")
        embedded = len(fake.embedded) if fake is not None else 0
        if embedded > texts:
            return [f"a search embedded {embedded} texts before answering (at most {texts})"]
        return []

    return check


def memory_stopped(ctx: Ctx) -> None:
    fake = fake_ollama(ctx)
    fact = json.dumps({"content": "The user's car is a blue Honda Civic"})
    ctx.diana("call", "save_fact", "--args", fact, want=(0,))
    ctx.diana("agents", "stop", "memory", want=(0,))
    fake.add({"content": "I do not know what you drive."})


def nothing_recalled(ctx: Ctx, run: Run) -> list[str]:
    fake = ctx.state.get("ollama")
    requests = [r for r in fake.requests if not r.get("format")] if fake is not None else []
    if not requests:
        return ["the model was never asked"]
    fact = "The user's car is a blue Honda Civic"
    if any(fact in json.dumps(r, ensure_ascii=False) for r in requests):
        return ["a stopped memory's fact was sent to the model"]
    return []


def memory_cases() -> list[Case]:
    import math

    def nan(texts: list[str]) -> list[list[float]]:
        return [[math.nan] * 64 for _ in texts]

    def infinity(texts: list[str]) -> list[list[float]]:
        return [[math.inf, *([0.1] * 63)] for _ in texts]

    def huge(texts: list[str]) -> list[list[float]]:
        return [[1e308, *([1e300] * 63)] for _ in texts]

    def short(texts: list[str]) -> list[list[float]]:
        return [[0.6, 0.8, 0.0] for _ in texts]

    def empty(texts: list[str]) -> list[list[float]]:
        return [[] for _ in texts]

    def zeros(texts: list[str]) -> list[list[float]]:
        return [[0.0] * 64 for _ in texts]

    def endless(texts: list[str]) -> list[list[float]]:
        return [[0.001] * 100_000 for _ in texts]

    cases = [
        Case(
            "memory",
            "forget, then scan diana.db, its -wal and `diana log`",
            ["memory", "forget", "1"],
            ok=(0,),
            setup=saved_then_searched,
            verify=forgotten_everywhere,
        ),
        Case(
            "memory",
            "forget, then log --json",
            ["log", "--json"],
            ok=(0,),
            setup=saved_searched_forgotten,
            verify=forgotten_everywhere,
        ),
        Case(
            "memory",
            "forget, then search the forgotten words",
            ["memory", "search", "zanzibar flowerpot", "--json"],
            ok=(0,),
            setup=saved_searched_forgotten,
            verify=forgotten_everywhere,
        ),
        Case(
            "memory",
            "stopped, then ask (the model must not get its facts)",
            ["ask", "Tell me about my Honda Civic"],
            ok=(0,),
            setup=memory_stopped,
            verify=nothing_recalled,
        ),
        Case(
            "memory",
            "search over 2,000 facts not embedded",
            ["memory", "search", "roses", "--json"],
            ok=(0,),
            setup=many_unembedded,
            verify=embedded_at_most(40),
        ),
    ]
    vectors: list[tuple[str, Callable[[list[str]], list[list[float]]], bool]] = [
        ("NaN", nan, False),
        ("Infinity", infinity, False),
        ("huge numbers (1e308)", huge, False),
        ("3 numbers after 64", short, True),
        ("an empty vector", empty, False),
        ("all zeros", zeros, False),
        ("100,000 numbers", endless, False),
    ]
    for name, embedder, first in vectors:
        cases.append(
            Case(
                "memory",
                f"embed answers {name}: search --json",
                ["memory", "search", "cat", "--json"],
                ok=(0,),
                setup=with_embedder(embedder, first),
                verify=only_sound_vectors,
            )
        )
    bad: list[tuple[str, list[str | bytes], bool]] = [
        ("forget a huge id", ["memory", "forget", HUGE_NUMBER], True),
        ("show a huge id", ["memory", "show", HUGE_NUMBER], False),
        ("forget a negative id", ["memory", "forget", "-1"], False),
        ("forget id 0", ["memory", "forget", "0"], False),
        ("forget a non-numeric id", ["memory", "forget", "abc"], False),
        ("forget a 5,000-digit id", ["memory", "forget", "9" * 5000], False),
        ("forget an id with escapes", ["memory", "forget", f"{TITLE}1"], False),
        ("list --limit huge", ["memory", "list", "--limit", HUGE_NUMBER], False),
        ("list --limit -1", ["memory", "list", "--limit=-1"], False),
        ("list --limit 0", ["memory", "list", "--limit", "0"], False),
        ("list --limit abc", ["memory", "list", "--limit", "abc"], False),
        ("search --limit huge", ["memory", "search", "tea", "--limit", HUGE_NUMBER], False),
        ("search --limit -5", ["memory", "search", "tea", "--limit=-5"], False),
    ]
    for name, args, marked in bad:
        cases.append(
            Case("memory", name, args, setup=lambda ctx: base(ctx, policy=ALLOW_ALL), short=marked)
        )
    return cases
