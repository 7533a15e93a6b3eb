"""Withdrawing a proposal whose caller stopped waiting (`diana serve`'s host went away), through
the door: one conditional write, so it is either withdrawn or decided by a person, never both;
whoever waits on it hears, and it never runs afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from diana.core.api import Core
from diana.core.api.errors import AlreadyDecided
from diana.core.models import ErrorCode
from diana.core.profiles import NO_SERVERS, Profile

from .conftest import stepping_clock

PROGRAM = {"language": "python", "code": "open('ran', 'w').write('ran')"}


async def held(core: Core) -> str:
    result = await core.call_tool("code_execution", PROGRAM, origin="host:test")
    assert result.error_code is ErrorCode.PENDING_APPROVAL
    return str(result.data["proposal_id"])


async def test_a_withdrawn_proposal_is_heard_by_its_waiter_and_never_approved(
    config_dir: Path, data_dir: Path
) -> None:
    profile = Profile.CALL.but(servers=NO_SERVERS)
    async with await Core.open(profile, config_dir, data_dir, clock=stepping_clock()) as core:
        proposal_id = await held(core)
        waiting = asyncio.ensure_future(core.decided(proposal_id))
        withdrawn = await core.withdraw(proposal_id, reason="the host went away")
        assert (withdrawn.status.value, withdrawn.error) == ("withdrawn", "the host went away")
        heard = await asyncio.wait_for(waiting, 10)
        assert heard.status.value == "withdrawn"
        outcome = core.outcome(heard)
        assert not outcome.success and "the host went away" in (outcome.error or "")
        with pytest.raises(AlreadyDecided, match="withdrawn"):
            await core.approve(proposal_id, by="person")
        assert (await core.proposal(proposal_id)).status.value == "withdrawn"


async def test_a_proposal_a_person_decided_first_is_not_withdrawn(
    config_dir: Path, data_dir: Path
) -> None:
    profile = Profile.CALL.but(servers=NO_SERVERS)
    async with await Core.open(profile, config_dir, data_dir, clock=stepping_clock()) as core:
        proposal_id = await held(core)
        await core.reject(proposal_id, by="person", reason="no")
        with pytest.raises(AlreadyDecided, match="rejected"):
            await core.withdraw(proposal_id, reason="the host went away")
        kept = await core.proposal(proposal_id)
        assert (kept.status.value, kept.reject_reason) == ("rejected", "no")
