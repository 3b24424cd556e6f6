"""ChildPool(on_child_ready=...): called each time a fresh child becomes ready (start, after
a kill's replacement, after a crash, after recycling), so the supervisor offers the slot at
once instead of polling ``replacing``."""

from __future__ import annotations

import asyncio

from pool_support import request, run, running_pool, wait_busy
from support.waiting import UNIT

from orbit_wire.model import Outcome


def test_ready_callback_follows_start_kill_crash_and_recycle() -> None:
    calls: list[int] = []

    async def scenario() -> None:
        seen = asyncio.Event()

        def ready() -> None:
            calls.append(1)
            seen.set()

        async with running_pool(1, on_child_ready=ready, max_tasks_per_child=2) as pool:
            assert len(calls) == 1  # the first child
            seen.clear()
            req = request("sleep", {"seconds": 30})
            task = asyncio.create_task(pool.execute(req))
            await wait_busy(pool)
            assert pool.kill(req, "LEASE_LOST")
            await asyncio.wait_for(seen.wait(), 10 * UNIT)  # the replacement is ready
            assert pool.being_replaced == 0 and pool.stats().idle == 1
            assert (await task).outcome is Outcome.UNKNOWN
            seen.clear()
            crashed = await pool.execute(request("crash", {"kind": "exit3"}))
            assert crashed.code == "HANDLER_CRASHED"
            await asyncio.wait_for(seen.wait(), 10 * UNIT)  # replaced after the crash
            seen.clear()
            for _ in range(2):  # max_tasks_per_child=2: the child is recycled after these
                assert (await pool.execute(request("echo", {"x": 1}))).outcome \
                    is Outcome.SUCCEEDED
            await asyncio.wait_for(seen.wait(), 10 * UNIT)
            assert pool.stats().recycled == 1

    run(scenario())
    assert len(calls) == 4
