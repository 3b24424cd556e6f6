"""Writers that race: compare-and-set detects a lost race and rolls everything back; two
services (two connections, two threads) on one SQLite file never reserve a task twice."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from store_support import World

from orbit_server import domain
from orbit_server.services import Services
from orbit_server.store.rows import UnitOfWork
from orbit_server.store.tables import attempts, tasks
from orbit_wire.errors import ErrorCode, OrbitError


def test_lost_compare_and_set_rolls_back_the_whole_transaction(world: World) -> None:
    t = world.submit()
    with pytest.raises(OrbitError) as exc, world.engine.begin() as conn:
        uow = UnitOfWork(conn, world.clock())
        uow.load_tasks([t["id"]])
        rec = uow.tasks[t["id"]]
        uow.add_attempt(domain.reserve(rec, "f" * 32, "i" * 32, world.clock()))
        # Another writer moves the task between our read and our write.
        conn.execute(update(tasks).where(tasks.c.id == t["id"]).values(epoch=5))
        uow.flush()
    assert exc.value.code is ErrorCode.UNAVAILABLE and exc.value.retryable
    view = world.task(t["id"])
    assert view["state"] == "PENDING" and view["epoch"] == 0  # nothing of it was kept
    with world.engine.connect() as conn:
        assert conn.execute(attempts.select()).first() is None


def test_two_services_on_one_file_never_reserve_a_task_twice(world: World) -> None:
    world.submit_many(300)
    b1, b2 = world.hello(), world.hello()
    claimed: list[list[str]] = [[], []]

    def worker(svc: Services, b: object, out: list[str]) -> None:
        for _ in range(100):  # bounded
            got = svc.workers.reserve(b, 7)  # type: ignore[arg-type]
            if not got:
                return
            out.extend(r.task_id for r in got)

    with world.other_service(2) as other:
        errors = world.race(lambda: worker(world.service, b1, claimed[0]),
                      lambda: worker(other, b2, claimed[1]))
    assert not errors, errors
    all_ids = claimed[0] + claimed[1]
    assert len(all_ids) == 300 and len(set(all_ids)) == 300
    assert world.service.tasks.queue_stats(
        world.producer, world.queue_id)["counts"]["RUNNING"] == 300
