"""A claim says whether it left the queue drained (``Reservations.drained``), so that new
credit alone does not run a claim that would find nothing: on SQLite by asking for one row
more, on MariaDB (where that row would be locked against other servers' claims) by a plain
read of the dispatch index once the claim filled its count. Tasks that are not claimable
(delayed, or of another capability) do not count as left."""

from __future__ import annotations

from store_support import World


def test_a_claim_that_takes_the_last_tasks_is_drained(world: World) -> None:
    b = world.hello()
    world.submit_many(3)
    got = world.service.workers.reserve(b, 3)
    assert len(got) == 3 and got.drained


def test_a_claim_that_leaves_a_task_is_not_drained(world: World) -> None:
    b = world.hello()
    world.submit_many(3)
    first = world.service.workers.reserve(b, 2)
    assert len(first) == 2 and not first.drained
    rest = world.service.workers.reserve(b, 2)
    assert len(rest) == 1 and rest.drained


def test_tasks_that_cannot_be_claimed_do_not_count_as_left(world: World) -> None:
    b = world.hello()
    world.submit_many(2)
    world.submit(delay_ms=60_000)
    world.submit(handler="text.other")
    got = world.service.workers.reserve(b, 2)
    assert len(got) == 2 and got.drained
    assert world.service.workers.reserve(b, 1) == []


def test_a_submit_that_claims_for_a_waiting_worker_says_drained(world: World) -> None:
    b = world.hello()
    tasks = world.service.tasks
    _made, _effects, alone = tasks.submit_and_reserve(world.producer, world.queue_id,
                                                      [world.spec()], b, 1)
    assert len(alone) == 1 and alone.drained
    world.submit()  # one waits now
    _made, _effects, beside = tasks.submit_and_reserve(world.producer, world.queue_id,
                                                       [world.spec()], b, 1)
    assert len(beside) == 1 and not beside.drained
