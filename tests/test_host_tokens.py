"""The tokens of `diana serve --http`'s clients, changed by several processes at once (scripts
adding clients side by side): no token is lost, and each one made names its client."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from diana.core.api import HostTokens

pytestmark = pytest.mark.processes  # several processes change the file at once

PROCESSES = 6
EACH = 25  # clients each process adds, one after another


def add_clients(data_dir: str, process: int, out: multiprocessing.Queue[tuple[str, str]]) -> None:
    tokens = HostTokens(Path(data_dir))
    for n in range(EACH):
        name = f"p{process}-c{n}"
        out.put((name, tokens.add(name, datetime.now(UTC))))


def test_clients_added_by_several_processes_at_once_all_keep_their_tokens(
    data_dir: Path,
) -> None:
    made: multiprocessing.Queue[tuple[str, str]] = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=add_clients, args=(str(data_dir), n, made))
        for n in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    given = dict(made.get(timeout=60) for _ in range(PROCESSES * EACH))
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    tokens = HostTokens(data_dir)
    assert {token.name for token in tokens.listed()} == set(given)
    assert all(tokens.client_of(token) == name for name, token in given.items())
    for name in list(given)[::2]:  # removed side by side with the rest still read
        assert tokens.remove(name)
    assert {token.name for token in tokens.listed()} == set(list(given)[1::2])
