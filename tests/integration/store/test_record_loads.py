"""store.rows: the unit of work's loads build records by column position, skipping a dict per
row; they must give exactly the records the by-name constructors make from the same rows,
for every field (a column added to the table or a field added to a record out of step
shows up here)."""

from __future__ import annotations

from sqlalchemy import select
from store_support import World

from orbit_server.store import queries
from orbit_server.store.rows import UnitOfWork, attempt_rec, task_rec
from orbit_server.store.tables import attempts, tasks
from orbit_wire.model import Outcome


def test_positional_loads_match_the_by_name_records(world: World) -> None:
    b = world.hello()
    world.submit(schedule_to_start_ms=60_000, lease_ttl_ms=20_000, attempt_timeout_ms=40_000,
                 max_attempts=7, backoff={"initial_ms": 11, "max_ms": 22})
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.FAILED, code="HANDLER_ERROR", retryable=True)
    with world.engine.connect() as conn:
        attempt_rows = [dict(r) for r in conn.execute(select(attempts)).mappings()]
        task_rows = [dict(r) for r in conn.execute(select(*queries.TASK_REC_COLUMNS))
                     .mappings()]
        ids = [r["id"] for r in attempt_rows]
        for load in ("load_attempts_and_tasks", "load_attempts"):
            uow = UnitOfWork(conn, world.clock())
            getattr(uow, load)(ids)
            assert [uow.attempts[r["id"]] for r in attempt_rows] == [attempt_rec(r)
                                                                    for r in attempt_rows]
            if load == "load_attempts_and_tasks":
                assert [uow.tasks[r["id"]] for r in task_rows] == [task_rec(r)
                                                                  for r in task_rows]
        uow = UnitOfWork(conn, world.clock())
        uow.load_tasks([r["id"] for r in task_rows])
        assert [uow.tasks[r["id"]] for r in task_rows] == [task_rec(r) for r in task_rows]
    for row in task_rows:  # an oracle apart from the constructors: field by field, by name
        rec = task_rec(row)
        for name in rec.__struct_fields__:
            if name in row:
                assert getattr(rec, name) == row[name], name
        assert (rec.backoff.initial_ms, rec.backoff.max_ms, rec.backoff.multiplier,
                rec.backoff.jitter) == (row["backoff_initial_ms"], row["backoff_max_ms"],
                                        row["backoff_multiplier"], row["backoff_jitter"])
    for row in attempt_rows:
        rec = attempt_rec(row)
        assert {name: getattr(rec, name) for name in rec.__struct_fields__} == row
    (one,) = attempt_rows
    rec = attempt_rec(one)
    assert rec.outcome is Outcome.FAILED and rec.retryable is True and rec.code == "HANDLER_ERROR"
    (row,) = task_rows
    assert task_rec({**row, "result": '{"a":1}'}).result == '{"a":1}'
    assert tasks.c.id.name == queries.TASK_REC_COLUMNS[0].name
