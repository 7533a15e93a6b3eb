"""Fact vectors: float32 BLOBs in SQLite, ranked by cosine in this process.

Every vector is stored at unit length, so the cosine is a dot product. The ranking runs in
plain Python; where numpy can be imported it does the same sums at once (a speed-up, never
a requirement: the results are the same).
"""

from __future__ import annotations

import heapq
import operator
from array import array
from collections.abc import Iterable
from typing import Any


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

    def put(self, fact_id: int, blob: bytes) -> None:
        self.vectors[fact_id] = unpack(blob)
        self._matrix = None

    def keep_only(self, fact_ids: set[int]) -> None:
        for gone in set(self.vectors) - fact_ids:
            del self.vectors[gone]
        self._matrix = None

    def clear(self) -> None:
        self.vectors.clear()
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
            dimensions = len(query)
            mul = operator.mul
            scored = [
                (fact_id, sum(map(mul, query, vector)))
                for fact_id, vector in self.vectors.items()
                if len(vector) == dimensions and (among is None or fact_id in among)
            ]
        best = heapq.nlargest(limit, scored, key=lambda pair: (pair[1], -pair[0]))
        return [(fact_id, float(score)) for fact_id, score in best]

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
