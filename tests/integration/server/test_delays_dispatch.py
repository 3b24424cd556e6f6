"""A real server hands a delayed task to a waiting worker once its instant comes (the
submit schedules the wake-up; no slow poll needed), and a worker with credit for one task
gets the highest priority of those waiting."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.lanes import Lane
from support.waiting import ms

pytestmark = pytest.mark.asyncio


async def test_delayed_task_reaches_a_waiting_worker_at_its_instant(lane: Lane) -> None:
    async with await lane.connect(credit=1) as wc:
        delay = ms(600)
        made = await asyncio.to_thread(lane.submit, delay_ms=delay)
        assert made["next_attempt_at_ms"] == made["created_at_ms"] + delay
        [r] = await wc.reservations(1)
        assert r.task_id == made["id"]
        # Not before its instant: by this process's clock on arrival, and by the server's.
        assert time.time() * 1000 >= made["created_at_ms"] + delay
        (attempt,) = (await asyncio.to_thread(lane.attempts, made["id"]))["attempts"]
        assert attempt["reserved_at_ms"] >= made["next_attempt_at_ms"], attempt


async def test_highest_priority_waiting_task_goes_first(lane: Lane) -> None:
    low = await asyncio.to_thread(lane.submit, priority=1)
    high = await asyncio.to_thread(lane.submit, priority=9)
    mid = await asyncio.to_thread(lane.submit, priority=5)
    async with await lane.connect(credit=1) as wc:
        got = [(await wc.reservations(1))[0].task_id]
        for _ in range(2):
            await wc.credit(1)
            got.append((await wc.reservations(1))[0].task_id)
    assert got == [high["id"], mid["id"], low["id"]]
