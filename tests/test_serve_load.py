"""`diana serve --http` under load: several hosts, each with its own token, make their calls
all at once; most the policy allows, one each a person decides, and two `diana` processes race
to decide them (one approving, one rejecting). Nothing is lost, nothing runs twice, every call
is logged with its host, each host hears what became of its held call, and nothing is left
running once the gateway stops. The full load (ten hosts of fifty calls) is measured by
bench/bench_gateway.py."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from .commands import diana_here_async
from .serving import (
    configure_two,
    decide_every_held,
    http_gateway,
    lines,
    one_host,
    running_with,
    text_of,
)

pytestmark = pytest.mark.processes  # diana serve, the MCP servers and `diana` processes

# Fewer than the bench's ten hosts of fifty calls, and still all at once: every host connects
# and waits for the others, then sends all its calls together, so the gateway has every
# host's calls in flight at one time; and the two deciders race for every held call (each
# tries them all, from opposite ends), so each is contested. What could be lost or run twice
# meets the same interleavings in 4 x 15 calls as in 10 x 50.
HOSTS = 4
CALLS = 15


async def test_hosts_calling_at_once_two_deciders_racing_nothing_lost_or_run_twice(
    tmp_path: Path, config_dir: Path, data_dir: Path
) -> None:
    allowed, held = tmp_path / "allowed", tmp_path / "held"
    configure_two(config_dir, allowed, held)
    made = [
        await diana_here_async(config_dir, data_dir, "serve", "token", "add", f"host{n}")
        for n in range(HOSTS)
    ]
    tokens = [token.stdout.strip() for token in made]
    assert all(tokens) and len(set(tokens)) == HOSTS
    start, together = asyncio.Barrier(HOSTS), asyncio.Barrier(2)
    with http_gateway(config_dir, data_dir) as url:
        hosts = [one_host(url, token, n, CALLS, start) for n, token in enumerate(tokens)]
        deciders = [
            decide_every_held(config_dir, data_dir, verb, HOSTS, together)
            for verb in ("approve", "reject")
        ]
        *answers, approving, rejecting = await asyncio.gather(*hosts, *deciders)
    # The two processes raced for every held call: each tried them all.
    assert set(approving) == set(rejecting) and len(approving) == HOSTS
    # Every allowed call ran once, and its host got its result.
    results = {mark: result for answer in answers for mark, result in answer}
    assert len(results) == HOSTS * CALLS
    allowed_marks = [mark for mark in results if "-a" in mark]
    not_run = [mark for mark in allowed_marks if mark not in set(lines(allowed))]
    said = {text_of(results[mark]) for mark in not_run}
    assert Counter(lines(allowed)) == Counter(allowed_marks), f"{len(not_run)} not run: {said}"
    for mark in allowed_marks:
        assert not results[mark].is_error and text_of(results[mark]) == f"appended {mark}"
    # Each held call was decided once, by one of the two: approved ones ran once, rejected
    # ones never; each host heard which.
    approved = {pid for pid, code in approving.items() if code == 0}
    rejected = {pid for pid, code in rejecting.items() if code == 0}
    assert not approved & rejected and len(approved | rejected) == HOSTS
    ran = lines(held)
    assert len(ran) == len(set(ran)) == len(approved)
    for host in range(HOSTS):
        result = results[f"h{host}-held"]
        if f"h{host}-held" in ran:
            assert not result.is_error and text_of(result) == f"appended h{host}-held"
        else:
            assert result.is_error and "reject" in text_of(result).lower()
    # Every host call is logged once with the host its token names.
    listed = await diana_here_async(config_dir, data_dir, "log", "--json", "--limit", "10000")
    logged = [call for call in json.loads(listed.stdout) if call["origin"].startswith("host:")]
    calls = Counter((call["origin"], call["arguments"]["mark"]) for call in logged)
    made = {(f"host:{mark.split('-')[0].replace('h', 'host', 1)}", mark) for mark in results}
    assert set(calls) == made
    assert all(count == 1 for (_, mark), count in calls.items() if "-a" in mark)
    # The gateway has stopped: none of the servers it or the deciders started still runs.
    assert running_with(str(allowed)) == [] and running_with(str(held)) == []
