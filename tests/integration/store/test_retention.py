"""Bounded storage on SQLite and MariaDB (hand-moved clock): finished tasks past the task
retention go with their attempts, evidence and audit rows, oldest first in bounded batches,
also with two replicas pruning at once; long-unseen idle instance rows go too."""

from __future__ import annotations

import random
from dataclasses import replace

from sqlalchemy import func, select
from store_support import World

from orbit_server.services import Services
from orbit_server.services.retention import TASK_BATCH
from orbit_server.store import create_engine_for
from orbit_server.store.tables import attempts, audit, evidence, instances, tasks
from orbit_wire.model import Outcome

DAY = 86_400_000


def with_retention(world: World, retention_ms: int, seed: int = 1) -> Services:
    config = replace(world.service.tx.config, task_retention_ms=retention_ms)
    return Services(world.engine, config, world.clock, random.Random(seed))


def finish_all(world: World, n: int, outcome: Outcome = Outcome.SUCCEEDED) -> list[str]:
    ids = world.submit_many(n)
    b = world.hello()
    for _ in range(n):
        attempt_id, epoch = world.run_once(b)
        world.finish(b, attempt_id, epoch, outcome, result=1 if outcome is Outcome.SUCCEEDED
                     else None, code=None if outcome is Outcome.SUCCEEDED else "E")
    return ids


def remaining(world: World, task_ids: list[str]) -> dict[str, int]:
    with world.engine.connect() as conn:
        return {table.name: int(conn.scalar(select(func.count()).select_from(table).where(
            table.c.task_id.in_(task_ids) if table is not tasks else tasks.c.id.in_(task_ids)
        )) or 0) for table in (tasks, attempts, audit, evidence)}


def test_old_finished_tasks_go_with_their_rows(world: World) -> None:
    old = finish_all(world, 2)
    b = world.hello()
    lost = world.submit()
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.SUCCEEDED, result=1)
    # A late, second report of the finished attempt is kept as evidence of its task.
    world.finish(b, attempt_id, epoch, Outcome.FAILED, code="E")
    old.append(lost["id"])
    assert remaining(world, old)["evidence"] == 1
    review = world.submit()
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.UNKNOWN, code="HANDLER_ERROR")
    assert world.task(review["id"])["state"] == "NEEDS_REVIEW"
    world.submit()  # stays PENDING however old
    world.clock.advance(DAY)
    new = finish_all(world, 2)
    assert with_retention(world, 0).retention.prune_tasks() == 0  # 0 keeps everything
    world.clock.advance(DAY - 1)
    services = with_retention(world, DAY)
    assert services.retention.prune_tasks() == 3
    assert remaining(world, old) == {"tasks": 0, "attempts": 0, "audit": 0, "evidence": 0}
    assert remaining(world, new)["tasks"] == 2 and remaining(world, new)["attempts"] == 2
    assert world.task(review["id"])["state"] == "NEEDS_REVIEW"  # never finished: kept
    assert world.count(tasks) == 4
    assert services.retention.prune_tasks() == 0


def test_batches_are_bounded_and_replicas_share_the_work(world: World) -> None:
    ids = world.submit_many(TASK_BATCH + 300)
    with world.engine.begin() as conn:  # finished long ago, as bulk history
        conn.execute(tasks.update().where(tasks.c.id.in_(ids)).values(
            state="SUCCEEDED", finished_at_ms=world.clock.now, result="1"))
    world.clock.advance(2 * DAY)
    engines = [create_engine_for(world.url) for _ in range(2)]
    config = replace(world.service.tx.config, task_retention_ms=DAY)
    replicas = [Services(e, config, world.clock, random.Random(i)) for i, e in enumerate(engines)]
    deleted: list[int] = []
    try:
        def prune(services: Services) -> None:
            for _ in range(20):
                n = services.retention.prune_tasks()
                deleted.append(n)
                if n == 0:
                    return

        errors = World.race(lambda: prune(replicas[0]), lambda: prune(replicas[1]))
        assert errors == []
    finally:
        for e in engines:
            e.dispose()
    assert max(deleted) <= TASK_BATCH
    assert sum(deleted) == TASK_BATCH + 300
    assert world.count(tasks) == 0 and world.count(audit) == 0


def test_idle_instances_long_unseen_are_pruned(world: World) -> None:
    world.submit_many(2)
    gone = world.hello()
    busy = world.hello()
    world.run_once(busy)  # holds a running attempt
    world.service.workers.release_reservations(gone.instance_id, gone.connected_at_ms)
    retention = world.service.tx.config.receipt_retention_ms
    world.clock.advance(retention + 1)
    fresh = world.hello()
    assert world.service.retention.prune_instances() == 1
    with world.engine.connect() as conn:
        left = set(conn.scalars(select(instances.c.id)))
    assert left == {busy.instance_id, fresh.instance_id}
    # The pruned instance may come back: it is registered anew.
    again = world.hello(instance_id=gone.instance_id, secret="another-secret")
    assert again.instance_id == gone.instance_id
