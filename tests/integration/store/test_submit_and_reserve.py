"""TaskService.submit_and_reserve: a submit that claims for a waiting worker in the same
transaction (the HTTP adapter uses it when a worker of the queue waits with credit)."""

from __future__ import annotations

from store_support import CAP, World

from orbit_wire.model import Capability


def test_the_new_task_is_reserved_in_the_submit_transaction(world: World) -> None:
    b = world.hello()
    made, effects, reservations = world.service.tasks.submit_and_reserve(
        world.producer, world.queue_id, [world.spec()], b, 3)
    (task, created), = made
    assert created and task["state"] == "PENDING"  # the view is the submit's
    assert [r.task_id for r in reservations] == [task["id"]]
    assert reservations[0].epoch == 1 and reservations[0].capability == CAP
    assert world.task(task["id"])["state"] == "RUNNING"  # reserved, not yet started
    assert not effects.ready_queues  # the waiting worker took it: no other hint needed
    assert world.service.workers.reserve(b, 3) == []


def test_a_task_the_worker_cannot_take_still_hints_the_queue(world: World) -> None:
    other = world.hello(caps=(Capability("other", "v1", "v1"),))
    made, effects, reservations = world.service.tasks.submit_and_reserve(
        world.producer, world.queue_id, [world.spec()], other, 2)
    assert reservations == [] and effects.ready_queues == {world.queue_id}
    assert world.task(made[0][0]["id"])["state"] == "PENDING"


def test_a_known_operation_key_reserves_nothing(world: World) -> None:
    first, _ = world.service.tasks.submit(world.producer, world.queue_id,
                                          [world.spec(operation_key="k")])
    b = world.hello()
    claimed = world.service.workers.reserve(b, 1)
    assert [r.task_id for r in claimed] == [first[0][0]["id"]]
    made, effects, reservations = world.service.tasks.submit_and_reserve(
        world.producer, world.queue_id, [world.spec(operation_key="k")], b, 1)
    assert made[0][1] is False and reservations == [] and not effects.ready_queues
