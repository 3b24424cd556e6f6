"""On MariaDB, with 20k finished tasks, the hot statements use their indexes (EXPLAIN's key),
never a full scan: the same promise test_index_plans.py checks on SQLite."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from support.bulk_rows import NOW, Q, attempt_row, task_row
from support.mariadb import MariaDBPool, require_mariadb

from orbit_server.store import create_engine_for, queries
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_TASK

# xdist_group: one worker runs the module, so its module-scoped database is filled once.
pytestmark = [pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True),
              pytest.mark.usefixtures("orbit_store"), pytest.mark.xdist_group("mysql_plans")]

FINISHED = 20_000


@pytest.fixture(scope="module")
def big_db(mariadb_pool: MariaDBPool | None) -> Iterator[Engine]:
    """One database for the module's tests, which only read plans (EXPLAIN)."""
    require_mariadb()
    assert mariadb_pool is not None
    url = mariadb_pool.acquire()
    engine = create_engine_for(url)
    try:
        with engine.begin() as conn:
            for start in range(0, FINISHED, 5_000):
                ids = range(start, start + 5_000)
                INSERT_TASK.run(conn, [task_row(i, "SUCCEEDED") for i in ids])
                INSERT_ATTEMPT.run(conn, [attempt_row(i, "FINISHED") for i in ids])
            live = range(FINISHED, FINISHED + 50)
            INSERT_TASK.run(conn, [task_row(i, "PENDING") for i in live])
            INSERT_ATTEMPT.run(conn, [attempt_row(i, "RUNNING") for i in live])
            conn.exec_driver_sql("ANALYZE TABLE tasks, attempts")
        yield engine
    finally:
        engine.dispose()
        mariadb_pool.release(url)


def _plan(engine: Engine, stmt: Any, **params: Any) -> list[dict[str, Any]]:
    sql = str(stmt.params(**params).compile(dialect=engine.dialect,
                                            compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return [dict(r) for r in conn.exec_driver_sql("EXPLAIN " + sql).mappings()]


@pytest.mark.parametrize(("name", "params", "index"), [
    ("DISPATCH_ONE", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                      "payload_version": "v1", "now": NOW, "n": 64}, "ix_tasks_dispatch"),
    ("EXPIRED_LEASES", {"now": NOW, "n": 100}, "ix_attempts_state_lease_reserved"),
    ("STALE_RESERVATIONS", {"before": NOW, "n": 100}, "ix_attempts_state_lease_reserved"),
    ("OVERDUE_PENDING", {"now": NOW, "n": 100}, "ix_tasks_state_deadline"),
    ("TASKS_BY_ID", {"ids": [f"{i:032x}" for i in range(5)]}, "PRIMARY"),
    ("DISPATCH_LEFT", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                       "payload_version": "v1", "now": NOW, "n": 2}, "ix_tasks_dispatch"),
    ("DISPATCH_KEYED", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                        "payload_version": "v1", "requires_key": "a" * 32, "now": NOW,
                        "n": 64}, "ix_tasks_dispatch"),
    ("NEXT_REQUIREMENT", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                          "payload_version": "v1", "after": ""}, "ix_tasks_dispatch"),
    ("FAIR_NUMBERED", {"queue_id": Q, "handler": "h", "handler_version": "v1",
                       "payload_version": "v1", "now": NOW, "n": 64}, "ix_tasks_dispatch"),
    ("RECEIPTS_BY_MSG", {"instance_id": "b" * 32, "msg_ids": ["m1", "m2"]},
     "uq_receipts_instance_msg"),
    ("RECEIPTS_AFTER", {"after": 0, "n": 1000}, "PRIMARY"),
    ("task_rows.TASKS_BY_OPERATION_KEY", {"queue_id": Q, "keys": ["k1", "k2"]},
     "uq_tasks_queue_operation_key"),
])
def test_hot_statement_uses_its_index(big_db: Engine, name: str, params: dict[str, Any],
                                      index: str) -> None:
    (row,) = _plan(big_db, _statement(name), **params)
    assert row["key"] == index, row
    assert row["type"] != "ALL", row
    assert int(row["rows"] or 0) < 1_000, row  # a range, not the 20k finished rows


# Both indexes of attempts keyed by the state hold every state here (no partial indexes),
# so an instance's or a queue's open attempts are as narrow a range on the instance index as
# on the reaper's; MariaDB picks one by its statistics. Either reads the open attempts only,
# never the finished ones.
_OPEN_ATTEMPT_RANGES = {"ix_attempts_instance_state", "ix_attempts_state_lease_reserved"}


@pytest.mark.parametrize(("name", "params"), [
    ("instances.RESERVED_OF_INSTANCE", {"instance_id": "b" * 32}),
    ("listing.RUNNING_OF_INSTANCES", {"ids": ["b" * 32, "c" * 32]}),
    ("retention.OPEN_ATTEMPT_INSTANCES", {"ids": ["b" * 32, "c" * 32]}),
    ("listing.RUNNING_OF_QUEUE", {"queue_id": Q}),
])
def test_open_attempts_are_a_range_of_open_attempts(big_db: Engine, name: str,
                                                    params: dict[str, Any]) -> None:
    (row,) = _plan(big_db, _statement(name), **params)
    assert row["key"] in _OPEN_ATTEMPT_RANGES, row
    assert row["type"] != "ALL", row
    assert int(row["rows"] or 0) < 1_000, row


@pytest.mark.parametrize("name", ["NEXT_LEASE_EXPIRY", "OLDEST_RESERVATION",
                                  "NEXT_PENDING_DEADLINE"])
def test_when_next_due_is_read_from_an_index_end(big_db: Engine, name: str) -> None:
    # MIN over an index's leading range: answered from the index while planning (no row
    # in the range: nothing to read either).
    (row,) = _plan(big_db, getattr(queries, name))
    assert row["Extra"] in ("Select tables optimized away", "No matching min/max row"), row


def _statement(name: str) -> Any:
    """queries.NAME, or module.NAME for a statement of another store module."""
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(f"orbit_server.store.{module or 'queries'}"), attr)


def test_attempts_with_tasks_join_on_primary_keys(big_db: Engine) -> None:
    rows = _plan(big_db, queries.ATTEMPTS_WITH_TASKS_BY_ID,
                 ids=[f"{i:032x}" for i in range(5)])
    assert {r["table"]: r["key"] for r in rows} == {"attempts": "PRIMARY", "tasks": "PRIMARY"}


@pytest.mark.parametrize("newest", [True, False])
def test_task_list_page_is_an_index_range(big_db: Engine, newest: bool) -> None:
    from orbit_server.domain.listing import Position, TaskFilter
    from orbit_server.store import listing, retention
    from orbit_wire.model import TaskState

    for states in ((TaskState.SUCCEEDED,), ()):  # one state, and every state's range
        filt = TaskFilter(states=states, newest_first=newest,
                          after=Position(NOW - 10_000, f"{10_000:032x}"))
        rows = _plan(big_db, listing.state_range(filt), **listing.state_params(filt, Q))
        ranges = [r for r in rows if r["table"] == "tasks"]
        assert len(ranges) == len(filt.wanted_states()), rows
        for row in ranges:
            assert row["key"] == "ix_tasks_queue_state_created", row
            assert "filesort" not in str(row.get("Extra") or ""), row
    (row,) = _plan(big_db, retention.OLD_FINISHED_TASKS, before=NOW - 15_000, n=500)
    assert row["key"] == "ix_tasks_finished" and row["type"] != "ALL", row
    (row,) = _plan(big_db, queries.START_BY_PASSED, now=NOW, n=500)
    assert row["key"] == "ix_tasks_start_by", row
