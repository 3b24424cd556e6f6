"""A single submit while a worker waits with credit: the reserve frame is claimed in the
submit's transaction and still obeys credit, capability and drain rules (real server)."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane
from support.protocol_client import ECHO

from orbit_wire.model import Capability

pytestmark = pytest.mark.asyncio


async def test_waiting_worker_gets_a_single_submit_within_its_credit(lane: Lane) -> None:
    async with await lane.connect(capacity=2, credit=1) as wc:
        first = await asyncio.to_thread(lane.submit, payload={"i": 1})
        [r] = await wc.only_reserved(1, among=[first["id"]])
        assert r.capability == ECHO
        # Its one credit is spent: what is submitted now waits for credit, and the next
        # reserve frame answers the credit, with both.
        later = [await asyncio.to_thread(lane.submit, payload={"i": i}) for i in (2, 3)]
        await wc.credit(2)
        r2, _ = await wc.only_reserved(2, among=[t["id"] for t in later])
        assert (await wc.start(r)).ok and (await wc.start(r2)).ok


async def test_only_a_worker_serving_the_capability_gets_it(lane: Lane) -> None:
    other = Capability("test.echo", "v9", "v1")
    async with await lane.connect(credit=2, capabilities=(other,)) as stranger, \
            await lane.connect(credit=2) as wc:
        made = await asyncio.to_thread(lane.submit)
        await wc.only_reserved(1, among=[made["id"]])
        assert stranger.reserve_frames == []  # a task is reserved to one worker at a time


async def test_a_draining_worker_gets_nothing(lane: Lane) -> None:
    async with await lane.connect(credit=2) as wc:
        assert (await wc.drain()).ok
        made = await asyncio.to_thread(lane.submit)
        # Another worker gets it while the drained one holds on.
        async with await lane.connect(credit=1) as other:
            await other.only_reserved(1, among=[made["id"]])
        assert wc.reserve_frames == []
