"""On MariaDB, with 20k finished tasks, the hot statements use their indexes (EXPLAIN's key),
never a full scan: the same promise test_index_plans.py checks on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from orbit_server.store import create_engine_for, queries
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_TASK

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)

FINISHED = 20_000
Q = "a" * 32
NOW = 1_800_000_000_000


def _task(i: int, state: str) -> dict[str, Any]:
    return {
        "id": f"{i:032x}", "queue_id": Q, "state": state, "handler": "h",
        "handler_version": "v1", "payload_version": "v1", "payload": "{}",
        "idempotency": "IDEMPOTENT", "max_attempts": 3, "backoff_initial_ms": 0,
        "backoff_max_ms": 0, "backoff_multiplier": 1.0, "backoff_jitter": 0.0,
        "attempt_timeout_ms": 1000, "lease_ttl_ms": 1000, "deadline_at_ms": NOW + i,
        "operation_key": f"k{i}", "created_at_ms": NOW - i, "updated_at_ms": NOW,
        "available_at_ms": NOW - i, "epoch": 1, "attempts_started": 1, "uncertain": False,
        "result": "1", "failure_code": None, "failure_details": None,
        "cancel_requested": False, "current_attempt_id": None,
    }


def _attempt(i: int, state: str) -> dict[str, Any]:
    return {
        "id": f"{i:032x}", "task_id": f"{i:032x}", "queue_id": Q, "epoch": 1,
        "attempt_number": 1, "instance_id": "b" * 32, "reserved_at_ms": NOW - i,
        "state": state, "child_pid": None, "started_at_ms": NOW - i, "finished_at_ms": NOW,
        "lease_expires_at_ms": NOW + i, "attempt_deadline_at_ms": NOW + i, "renewals": 0,
        "outcome": "SUCCEEDED", "code": None, "retryable": False, "details": None,
        "exit_code": 0, "signal": None, "cpu_ms": 1, "peak_rss_bytes": 1, "kill_reason": None,
        "decision": "SUCCEEDED", "decision_rule": "handler_succeeded",
    }


@pytest.fixture
def big_db(db_url: str) -> Iterator[Engine]:
    engine = create_engine_for(db_url)
    with engine.begin() as conn:
        for start in range(0, FINISHED, 5_000):
            ids = range(start, start + 5_000)
            INSERT_TASK.run(conn, [_task(i, "SUCCEEDED") for i in ids])
            INSERT_ATTEMPT.run(conn, [_attempt(i, "FINISHED") for i in ids])
        live = range(FINISHED, FINISHED + 50)
        INSERT_TASK.run(conn, [_task(i, "PENDING") for i in live])
        INSERT_ATTEMPT.run(conn, [_attempt(i, "RUNNING") for i in live])
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
