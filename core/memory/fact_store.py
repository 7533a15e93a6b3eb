"""The facts memory: what the assistant remembers, found by its words and by its meaning.

A fact is a row of `facts` (text, tags, a metadata object, where it came from, when), a
row of the full-text index `facts_fts`, and, once embedded, a row of `fact_vectors`
(the embedding model, its dimensions, a float32 vector). A search ranks the facts by words
(FTS5 bm25, see lexical.py) and by meaning (cosine to the question's vector), and fuses
the two rankings by reciprocal rank. Without a vector (Ollama down, the model not pulled,
a fact not embedded yet) a fact is still found by its words, and the result says so.

Several processes share the file: a fact is embedded by the one process that claimed it
(`fact_embedding_claims`, in the same transaction that found it missing), so none is
embedded twice; a claim left by a process that died lapses after CLAIM_LAPSE seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import aiosqlite

from ..approvals.proposal_store import scrub_settled
from ..storage.db import Database, is_row_id
from ..storage.execution_log import scrub_calls
from ..system.clock import Clock
from ..system.telemetry import StructuredLog
from .embedding import Embedder, EmbeddingUnavailable
from .lexical import content_words, match_all, match_any
from .vectors import VectorIndex, pack

CANDIDATES = 50  # facts taken from each ranking before they are fused
RRF_K = 60  # reciprocal rank fusion: 1 / (RRF_K + rank)
CLAIM_LAPSE = 120.0  # seconds after which a claim to embed a fact is taken as abandoned
CLOSE_WAIT = 1.0  # seconds closing waits for the batch being embedded before cancelling it
BACKFILL_BATCH = 32
# The chat is given a fact only when it holds every content word of the message, or is close
# in meaning to it (cosine, all-MiniLM-L6-v2, at least RECALL_SIMILARITY) AND stands out from
# the facts nearest after the first (at least RECALL_MARGIN above the mean cosine of those
# ranked 2nd to RECALL_CROWD + 1st). A cosine alone is no relevance score: a short question
# is close to every fact about the person. Measured on tests/fixtures/memory_set.py (105
# paraphrased questions, 40 that no fact answers, most of them about something a fact is
# about): the cosine alone at 0.30 gives the chat 91% of the paraphrases' facts, and a fact
# to 75% of the questions with no answer, with 0.87 other facts per question; with the
# margin, 89%, 57% and 0.29. No rule measured separates the two better: it still errs
# towards giving the model a fact that does not apply, which it is told to ignore.
RECALL_SIMILARITY = 0.30
RECALL_MARGIN = 0.08
RECALL_CROWD = 5
RECALL_LIMIT = 3
METADATA_LIMIT = 4096  # characters of a fact's metadata, as JSON
MEMORY_AGENT = "memory"  # the agent whose tools are the memory's, and whose stop stops recall
FORGOTTEN = "[forgotten]"  # what a forgotten fact's text becomes where the log held it
# A fact as a row, with whether it has a vector of the model (the first parameter).
FACT_SELECT = (
    "SELECT f.id, f.content, f.tags, f.metadata, f.source, f.created_at, "
    "v.fact_id IS NOT NULL AS embedded FROM facts f "
    "LEFT JOIN fact_vectors v ON v.fact_id = f.id AND v.model = ? "
)


@dataclass(frozen=True)
class Fact:
    id: int
    content: str
    tags: list[str]
    metadata: dict[str, Any]
    source: str | None
    created_at: str
    embedded: bool = False  # has a vector of the current model

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Hit:
    """A fact a search found, and how."""

    fact: Fact
    score: float  # fused: higher is better
    similarity: float | None  # cosine to the question; None if not ranked by meaning
    words: bool  # matched by its words
    all_words: bool  # holds every content word of the question

    def as_json(self) -> dict[str, Any]:
        return {
            **self.fact.as_json(),
            "score": round(self.score, 6),
            "similarity": (
                round(self.similarity, 4)
                if self.similarity is not None and math.isfinite(self.similarity)
                else None
            ),
            "matched": [
                m
                for m, on in (("words", self.words), ("meaning", self.similarity is not None))
                if on
            ],
        }


@dataclass(frozen=True)
class SearchResult:
    query: str
    mode: str  # "hybrid" (words and meaning) or "lexical" (words only)
    why: str | None  # what was not searched by meaning, and why
    hits: list[Hit] = field(default_factory=list)
    model: str | None = None

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"query": self.query, "mode": self.mode}
        if self.why:
            shown["why"] = self.why
        shown["model"] = self.model
        shown["results"] = [h.as_json() for h in self.hits]
        return shown


@dataclass(frozen=True)
class Saved:
    fact: Fact
    why: str | None  # why it is not embedded yet (None: it is)


@dataclass(frozen=True)
class MemoryStatus:
    model: str
    facts: int
    embedded: int  # facts with a vector of the current model
    problem: str | None  # the last reason embedding failed, if the last try failed


class Memory:
    """DIANA's facts: save, search, list, show and forget, from any process."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        clock: Clock,
        *,
        log: StructuredLog | None = None,
        use_numpy: bool = True,
        before_forget: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._db = db
        self._before_forget = before_forget  # writes the execution log's queued calls
        self.embedder = embedder
        self._clock = clock
        self._log = log
        self._owner = uuid.uuid4().hex  # this process's name on its claims
        self._index = VectorIndex(use_numpy)
        self._backfill: asyncio.Task[int] | None = None
        self._closing = False  # set by close: the background embedding stops between batches
        self.problem: str | None = None  # why the last embedding failed; None once one works

    @property
    def model(self) -> str:
        return self.embedder.model

    # -- saving and forgetting ------------------------------------------------------------

    async def save(
        self,
        content: str,
        tags: Sequence[str] = (),
        *,
        metadata: dict[str, Any] | None = None,
        source: str | None = None,
        at: datetime | None = None,
    ) -> Saved:
        """Store a fact and embed it; a fact that cannot be embedded now is stored all the
        same (found by its words) and embedded later."""
        at = at or self._clock.now()
        meta = json.dumps(metadata or {}, ensure_ascii=False, sort_keys=True)
        if len(meta) > METADATA_LIMIT:
            raise ValueError(
                f"metadata is {len(meta)} characters as JSON; at most {METADATA_LIMIT}"
            )

        async def insert(connection: aiosqlite.Connection) -> int:
            cursor = await connection.execute(
                "INSERT INTO facts (content, tags, metadata, source, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (content, " ".join(tags), meta, source, at.isoformat()),
            )
            assert cursor.lastrowid is not None
            # Claimed as it is written: no other process's backfill embeds it meanwhile.
            await connection.execute(
                "INSERT OR REPLACE INTO fact_embedding_claims (fact_id, owner, claimed_at) "
                "VALUES (?, ?, ?)",
                (cursor.lastrowid, self._owner, time.time()),
            )
            return cursor.lastrowid

        fact_id = await self._db.write(insert)
        why = await self._embed_claimed([(fact_id, content)])
        fact = Fact(
            fact_id, content, list(tags), metadata or {}, source, at.isoformat(), why is None
        )
        return Saved(fact, why)

    async def forget(self, fact_id: int) -> Fact | None:
        """Forget a fact for real; the fact as it was, or None if there is none.

        In one transaction: its row, vector, claim and index entry go (the triggers of
        facts), its text is replaced by FORGOTTEN wherever the execution log holds it (the
        arguments and results of save_fact, search_memory and any other call), and the
        full-text index is merged into one segment, so no page of it keeps the fact's words.
        secure_delete zeroes what was freed; the write-ahead log is then emptied into the
        file (when no other process is reading at that moment: else at its next checkpoint)."""
        if not is_row_id(fact_id):
            return None
        if self._before_forget is not None:
            await self._before_forget()

        async def forget(connection: aiosqlite.Connection) -> Fact | None:
            async with connection.execute(
                FACT_SELECT + "WHERE f.id = ?", (self.model, fact_id)
            ) as cursor:
                row = await cursor.fetchone()
            if row is None:
                return None
            fact = _fact(row)
            await connection.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
            await scrub_calls(connection, fact.content, FORGOTTEN)
            await scrub_settled(connection, fact.content, FORGOTTEN)
            await connection.execute("INSERT INTO facts_fts(facts_fts) VALUES ('optimize')")
            return fact

        fact = await self._db.write(forget)
        self._index.vectors.pop(fact_id, None)
        if fact is not None:
            await self._db.checkpoint()
        return fact

    # -- reading --------------------------------------------------------------------------

    async def get(self, fact_id: int) -> Fact | None:
        if not is_row_id(fact_id):
            return None
        rows = await self._facts("WHERE f.id = ?", (fact_id,))
        return rows[0] if rows else None

    async def recent(
        self, *, limit: int = 50, offset: int = 0, tag: str | None = None
    ) -> list[Fact]:
        """Facts, newest first."""
        where, params = _tag_filter(tag)
        return await self._facts(
            f"{where} ORDER BY f.id DESC LIMIT ? OFFSET ?", (*params, limit, offset)
        )

    async def count(self, tag: str | None = None) -> int:
        where, params = _tag_filter(tag)
        row = await self._db.read_one(f"SELECT count(*) FROM facts f {where}", params)
        return int(row[0]) if row else 0

    async def status(self) -> MemoryStatus:
        row = await self._db.read_one(
            "SELECT (SELECT count(*) FROM facts), "
            "(SELECT count(*) FROM fact_vectors WHERE model = ?)",
            (self.model,),
        )
        facts, embedded = (int(row[0]), int(row[1])) if row else (0, 0)
        return MemoryStatus(self.model, facts, embedded, self.problem)

    async def _facts(self, clause: str, params: Iterable[Any]) -> list[Fact]:
        rows = await self._db.read(FACT_SELECT + clause, (self.model, *params))
        return [_fact(row) for row in rows]

    # -- searching ------------------------------------------------------------------------

    async def search(
        self, query: str, limit: int = 5, *, tag: str | None = None, embed_missing: bool = True
    ) -> SearchResult:
        """The facts best matching ``query``, best first: by words and meaning ("hybrid"),
        or by words alone ("lexical") with ``why``. It answers at once: the facts not
        embedded yet are found by their words, and embedded in the background unless
        ``embed_missing`` is False (a one-shot command, which would not live to finish)."""
        found, _ = await self._search(query, limit, tag, embed_missing)
        return found

    async def _search(
        self, query: str, limit: int, tag: str | None, embed_missing: bool = True
    ) -> tuple[SearchResult, list[float]]:
        """The search, and the cosines of the facts nearest in meaning, nearest first."""
        words = content_words(query)
        lexical, vector = await asyncio.gather(
            self._by_words(words, tag), self._by_meaning(query, tag)
        )
        every, some = lexical
        why: str | None
        if isinstance(vector, str):
            ranked = [*every, *some]
            fused = {fact_id: 1 / (RRF_K + rank) for rank, fact_id in enumerate(ranked, 1)}
            similarity: dict[int, float] = {}
            mode, why = "lexical", vector
        else:
            # A fact with no vector yet cannot be found by meaning: holding only some of
            # the words, it is ranked by them after those holding all.
            unembedded = [i for i in some if i not in self._index.vectors]
            ranked = [*every, *unembedded]
            similarity = dict(vector)
            fused = {}
            for ranking in (ranked, [fact_id for fact_id, _ in vector]):
                for rank, fact_id in enumerate(ranking, 1):
                    fused[fact_id] = fused.get(fact_id, 0.0) + 1 / (RRF_K + rank)
            mode, why = "hybrid", await self._unembedded_why(embed_missing)
        best = sorted(fused, key=lambda i: (-fused[i], i))[:limit]
        facts = {f.id: f for f in await self._facts_by_id(best)}
        matched, held = set(ranked), set(every)
        hits = [
            Hit(facts[i], fused[i], similarity.get(i), i in matched, i in held)
            for i in best
            if i in facts  # forgotten meanwhile
        ]
        cosines = [] if isinstance(vector, str) else [cosine for _, cosine in vector]
        return SearchResult(query, mode, why, hits, self.model), cosines

    async def recall(self, message: str, limit: int = RECALL_LIMIT) -> SearchResult:
        """The few facts relevant enough to give the chat before it answers ``message``:
        holding every content word of it, or close in meaning and standing out from the
        crowd of near facts (see RECALL_MARGIN). No fact saved: nothing is asked of Ollama."""
        if not content_words(message) or await self.count() == 0:
            return SearchResult(message, "hybrid", None, [], self.model)
        found, cosines = await self._search(message, limit, None)
        crowd = cosines[1 : RECALL_CROWD + 1]  # the nearest facts after the first
        floor = RECALL_SIMILARITY
        if crowd:
            floor = max(floor, sum(crowd) / len(crowd) + RECALL_MARGIN)
        kept = [h for h in found.hits if h.all_words or (h.similarity or 0.0) >= floor]
        return SearchResult(message, found.mode, found.why, kept, self.model)

    async def _by_words(self, words: list[str], tag: str | None) -> tuple[list[int], list[int]]:
        """Fact ids by their words: those holding every content word (bm25 order), and
        those holding only some, most words first. A fact sharing one word of four with a
        question ("work") is a weak match: it is offered when nothing is searched by
        meaning, and kept out of the fusion, where it would push the fact the question
        means down."""
        if not words:
            return [], []
        condition, params = _tag_condition(tag)
        sql = (
            "SELECT facts_fts.rowid FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid "
            f"WHERE facts_fts MATCH ? AND {condition} ORDER BY bm25(facts_fts) LIMIT ?"
        )
        every = [r[0] for r in await self._db.read(sql, (match_all(words), *params, CANDIDATES))]
        if len(words) == 1 or len(every) >= CANDIDATES:
            return every, []
        held = set(every)
        some = [
            r[0]
            for r in await self._db.read(sql, (match_any(words), *params, CANDIDATES * 4))
            if r[0] not in held
        ]
        matched = dict.fromkeys(some, 0)
        if some:
            marks = ",".join("?" * len(some))
            for word in words:
                for row in await self._db.read(
                    f"SELECT rowid FROM facts_fts WHERE facts_fts MATCH ? AND rowid IN ({marks})",
                    (match_all([word]), *some),
                ):
                    matched[row[0]] += 1
        some.sort(key=lambda i: -matched[i])  # stable: bm25 order within a count
        return every, some[:CANDIDATES]

    async def _by_meaning(self, query: str, tag: str | None) -> list[tuple[int, float]] | str:
        """Fact ids nearest in meaning, with their cosine; or why there are none."""
        try:
            [vector] = await self.embedder.embed([query], "query")
        except EmbeddingUnavailable as exc:
            self._failed(exc.why)
            return exc.why
        await self._sync_vectors()
        lengths = {len(v) for v in itertools.islice(self._index.vectors.values(), 1)}
        if lengths and lengths != {len(vector)}:
            why = (
                f'embedding model "{self.model}" gave the question a vector of '
                f"{len(vector):,} numbers where the facts have {lengths.pop():,}"
            )
            self._failed(why)
            return why
        self.problem = None
        among = None if tag is None else set(await self._ids_tagged(tag))
        return self._index.rank(vector, CANDIDATES, among)

    async def _unembedded_why(self, embed_missing: bool) -> str | None:
        """Facts not embedded yet are found by their words only: said, and (unless not
        ``embed_missing``) set going."""
        missing = await self.count() - len(self._index)
        if missing <= 0:
            return None
        facts = "1 fact is" if missing == 1 else f"{missing:,} facts are"
        if not embed_missing:
            return f"{facts} not embedded yet (found by words only)"
        self.start_backfill()
        return f"{facts} not embedded yet (found by words only; being embedded now)"

    async def _ids_tagged(self, tag: str) -> list[int]:
        where, params = _tag_filter(tag)
        return [r[0] for r in await self._db.read(f"SELECT f.id FROM facts f {where}", params)]

    async def _facts_by_id(self, ids: list[int]) -> list[Fact]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return await self._facts(f"WHERE f.id IN ({marks})", ids)

    async def _sync_vectors(self) -> None:
        """Bring the in-memory vectors up to date with every process's writes: new rows by
        id, and a full list of ids when some were removed."""
        model = self.model
        rows = await self._db.read(
            "SELECT id, fact_id, vector FROM fact_vectors WHERE model = ? AND id > ? ORDER BY id",
            (model, self._index.last_row),
        )
        unusable = []
        for row in rows:
            self._index.last_row = max(self._index.last_row, int(row["id"]))
            if not self._index.put(int(row["fact_id"]), bytes(row["vector"])):
                unusable.append(int(row["id"]))
        if unusable:
            # Stored before vectors were checked (NaN, Infinity): gone, so they are embedded again.
            marks = ",".join("?" * len(unusable))
            await self._db.execute(f"DELETE FROM fact_vectors WHERE id IN ({marks})", unusable)
        counted = await self._db.read_one(
            "SELECT count(*) FROM fact_vectors WHERE model = ?", (model,)
        )
        if counted is not None and int(counted[0]) != len(self._index):
            ids = await self._db.read("SELECT fact_id FROM fact_vectors WHERE model = ?", (model,))
            self._index.keep_only({int(r[0]) for r in ids})

    # -- embedding what is missing --------------------------------------------------------

    def start_backfill(self) -> None:
        """Embed, in the background, the facts that have no vector of the current model
        (saved while embedding was unavailable, or under another model)."""
        if self._backfill is None or self._backfill.done():
            self._backfill = asyncio.ensure_future(self.backfill())
            self._backfill.add_done_callback(self._backfill_ended)

    async def wait_backfilled(self) -> None:
        """Return once the background embedding (if any) has ended."""
        if self._backfill is not None:
            await asyncio.wait({self._backfill})

    def _backfill_ended(self, task: asyncio.Task[int]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._emit("memory.backfill_failed", "warning", error=f"{type(exc).__name__}: {exc}")

    async def backfill(self, batches: int | None = None) -> int:
        """Embed every fact that lacks a vector of the current model and that no other
        process is embedding (at most ``batches`` batches of BACKFILL_BATCH, if given); how
        many this call embedded. Stops at the first failure (the facts it claimed are let
        go)."""
        embedded = 0
        for _ in itertools.repeat(None) if batches is None else range(batches):
            if self._closing:
                break
            batch = await self._claim(BACKFILL_BATCH)
            if not batch:
                return embedded
            if await self._embed_claimed(batch) is not None:
                return embedded
            embedded += len(batch)
            self._emit("memory.embedded", facts=len(batch), model=self.model)
        return embedded

    async def _claim(self, limit: int) -> list[tuple[int, str]]:
        owner, now = self._owner, time.time()

        async def claim(connection: aiosqlite.Connection) -> list[tuple[int, str]]:
            async with connection.execute(
                "SELECT f.id, f.content FROM facts f "
                "LEFT JOIN fact_vectors v ON v.fact_id = f.id AND v.model = ? "
                "LEFT JOIN fact_embedding_claims c ON c.fact_id = f.id "
                "WHERE v.fact_id IS NULL AND (c.fact_id IS NULL OR c.claimed_at < ?) "
                "ORDER BY f.id LIMIT ?",
                (self.model, now - CLAIM_LAPSE, limit),
            ) as cursor:
                rows = [(int(r[0]), str(r[1])) for r in await cursor.fetchall()]
            await connection.executemany(
                "INSERT OR REPLACE INTO fact_embedding_claims (fact_id, owner, claimed_at) "
                "VALUES (?, ?, ?)",
                [(fact_id, owner, now) for fact_id, _ in rows],
            )
            return rows

        return await self._db.write(claim)

    async def _embed_claimed(self, batch: list[tuple[int, str]]) -> str | None:
        """Embed facts this process claimed and store their vectors; the claims are let go
        whatever happens. None, or why they could not be embedded."""
        ids = [fact_id for fact_id, _ in batch]
        try:
            try:
                vectors = await self.embedder.embed([content for _, content in batch], "document")
                await self._check_length(len(vectors[0]) if vectors else 0)
            except EmbeddingUnavailable as exc:
                self._failed(exc.why)
                await self._let_go(ids)
                return exc.why
            self.problem = None
            await self._store_vectors(list(zip(ids, vectors, strict=True)))
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._let_go(ids))
            raise
        return None

    async def _check_length(self, dimensions: int) -> None:
        """EmbeddingUnavailable if the model's facts already have vectors of another length
        (a vector cut short would never be near any question)."""
        row = await self._db.read_one(
            "SELECT dimensions FROM fact_vectors WHERE model = ? LIMIT 1", (self.model,)
        )
        if row is not None and int(row[0]) != dimensions:
            raise EmbeddingUnavailable(
                f'embedding model "{self.model}" gave a vector of {dimensions:,} numbers where '
                f"its other facts have {int(row[0]):,}; it is not stored, and is asked again later"
            )

    async def _store_vectors(self, vectors: list[tuple[int, list[float]]]) -> None:
        model, owner = self.model, self._owner

        async def store(connection: aiosqlite.Connection) -> None:
            for fact_id, vector in vectors:
                await connection.execute("DELETE FROM fact_vectors WHERE fact_id = ?", (fact_id,))
                # A fact forgotten while it was being embedded gets no vector.
                await connection.execute(
                    "INSERT INTO fact_vectors (fact_id, model, dimensions, vector) "
                    "SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM facts WHERE id = ?)",
                    (fact_id, model, len(vector), pack(vector), fact_id),
                )
                await connection.execute(
                    "DELETE FROM fact_embedding_claims WHERE fact_id = ? AND owner = ?",
                    (fact_id, owner),
                )

        await self._db.write(store)

    async def _let_go(self, ids: list[int]) -> None:
        owner = self._owner

        async def let_go(connection: aiosqlite.Connection) -> None:
            await connection.executemany(
                "DELETE FROM fact_embedding_claims WHERE fact_id = ? AND owner = ?",
                [(fact_id, owner) for fact_id in ids],
            )

        await self._db.write(let_go)

    def _failed(self, why: str) -> None:
        if why != self.problem:
            self._emit("memory.embedding_unavailable", "warning", model=self.model, why=why)
        self.problem = why

    def _emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._log is not None:
            self._log.emit(event, level, **fields)

    async def close(self) -> None:
        """Stop embedding and close the client. The batch being embedded is given a moment
        to be stored (cancelled, the model's work on it would be lost and redone by another
        process); what is still running then is cancelled, its claims let go."""
        self._closing = True
        if self._backfill is not None and not self._backfill.done():
            await asyncio.wait({self._backfill}, timeout=CLOSE_WAIT)
            self._backfill.cancel()
            await asyncio.wait({self._backfill})
        await self.embedder.close()


def _tag_condition(tag: str | None) -> tuple[str, tuple[Any, ...]]:
    """An SQL condition on facts ``f`` keeping those that carry ``tag`` (any case)."""
    if tag is None:
        return "1", ()
    return "instr(' ' || lower(f.tags) || ' ', ' ' || lower(?) || ' ') > 0", (tag,)


def _tag_filter(tag: str | None) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause keeping the facts that carry ``tag``."""
    condition, params = _tag_condition(tag)
    return f"WHERE {condition}", params


def _fact(row: aiosqlite.Row) -> Fact:
    try:
        metadata = json.loads(row["metadata"] or "{}")
    except ValueError:
        metadata = {}
    return Fact(
        id=int(row["id"]),
        content=row["content"],
        tags=row["tags"].split() if row["tags"] else [],
        metadata=metadata if isinstance(metadata, dict) else {},
        source=row["source"],
        created_at=row["created_at"],
        embedded=bool(row["embedded"]),
    )
