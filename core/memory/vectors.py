"""Fact vectors: float32 BLOBs in SQLite, ranked by cosine in this process.

Every vector is stored at unit length, so the cosine is a dot product. Where numpy can be
imported it does every sum at once (a speed-up, never a requirement: the results are the
same). In plain Python a dot product of 384 floats costs ~15 µs, too slow for 10,000 facts;
so each vector is also kept as bytes (a component in 1/SCALE steps), whose distance to the
question `math.dist` takes in C, ~5x faster. That estimate is off by at most the bytes'
own rounding error (known per vector), so only the vectors that could still be among the
best are then ranked exactly: the same facts, in the same order, as the exact sums give.
The bytes cost about three exact sums to make, so a process's first ranking (often its only
one: `diana memory search`) sums every vector exactly instead.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from array import array
from collections.abc import Iterable
from typing import Any

SCALE = 254  # a coarse component is round(x * SCALE) + 128, in 1..255: |x| up to 0.5
BOUND_SLACK = 1e-6  # for the float rounding of the estimate itself
Coarse = tuple[bytes, float, float]  # the bytes, their length squared, their distance to the vector


def _numpy() -> Any:
    """numpy if it can be imported (an optional speed-up, not a dependency), else None;
    imported at the first ranking, so a command that ranks nothing never loads it."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - depends on the machine
        return None
    return numpy


def pack(vector: Iterable[float]) -> bytes:
    """A vector as a little-endian float32 BLOB."""
    packed = array("f", vector)
    if packed.itemsize != 4:  # pragma: no cover - every platform Python runs on
        raise RuntimeError("float is not 4 bytes here")
    return _little_endian(packed).tobytes()


def unpack(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    return _little_endian(values)


def _little_endian(values: array[float]) -> array[float]:
    import sys

    if sys.byteorder == "big":  # pragma: no cover
        values.byteswap()
    return values


class VectorIndex:
    """The vectors of one model, kept in memory by fact id, ranked against a question."""

    def __init__(self, use_numpy: bool = True) -> None:
        self.vectors: dict[int, array[float]] = {}
        self.last_row = 0  # the highest fact_vectors.id read so far
        self._use_numpy = use_numpy
        self._numpy: Any = None
        self._matrix: Any = None  # numpy rows in the order of _ids, made when first needed
        self._ids: list[int] = []
        self._coarse: dict[int, Coarse] = {}  # for plain Python, made when first needed
        self._table: tuple[list[int], list[bytes], list[float], list[float]] | None = None
        self._table_dimensions = 0
        self._plain_rankings = 0

    def put(self, fact_id: int, blob: bytes) -> bool:
        """Keep ``blob`` as the fact's vector; False (and none kept) if it holds NaN or
        Infinity, or nothing: it would rank every question as NaN."""
        vector = unpack(blob)
        # float32 components sum without overflow in a double: a NaN or Infinity shows.
        if not vector or not math.isfinite(sum(vector)):
            self.vectors.pop(fact_id, None)
            self._coarse.pop(fact_id, None)
            self._matrix = self._table = None
            return False
        self.vectors[fact_id] = vector
        self._coarse.pop(fact_id, None)
        self._matrix = self._table = None
        return True

    def keep_only(self, fact_ids: set[int]) -> None:
        for gone in set(self.vectors) - fact_ids:
            del self.vectors[gone]
            self._coarse.pop(gone, None)
        self._matrix = self._table = None

    def clear(self) -> None:
        self.vectors.clear()
        self._coarse.clear()
        self.last_row = 0
        self._matrix = self._table = None

    def __len__(self) -> int:
        return len(self.vectors)

    def rank(
        self, query: list[float], limit: int, among: set[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` facts nearest ``query`` (a unit vector), nearest first, with their
        cosine; only ``among`` when given. Vectors of another length are passed over."""
        if self._use_numpy and self._numpy is None:
            self._numpy = _numpy()
            self._use_numpy = self._numpy is not None
        if self._numpy is not None and self.vectors:
            scored = self._rank_numpy(query, among)
        else:
            scored = self._rank_plain(query, limit, among)
        best = heapq.nlargest(limit, scored, key=lambda pair: (pair[1], -pair[0]))
        return [(fact_id, float(score)) for fact_id, score in best]

    def _rank_plain(
        self, query: list[float], limit: int, among: set[int] | None
    ) -> list[tuple[int, float]]:
        """Exact cosines of the vectors that can be among the ``limit`` best: every vector's
        cosine estimated from its bytes (within its known error), and those whose estimate
        could still reach the ``limit``-th best lower bound summed exactly."""
        self._plain_rankings += 1
        if self._plain_rankings == 1:
            # A process that searches once (`diana memory search`) would pay more for the
            # bytes (~3 exact sums' worth per vector) than they save: the first is exact.
            dimensions, mul = len(query), operator.mul
            return [
                (fact_id, sum(map(mul, query, vector)))
                for fact_id, vector in self.vectors.items()
                if len(vector) == dimensions and (among is None or fact_id in among)
            ]
        ids, quantized, lengths2, errors = self._coarse_table(len(query))
        if among is not None:
            kept = [n for n, fact_id in enumerate(ids) if fact_id in among]
            ids = [ids[n] for n in kept]
            quantized = [quantized[n] for n in kept]
            lengths2 = [lengths2[n] for n in kept]
            errors = [errors[n] for n in kept]
        if len(ids) > 4 * limit:
            # |q - c|^2 = |q|^2 + |c|^2 - 2 q.c, and |q.v - q.c| <= |q| |v - c|.
            scaled = [x * SCALE + 128 for x in query]
            length2 = math.fsum(x * x for x in query)
            length = math.sqrt(length2)
            apart = map(math.dist, itertools.repeat(scaled), quantized)
            estimates = [
                (length2 + c2 - (d / SCALE) ** 2) / 2 for d, c2 in zip(apart, lengths2, strict=True)
            ]
            slacks = [length * error + BOUND_SLACK for error in errors]
            floor = heapq.nlargest(limit, map(operator.sub, estimates, slacks))[-1]
            ids = [
                fact_id
                for fact_id, estimate, slack in zip(ids, estimates, slacks, strict=True)
                if estimate + slack >= floor
            ]
        mul = operator.mul
        return [(fact_id, sum(map(mul, query, self.vectors[fact_id]))) for fact_id in ids]

    def _coarse_table(
        self, dimensions: int
    ) -> tuple[list[int], list[bytes], list[float], list[float]]:
        """The vectors of ``dimensions`` as columns: fact ids, bytes, their lengths squared,
        their errors; made again only after the vectors changed."""
        if self._table is None or self._table_dimensions != dimensions:
            coarse = self._coarse
            for fact_id, vector in self.vectors.items():
                if fact_id not in coarse and len(vector) == dimensions:
                    coarse[fact_id] = _coarse(vector)
            ids = [i for i, v in self.vectors.items() if len(v) == dimensions]
            rows = [coarse[i] for i in ids]
            self._table = (
                ids,
                [row[0] for row in rows],
                [row[1] for row in rows],
                [row[2] for row in rows],
            )
            self._table_dimensions = dimensions
        return self._table

    def _rank_numpy(self, query: list[float], among: set[int] | None) -> list[tuple[int, float]]:
        np = self._numpy
        if self._matrix is None:
            dimensions = len(query)
            self._ids = [i for i, v in self.vectors.items() if len(v) == dimensions]
            rows = [self.vectors[i] for i in self._ids]
            self._matrix = np.array(rows, dtype=np.float32).reshape(len(rows), dimensions)
        if self._matrix.shape[0] == 0 or self._matrix.shape[1] != len(query):
            self._matrix = None
            return []
        scores = self._matrix @ np.asarray(query, dtype=np.float32)
        return [
            (fact_id, float(score))
            for fact_id, score in zip(self._ids, scores.tolist(), strict=True)
            if among is None or fact_id in among
        ]


def _coarse(vector: array[float]) -> Coarse:
    """``vector`` as bytes, the length squared of what they stand for, and how far that is
    from ``vector`` (math.dist does the sums in C: this runs once per vector)."""
    scaled = [x * SCALE + 128 for x in vector]
    steps = [int(x + 0.5) for x in scaled]  # rounded (truncation is a floor for x > -0.5)
    if min(steps) < 1 or max(steps) > 255:
        steps = [min(255, max(1, step)) for step in steps]
    quantized = bytes(steps)
    error = math.dist(scaled, quantized) / SCALE
    length = math.dist(quantized, bytes([128]) * len(quantized)) / SCALE
    return quantized, length * length, error
