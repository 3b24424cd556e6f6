"""Dispatch by labels at the service level, on both stores: a worker with labels takes the
tasks that require nothing and those whose requirements its labels meet, in dispatch order
(priority, then age) across both; a worker without labels takes only the former; tasks no
worker can match, however many and however urgent, hide nothing behind them; and whether a
claim drained the queue counts only the tasks the worker could take."""

from __future__ import annotations

import orjson
from store_support import CAP, World

from orbit_server.store import claims
from orbit_wire.model import Capability

GPU = {"gpu": "a100", "mem": "64G"}
OTHER = Capability("text.other", "v1", "v1")


def _reserved(world: World, labels: dict[str, str] | None, count: int,
              caps: tuple[Capability, ...] = (CAP,)) -> list[str]:
    binding = world.hello(labels=labels, caps=caps)
    return [r.task_id for r in world.service.workers.reserve(binding, count)]


def test_a_labelled_worker_takes_both_kinds_in_dispatch_order(world: World) -> None:
    anyone = world.submit(priority=3)["id"]
    nobody = world.submit(priority=9, requires={"gpu": "h100"})["id"]
    need = world.submit(priority=7, requires={"gpu": "a100"})["id"]
    both = world.submit(priority=5, requires={"mem": "64G", "gpu": "a100"})["id"]
    older_any = world.submit(priority=7)["id"]
    assert world.task(need)["policy"]["requires"] == {"gpu": "a100"}
    assert world.task(anyone)["policy"]["requires"] is None
    # Without labels: only what requires nothing, by priority.
    assert _reserved(world, None, 4) == [older_any, anyone]
    for task_id in (older_any, anyone):
        assert world.task(task_id)["state"] != "PENDING"
    assert world.task(need)["state"] == "PENDING"
    # With them: the rest it can match, by priority then age; never the h100 task.
    assert _reserved(world, GPU, 4) == [need, both]
    assert world.task(nobody)["state"] == "PENDING"


def test_the_merge_keeps_priority_and_age_across_requirements(world: World) -> None:
    first = world.submit(requires={"gpu": "a100"})["id"]
    world.clock.advance(1)
    second = world.submit()["id"]
    world.clock.advance(1)
    third = world.submit(requires={"mem": "64G"})["id"]
    urgent = world.submit(priority=8, requires={"mem": "64G", "gpu": "a100"})["id"]
    assert _reserved(world, GPU, 3) == [urgent, first, second]
    assert _reserved(world, GPU, 3) == [third]


def test_tasks_no_worker_can_match_hide_nothing(world: World) -> None:
    # Many distinct requirements nobody meets, and many urgent tasks of one: the task the
    # worker can take is still found in one claim.
    for i in range(20):
        world.submit(priority=9, requires={"gpu": f"v{i}"})
    world.submit_many(50, priority=9, requires={"gpu": "h100"})
    mine = world.submit(priority=0, requires={"gpu": "a100"})["id"]
    assert _reserved(world, GPU, 2) == [mine]
    assert _reserved(world, None, 2) == []


def test_each_capability_of_a_labelled_worker_is_searched(world: World) -> None:
    spec = world.spec(requires={"gpu": "a100"})
    spec.update(handler=OTHER.handler)
    made, _ = world.service.tasks.submit(world.producer, world.queue_id, [spec])
    other = made[0][0]["id"]
    plain = world.submit()["id"]
    got = _reserved(world, GPU, 4, caps=(CAP, OTHER))
    assert sorted(got) == sorted([other, plain])


def test_drained_counts_only_what_the_worker_could_take(world: World) -> None:
    world.submit(requires={"gpu": "h100"})
    matching = []
    for _ in range(3):
        world.clock.advance(1)
        matching.append(world.submit(requires={"gpu": "a100"})["id"])
    binding = world.hello(labels=GPU)
    first = world.service.workers.reserve(binding, 2)
    assert [r.task_id for r in first] == matching[:2] and not first.drained
    last = world.service.workers.reserve(binding, 1)
    assert [r.task_id for r in last] == matching[2:] and last.drained


def test_the_requirement_walk_is_bounded(world: World) -> None:
    # More distinct requirements than one claim reads: the walk stops at the bound.
    world.submit_many(1, requires={"gpu": "a100"})
    for i in range(claims.MAX_REQUIREMENTS + 3):
        world.submit(requires={"k": f"v{i}"})
    with world.engine.connect() as conn:
        found = claims.matching_requirements(conn, world.queue_id, CAP,
                                             {"k": "v1", "gpu": "a100"})
    assert 1 <= len(found) <= 2


def test_an_unmatched_task_not_started_in_time_names_its_labels(world: World) -> None:
    task = world.submit(requires={"gpu": "h100"}, schedule_to_start_ms=1_000)
    world.hello(labels=GPU)  # live, offers the capability, lacks the label
    world.clock.advance(1_000)
    assert task["id"] in world.service.reaper.reap().terminal_tasks
    failed = world.task(task["id"])
    assert failed["state"] == "FAILED" and failed["failure"]["code"] == "NOT_STARTED_IN_TIME"
    details = orjson.loads(orjson.dumps(failed["failure"]["details"]))
    assert details["waiting"]["reason"] == "NO_MATCHING_WORKER"
    assert details["waiting"]["requires"] == {"gpu": "h100"}
    assert "labels it requires" in details["reason"]
