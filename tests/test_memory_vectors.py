"""The vector index ranks in plain Python exactly as the sums over every vector would: the
coarse estimate it starts from only leaves out vectors that cannot be among the best."""

from __future__ import annotations

import math
import operator
import random

from diana.core.memory.vectors import VectorIndex, pack


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def exact(
    index: VectorIndex, query: list[float], limit: int, among: set[int] | None = None
) -> list[tuple[int, float]]:
    scored = [
        (i, sum(map(operator.mul, query, v)))
        for i, v in index.vectors.items()
        if len(v) == len(query) and (among is None or i in among)
    ]
    return sorted(scored, key=lambda pair: (-pair[1], pair[0]))[:limit]


def test_plain_python_ranks_exactly_like_every_sum_and_like_numpy() -> None:
    rng = random.Random(3)
    plain, fast = VectorIndex(use_numpy=False), VectorIndex(use_numpy=True)
    centre = unit([rng.gauss(0, 1) for _ in range(384)])
    fact_id = 0
    for n in range(1500):
        fact_id += 1
        if n % 3 == 0:  # a crowd of near neighbours, a hair apart: the estimate cannot tell
            vector = unit([c + rng.gauss(0, 0.02) for c in centre])
        elif n % 3 == 1:
            vector = unit([rng.gauss(0, 1) for _ in range(384)])
        else:  # one big component: rounded coarsely (|x| > 0.5), a large known error
            vector = unit([5.0 if d == n % 384 else rng.gauss(0, 0.1) for d in range(384)])
        for index in (plain, fast):
            index.put(fact_id, pack(vector))
    plain.put(fact_id + 1, pack(unit([1.0] * 64)))  # another model's length: passed over
    queries = [centre, unit([c + rng.gauss(0, 0.05) for c in centre])]
    queries += [unit([rng.gauss(0, 1) for _ in range(384)]) for _ in range(3)]
    queries.append(unit([5.0 if d == 2 else 0.0 for d in range(384)]))
    among = set(range(1, fact_id, 2))
    for query in queries:
        for limit in (1, 5, 50):
            want = exact(plain, query, limit)
            got = plain.rank(query, limit)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert [s for _, s in got] == [s for _, s in want]
            assert [i for i, _ in fast.rank(query, limit)] == [i for i, _ in want]
            assert [i for i, _ in plain.rank(query, limit, among)] == [
                i for i, _ in exact(plain, query, limit, among)
            ]
