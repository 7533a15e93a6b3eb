"""Fact vectors: float32 BLOBs in SQLite, ranked by cosine in this process.

Every vector is stored at unit length, so the cosine is a dot product. Where numpy can be
imported it does every sum at once (a speed-up, never a requirement: the results are the
same). In plain Python a dot product of 384 floats costs ~15 µs, too slow for 10,000 facts;
so each vector is also kept as bytes (a component in 1/SCALE steps), whose distance to the
question `math.dist` takes in C, ~5x faster. That estimate is off by at most the bytes'
own rounding error (known per vector), so only the vectors that could still be among the
best are then ranked exactly: the same facts, in the same order, as the exact sums give.
"""

from __future__ import annotations

import heapq
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

    def put(self, fact_id: int, blob: bytes) -> None:
        self.vectors[fact_id] = unpack(blob)
        self._coarse.pop(fact_id, None)
        self._matrix = None

    def keep_only(self, fact_ids: set[int]) -> None:
        for gone in set(self.vectors) - fact_ids:
            del self.vectors[gone]
            self._coarse.pop(gone, None)
        self._matrix = None

    def clear(self) -> None:
        self.vectors.clear()
        self._coarse.clear()
        self.last_row = 0
        self._matrix = None

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
        dimensions = len(query)
        ids = [
            fact_id
            for fact_id, vector in self.vectors.items()
            if len(vector) == dimensions and (among is None or fact_id in among)
        ]
        if len(ids) > 4 * limit:
            ids = self._could_be_best(query, ids, limit)
        mul = operator.mul
        return [(fact_id, sum(map(mul, query, self.vectors[fact_id]))) for fact_id in ids]

    def _could_be_best(self, query: list[float], ids: list[int], limit: int) -> list[int]:
        # |q - c|^2 = |q|^2 + |c|^2 - 2 q.c, and |q.v - q.c| <= |q| |v - c|.
        scaled = [x * SCALE + 128 for x in query]
        length2 = math.fsum(x * x for x in query)
        length = math.sqrt(length2)
        dist = math.dist
        coarse = self._coarse
        bounds = []
        for fact_id in ids:
            known = coarse.get(fact_id)
            if known is None:
                known = coarse[fact_id] = _coarse(self.vectors[fact_id])
            quantized, quantized2, error = known
            apart = dist(scaled, quantized) / SCALE
            estimate = (length2 + quantized2 - apart * apart) / 2
            slack = length * error + BOUND_SLACK
            bounds.append((estimate - slack, estimate + slack, fact_id))
        floor = heapq.nlargest(limit, (low for low, _, _ in bounds))[-1]
        return [fact_id for _, high, fact_id in bounds if high >= floor]

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
