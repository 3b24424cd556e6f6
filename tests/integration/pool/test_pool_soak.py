"""Many concurrent executions mixing every ending; the pool's books must balance."""

from __future__ import annotations

import asyncio
import random

import pytest
from pool_support import request, run, running_pool
from support.waiting import UNIT, wait_until_async

from orbit_supervisor.pool import ChildOutcome, ChildPool, PoolStats
from orbit_wire.model import Outcome

KINDS = ["echo", "async_echo", "value_error", "segfault", "exit3", "kill", "recycle_me"]


async def _one(pool: ChildPool, kind: str) -> tuple[str, ChildOutcome]:
    if kind == "echo":
        return kind, await pool.execute(request("echo", {"k": 1}))
    if kind == "async_echo":
        return kind, await pool.execute(request("async_echo"))
    if kind == "value_error":
        return kind, await pool.execute(request("fail", {"kind": "value_error"}))
    if kind in ("segfault", "exit3"):
        return kind, await pool.execute(request("crash", {"kind": kind}))
    if kind == "recycle_me":
        return kind, await pool.execute(request("whoami"))
    req = request("sleep", {"seconds": 30})
    task = asyncio.create_task(pool.execute(req))
    # Wait until a child runs it, then kill it.
    await wait_until_async(lambda: pool.kill(req, "LEASE_LOST"), timeout=30,
                           interval=0.01, what=f"a child to run {req.attempt_id}, to kill it")
    return kind, await task


def _assert_counts_match_slots(pool: ChildPool) -> None:
    """The counts the pool keeps as slots change state equal a recount of its slots."""
    states = [slot.state.value for slot in pool._slots]
    stats = pool.stats()
    assert stats.idle == states.count("idle"), states
    assert stats.busy == states.count("busy"), states
    assert stats.replacing == pool.being_replaced == sum(
        states.count(s) for s in ("spawning", "killing", "exiting")), states


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_mixed_load_balances_the_books(seed: int) -> None:
    rng = random.Random(seed)
    kinds = [rng.choice(KINDS) for _ in range(90)]

    async def scenario() -> tuple[list[tuple[str, ChildOutcome]], PoolStats, int]:
        async with running_pool(3, max_tasks_per_child=5) as pool:
            work = asyncio.gather(*(_one(pool, k) for k in kinds))
            checks = 0

            def balanced_until_done() -> bool:  # the books balance at every check
                nonlocal checks
                _assert_counts_match_slots(pool)
                checks += 1
                return work.done()

            await wait_until_async(balanced_until_done, timeout=100, interval=0.005,
                                   what="the mixed load to end")
            results = await work
            await asyncio.wait_for(pool.wait_idle(3), 10 * UNIT)
            _assert_counts_match_slots(pool)
            return list(results), pool.stats(), checks

    results, stats, checks = run(scenario(), timeout=120)
    assert checks > 10
    for kind, out in results:
        if kind in ("echo", "async_echo", "recycle_me"):
            assert out.outcome is Outcome.SUCCEEDED, (kind, out)
        elif kind == "value_error":
            assert out.code == "HANDLER_ERROR", (kind, out)
        elif kind == "kill":
            assert (out.code, out.report.kill_reason) == ("LEASE_LOST", "LEASE_LOST"), out
        else:
            assert out.code == "HANDLER_CRASHED" and out.report.kill_reason is None, (kind, out)
    crashes = sum(k in ("segfault", "exit3") for k in kinds)
    kills = kinds.count("kill")
    assert stats.crashed == crashes
    assert stats.killed == ({"LEASE_LOST": kills} if kills else {})
    assert stats.spawned == 3 + stats.crashed + kills + stats.recycled
    assert (stats.idle, stats.busy, stats.replacing) == (3, 0, 0)
