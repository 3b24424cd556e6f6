"""With 200k finished tasks in the database, the dispatch, reaper and lookup queries are
index searches, never table scans. Asserted on SQLite's EXPLAIN QUERY PLAN text (no timings)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from orbit_server.store import create_engine_for, migrate, queries
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_AUDIT, INSERT_TASK
from orbit_server.store.tables import attempts, audit, evidence, tasks

FINISHED = 200_000
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


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("plans") / "orbit.db"
    url = f"sqlite:///{path}"
    migrate(url)
    engine = create_engine_for(url)
    rnd = random.Random(3)
    with engine.begin() as conn:
        for start in range(0, FINISHED, 20_000):
            ids = range(start, start + 20_000)
            INSERT_TASK.run(conn, [_task(i, rnd.choice(("SUCCEEDED", "FAILED"))) for i in ids])
            INSERT_ATTEMPT.run(conn, [_attempt(i, "FINISHED") for i in ids])
            INSERT_AUDIT.run(conn, [
                {"task_id": f"{i:032x}", "attempt_id": None, "at_ms": NOW, "actor": "server",
                 "kind": "k", "from_state": None, "to_state": None, "detail": None}
                for i in ids
            ])
        # A few live rows, as in a running system.
        INSERT_TASK.run(conn, [_task(FINISHED + i, "PENDING") for i in range(50)])
        INSERT_ATTEMPT.run(conn, [_attempt(FINISHED + i, "RUNNING") for i in range(50)])
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(tasks)) == FINISHED + 50
    try:
        yield engine
    finally:
        engine.dispose()


def plan(engine: Engine, stmt: Any, **params: Any) -> str:
    bound = stmt.params(**params) if params else stmt
    sql = str(bound.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
    return "\n".join(str(r[-1]) for r in rows)


def assert_indexed(text: str, index: str) -> None:
    assert index in text, text
    for line in text.splitlines():
        # "SCAN <table>" without an index is a full table scan.
        if line.startswith("SCAN ") and "INDEX" not in line:
            pytest.fail(f"full scan in plan:\n{text}")


def test_dispatch_uses_the_dispatch_index(big_db: Engine) -> None:
    text = plan(big_db, queries.DISPATCH_ONE, queue_id=Q, handler="h", handler_version="v1",
                payload_version="v1", now=NOW, n=100)
    assert_indexed(text, "ix_tasks_dispatch")
    assert "TEMP B-TREE" not in text  # ordered by the index, no sort of the whole range


def test_reaper_queries_use_their_indexes(big_db: Engine) -> None:
    assert_indexed(plan(big_db, queries.EXPIRED_LEASES, now=NOW, n=1000),
                   "ix_attempts_state_lease")
    assert_indexed(plan(big_db, queries.STALE_RESERVATIONS, before=NOW, n=1000),
                   "ix_attempts_state_reserved")
    assert_indexed(plan(big_db, queries.OVERDUE_PENDING, now=NOW, n=1000),
                   "ix_tasks_state_deadline")
    assert_indexed(plan(big_db, select(func.min(attempts.c.lease_expires_at_ms))
                        .where(attempts.c.state == "RUNNING")), "ix_attempts_state_lease")
    assert_indexed(plan(big_db, select(func.min(tasks.c.deadline_at_ms))
                        .where(tasks.c.state == "PENDING")), "ix_tasks_state_deadline")


def test_lookups_use_keys_and_indexes(big_db: Engine) -> None:
    ids = [f"{i:032x}" for i in (5, 77, 199_999)]
    assert_indexed(plan(big_db, queries.TASKS_BY_ID, ids=ids), "sqlite_autoindex_tasks_1")
    assert_indexed(plan(big_db, queries.ATTEMPTS_BY_ID, ids=ids), "sqlite_autoindex_attempts_1")
    joined = plan(big_db, queries.ATTEMPTS_WITH_TASKS_BY_ID, ids=ids)
    assert_indexed(joined, "sqlite_autoindex_attempts_1")
    assert_indexed(joined, "sqlite_autoindex_tasks_1")
    assert_indexed(plan(big_db, queries.RECEIPTS_BY_MSG, instance_id="b" * 32,
                        msg_ids=["m1", "m2"]), "sqlite_autoindex_receipts_1")
    assert_indexed(plan(big_db, queries.ATTEMPTS_OF_TASK, task_id=ids[0]), "ix_attempts_task")
    assert_indexed(plan(big_db, select(audit).where(audit.c.task_id == ids[0])
                        .order_by(audit.c.at_ms, audit.c.id)), "ix_audit_task_at")
    assert_indexed(plan(big_db, select(evidence).where(evidence.c.task_id == ids[0])),
                   "ix_evidence_task")
    assert_indexed(plan(big_db, select(tasks).where(tasks.c.queue_id == Q,
                                                    tasks.c.operation_key.in_(["k1", "k2"]))),
                   "(queue_id=? AND operation_key=?)")  # the unique constraint's index
    assert_indexed(plan(big_db, select(attempts).where(attempts.c.instance_id == "b" * 32,
                                                       attempts.c.state == "RESERVED")),
                   "ix_attempts_instance_state")
