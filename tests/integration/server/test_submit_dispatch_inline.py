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
        assert await wc.no_reservation(0.2)  # credit sits unused: the queue is empty
        first = await asyncio.to_thread(lane.submit, payload={"i": 1})
        [r] = await wc.reservations(1)
        assert r.task_id == first["id"] and r.capability == ECHO
        second = await asyncio.to_thread(lane.submit, payload={"i": 2})
        assert await wc.no_reservation(0.4)  # its one credit is spent
        await wc.credit(1)
        [r2] = await wc.reservations(1)
        assert r2.task_id == second["id"]
        assert (await wc.start(r)).ok and (await wc.start(r2)).ok


async def test_only_a_worker_serving_the_capability_gets_it(lane: Lane) -> None:
    other = Capability("test.echo", "v9", "v1")
    async with await lane.connect(credit=2, capabilities=(other,)) as stranger, \
            await lane.connect(credit=2) as wc:
        made = await asyncio.to_thread(lane.submit)
        [r] = await wc.reservations(1)
        assert r.task_id == made["id"]
        assert await stranger.no_reservation(0.3)


async def test_a_draining_worker_gets_nothing(lane: Lane) -> None:
    async with await lane.connect(credit=2) as wc:
        assert (await wc.drain()).ok
        await asyncio.to_thread(lane.submit)
        assert await wc.no_reservation(0.4)
