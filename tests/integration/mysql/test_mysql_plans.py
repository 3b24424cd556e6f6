"""On MariaDB, with 20k finished tasks, the hot statements use their indexes (EXPLAIN's key),
never a full scan: the same promise test_index_plans.py checks on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from support.bulk_rows import NOW, Q, attempt_row, task_row

from orbit_server.store import create_engine_for, queries
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_TASK

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)

FINISHED = 20_000
@pytest.fixture
def big_db(db_url: str) -> Iterator[Engine]:
    engine = create_engine_for(db_url)
    with engine.begin() as conn:
        for start in range(0, FINISHED, 5_000):
            ids = range(start, start + 5_000)
            INSERT_TASK.run(conn, [task_row(i, "SUCCEEDED") for i in ids])
            INSERT_ATTEMPT.run(conn, [attempt_row(i, "FINISHED") for i in ids])
        live = range(FINISHED, FINISHED + 50)
        INSERT_TASK.run(conn, [task_row(i, "PENDING") for i in live])
        INSERT_ATTEMPT.run(conn, [attempt_row(i, "RUNNING") for i in live])
        conn.exec_driver_sql("ANALYZE TABLE tasks, attempts")
    try:
        yield engine
    finally:
        engine.dispose()


def _plan(engine: Engine, stmt: Any, **params: Any) -> list[dict[str, Any]]:
    sql = str(stmt.params(**params).compile(dialect=engine.dialect,
                                            compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return [dict(r) for r in conn.exec_driver_sql("EXPLAIN " + sql).mappings()]


@pytest.mark.parametrize(("name", "params", "index"), [
    ("DISPATCH_ONE", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                      "payload_version": "v1", "now": NOW, "n": 64}, "ix_tasks_dispatch"),
    ("EXPIRED_LEASES", {"now": NOW, "n": 100}, "ix_attempts_state_lease"),
    ("STALE_RESERVATIONS", {"before": NOW, "n": 100}, "ix_attempts_state_reserved"),
    ("OVERDUE_PENDING", {"now": NOW, "n": 100}, "ix_tasks_state_deadline"),
    ("TASKS_BY_ID", {"ids": [f"{i:032x}" for i in range(5)]}, "PRIMARY"),
])
def test_hot_statement_uses_its_index(big_db: Engine, name: str, params: dict[str, Any],
                                      index: str) -> None:
    (row,) = _plan(big_db, getattr(queries, name), **params)
    assert row["key"] == index, row
    assert row["type"] != "ALL", row
    assert int(row["rows"] or 0) < 1_000, row  # a range, not the 20k finished rows


def test_attempts_with_tasks_join_on_primary_keys(big_db: Engine) -> None:
    rows = _plan(big_db, queries.ATTEMPTS_WITH_TASKS_BY_ID,
                 ids=[f"{i:032x}" for i in range(5)])
    assert {r["table"]: r["key"] for r in rows} == {"attempts": "PRIMARY", "tasks": "PRIMARY"}


@pytest.mark.parametrize("newest", [True, False])
def test_task_list_page_is_an_index_range(big_db: Engine, newest: bool) -> None:
    from orbit_server.domain.listing import Position, TaskFilter
    from orbit_server.store import listing
    from orbit_wire.model import TaskState

    filt = TaskFilter(newest_first=newest, after=Position(NOW - 10_000, f"{10_000:032x}"))
    params = listing.state_params(filt, Q, TaskState.SUCCEEDED)
    (row,) = _plan(big_db, listing.state_range(filt), **params)
    assert row["key"] == "ix_tasks_queue_state_created", row
    assert "filesort" not in str(row.get("Extra") or ""), row
    (row,) = _plan(big_db, listing.INSTANCES_SEEN_SINCE, since=NOW)
    assert row["type"] != "ALL" or int(row["rows"] or 0) < 10, row
