"""Compare-and-set over many rows at once (one statement on MySQL/MariaDB, executemany on
SQLite): every row's own condition holds, and one moved row rolls the whole batch back."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from store_support import CAP, World

from orbit_server import domain
from orbit_server.store.rows import UnitOfWork
from orbit_server.store.tables import attempts, tasks
from orbit_wire.errors import ErrorCode, OrbitError


def _submit(world: World, n: int) -> list[str]:
    specs: list[object] = [
        {"handler": CAP.handler, "handler_version": CAP.handler_version,
         "payload_version": CAP.payload_version, "payload": {"i": i}} for i in range(n)]
    made, _ = world.service.tasks.submit(world.producer, world.queue_id, specs)
    return [view["id"] for view, _created in made]


def test_many_rows_change_in_one_flush(world: World) -> None:
    ids = _submit(world, 300)  # more than one statement's chunk on MySQL
    now = world.clock()
    with world.engine.begin() as conn:
        uow = UnitOfWork(conn, now)
        uow.load_tasks(ids)
        for i, task_id in enumerate(ids):
            uow.add_attempt(domain.reserve(uow.tasks[task_id], f"{i:032x}", "a" * 32, now))
        uow.flush()
    with world.engine.connect() as conn:
        rows = conn.execute(select(tasks.c.id, tasks.c.state, tasks.c.epoch,
                                   tasks.c.current_attempt_id)
                            .where(tasks.c.id.in_(ids))).all()
    assert len(rows) == 300
    assert {(r.state, r.epoch) for r in rows} == {("RUNNING", 1)}
    by_id = {r.id: r.current_attempt_id for r in rows}
    assert [by_id[t] for t in ids] == [f"{i:032x}" for i in range(300)]  # each its own value


def test_one_moved_row_rolls_back_the_whole_batch(world: World) -> None:
    ids = _submit(world, 5)
    now = world.clock()
    with pytest.raises(OrbitError) as exc, world.engine.begin() as conn:
        uow = UnitOfWork(conn, now)
        uow.load_tasks(ids)
        for i, task_id in enumerate(ids):
            uow.add_attempt(domain.reserve(uow.tasks[task_id], f"{i:032x}", "b" * 32, now))
        # Another writer moves one task between our read and our write.
        conn.execute(update(tasks).where(tasks.c.id == ids[3]).values(epoch=9))
        uow.flush()
    assert exc.value.code is ErrorCode.UNAVAILABLE and exc.value.retryable
    with world.engine.connect() as conn:
        states = conn.execute(select(tasks.c.state, tasks.c.epoch)
                              .where(tasks.c.id.in_(ids))).all()
        assert {tuple(r) for r in states} == {("PENDING", 0)}
        assert conn.execute(select(attempts.c.id)).first() is None
