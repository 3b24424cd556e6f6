"""Delays and priorities on a real store (SQLite and MariaDB), with a hand-moved clock:
a delayed task is not dispatched before its instant and its deadline counts from it; higher
priorities go first, FIFO within one, across several capabilities too; a retry keeps its
priority and waits for its backoff; stats count pending tasks by priority and the delayed."""

from __future__ import annotations

import pytest
from store_support import CAP, World

from orbit_wire.errors import OrbitError
from orbit_wire.model import Capability, Outcome

OTHER = Capability("other", "v1", "v1")


def test_delay_ms_holds_the_task_until_its_instant(world: World) -> None:
    t0 = world.clock()
    task = world.submit(delay_ms=5_000, deadline_ms=1_000)
    assert task["next_attempt_at_ms"] == t0 + 5_000
    # The total deadline counts from the first instant the task may run.
    assert task["deadline_at_ms"] == t0 + 6_000
    b = world.hello()
    assert world.service.workers.reserve(b, 1) == []
    world.clock.advance(4_999)
    assert world.service.workers.reserve(b, 1) == []
    world.clock.advance(1)
    (res,) = world.service.workers.reserve(b, 1)
    assert res.task_id == task["id"]


def test_not_before_in_the_past_runs_now_and_far_future_is_refused(world: World) -> None:
    t0 = world.clock()
    past = world.submit(not_before_at_ms=t0 - 10_000)
    assert past["next_attempt_at_ms"] == t0
    ahead = world.submit(not_before_at_ms=t0 + 2_000)
    assert ahead["next_attempt_at_ms"] == t0 + 2_000
    with pytest.raises(OrbitError) as err:
        world.submit(not_before_at_ms=t0 + 32 * 86_400_000)
    assert err.value.code.value == "BAD_REQUEST"
    with pytest.raises(OrbitError):
        world.submit(not_before_at_ms=t0, delay_ms=1)
    b = world.hello()
    assert [r.task_id for r in world.service.workers.reserve(b, 5)] == [past["id"]]


def test_submit_reports_the_delayed_instant_as_due(world: World) -> None:
    _, effects = world.service.tasks.submit(world.producer, world.queue_id,
                                            [world.spec(delay_ms=3_000)])
    assert effects.ready_queues == set()
    assert effects.next_due_ms == world.clock() + 3_000
    _, effects = world.service.tasks.submit(world.producer, world.queue_id, [world.spec()])
    assert effects.ready_queues == {world.queue_id}


def test_higher_priority_first_fifo_within_a_priority(world: World) -> None:
    order: list[tuple[int, str]] = []
    for priority in (5, 1, 9, 5, 9, 1, 0):
        order.append((priority, world.submit(priority=priority)["id"]))
        world.clock.advance(1)
    # A delayed task of the highest priority is not claimable and does not block the rest.
    world.submit(priority=9, delay_ms=60_000)
    expected = [tid for _, tid in sorted(order, key=lambda pt: -pt[0])]  # stable: FIFO
    b = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(b, 3)]
    got += [r.task_id for r in world.service.workers.reserve(b, 10)]
    assert got == expected
    assert world.task(expected[0])["priority"] == 9


def test_priority_across_capabilities(world: World) -> None:
    low = world.submit(priority=2)
    world.clock.advance(1)
    high = world.submit(handler=OTHER.handler, priority=8)
    world.clock.advance(1)
    mid = world.submit(priority=5)
    b = world.hello(caps=(CAP, OTHER))
    got = [r.task_id for r in world.service.workers.reserve(b, 3)]
    assert got == [high["id"], mid["id"], low["id"]]


def test_priority_out_of_range_is_refused(world: World) -> None:
    for bad in (-1, 10, "5", True, 1.5):
        with pytest.raises(OrbitError) as err:
            world.submit(priority=bad)
        assert "priority" in err.value.message


def test_retry_keeps_priority_and_waits_for_its_backoff(world: World) -> None:
    task = world.submit(priority=7, idempotency="IDEMPOTENT",
                        backoff={"initial_ms": 1_000, "jitter": 0.0}, delay_ms=100)
    world.clock.advance(100)
    b = world.hello()
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.FAILED, code="TEMPORARY", retryable=True)
    again = world.task(task["id"])
    assert again["state"] == "PENDING"
    assert again["priority"] == 7
    assert again["next_attempt_at_ms"] == world.clock() + 1_000
    later = world.submit(priority=1)
    (res,) = world.service.workers.reserve(b, 1)
    assert res.task_id == later["id"]  # the retry's backoff has not ended
    world.clock.advance(1_000)
    newer = world.submit(priority=1)
    (res,) = world.service.workers.reserve(b, 1)
    assert res.task_id == task["id"]  # back, ahead of a lower priority
    assert world.task(newer["id"])["state"] == "PENDING"


def test_stats_count_pending_by_priority_and_delayed(world: World) -> None:
    world.submit(priority=9)
    world.submit(priority=9, delay_ms=1_000)
    world.submit()
    stats = world.service.tasks.queue_stats(world.producer, world.queue_id)
    assert stats["pending_by_priority"] == {"9": 2, "5": 1}
    assert list(stats["pending_by_priority"]) == ["9", "5"]
    assert stats["pending_delayed"] == 1
    world.clock.advance(1_000)
    stats = world.service.tasks.queue_stats(world.producer, world.queue_id)
    assert stats["pending_delayed"] == 0
