"""Effects.terminal_views: a finish that ends a task a long poll waits on carries the task's
view, read in the same transaction (the HTTP long poll then answers without a re-read)."""

from __future__ import annotations

import asyncio

from store_support import World, as_json

from orbit_server.waiters import TaskWaiters
from orbit_wire.frames import FinishOp, StartOp
from orbit_wire.model import Outcome


def test_finish_of_a_watched_task_carries_its_view(world: World) -> None:
    watched_task, other = world.submit(), world.submit()
    b = world.hello()
    got = world.service.workers.reserve(b, 2)
    starts = [StartOp(world.msg(), r.attempt_id, r.epoch) for r in got]
    world.service.workers.apply_ops(b, starts)
    finishes = [FinishOp(world.msg(), r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                         result_json='{"n":1234567890123456789}') for r in got]
    results, effects = world.service.workers.apply_ops(
        b, finishes, watched=lambda task_id: task_id == watched_task["id"])
    assert all(r.ok for r in results)
    assert set(effects.terminal_tasks) == {watched_task["id"], other["id"]}
    assert set(effects.terminal_views) == {watched_task["id"]}  # only the watched one
    view = as_json(effects.terminal_views[watched_task["id"]])
    assert view == as_json(world.task(watched_task["id"]))  # exactly what a read returns
    assert view["state"] == "SUCCEEDED" and view["result"] == {"n": 1234567890123456789}


def test_waiters_hand_the_view_to_every_waiter_of_that_task() -> None:
    async def scenario() -> None:
        waiters = TaskWaiters()
        a1, a2, b = waiters.register("a"), waiters.register("a"), waiters.register("b")
        assert waiters.watching("a") and not waiters.watching("c")
        waiters.wake(["a", "b"], {"a": {"state": "SUCCEEDED"}})
        assert a1.is_set() and a2.is_set() and b.is_set()
        assert a1.view == a2.view == {"state": "SUCCEEDED"} and b.view is None
        for task_id, event in (("a", a1), ("a", a2), ("b", b)):
            waiters.unregister(task_id, event)
        assert not waiters.watching("a") and len(waiters) == 0

    asyncio.run(scenario())
