"""With 200k finished tasks in the database, the dispatch, reaper and lookup queries are
index searches, never table scans. Asserted on SQLite's EXPLAIN QUERY PLAN text (no timings)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from support.bulk_rows import NOW, Q, attempt_row, task_row

from orbit_server.store import (
    create_engine_for,
    instances,
    limits,
    listing,
    migrate,
    queries,
    retention,
    task_rows,
)
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_AUDIT, INSERT_TASK
from orbit_server.store.tables import audit, evidence, tasks

FINISHED = 200_000
# One xdist worker runs the module, so the module-scoped big database is built once.
pytestmark = pytest.mark.xdist_group("index_plans")
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
            INSERT_TASK.run(conn, [task_row(i, rnd.choice(("SUCCEEDED", "FAILED"))) for i in ids])
            INSERT_ATTEMPT.run(conn, [attempt_row(i, "FINISHED") for i in ids])
            INSERT_AUDIT.run(conn, [
                {"task_id": f"{i:032x}", "attempt_id": None, "at_ms": NOW, "actor": "server",
                 "kind": "k", "from_state": None, "to_state": None, "detail": None}
                for i in ids
            ])
        # A few live rows, as in a running system.
        INSERT_TASK.run(conn, [task_row(FINISHED + i, "PENDING") for i in range(50)])
        INSERT_ATTEMPT.run(conn, [attempt_row(FINISHED + i, "RUNNING") for i in range(50)])
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(tasks)) == FINISHED + 50
    try:
        yield engine
    finally:
        engine.dispose()


def plan(engine: Engine, stmt: Any, **params: Any) -> str:
    """The plan of ``stmt`` as the server runs it: its SQL with bound parameters (IN lists
    expanded).

    The plan must not depend on the values: SQLite uses a partial index for a bound value
    only by re-preparing the statement on every execution to compare it with the index's
    WHERE, so a query states the rows of a partial index with constants
    (tables.state_is). The same SQL with every parameter NULL must be planned alike."""
    compiled: Any = stmt.compile(dialect=engine.dialect)
    expanded = compiled.construct_expanded_state(params)
    convert = expanded.processors
    values = [convert[name](expanded.parameters[name]) if name in convert
              else expanded.parameters[name] for name in expanded.positiontup]
    with engine.connect() as conn:
        found, blind = (
            "\n".join(str(r[-1]) for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + expanded.statement, tuple(bound)).all())
            for bound in (values, [None] * len(values)))
    assert found == blind, f"the plan depends on a bound value:\n{found}\nwith NULLs:\n{blind}"
    return found


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
    # One range per priority rank, each bounded by available_at: a delayed task of a high
    # priority is never scanned past (the search stays logarithmic).
    assert "dispatch_rank=? AND fair_turn=? AND available_at_ms<?" in text, text


def test_dispatch_over_several_capabilities_uses_the_dispatch_index(big_db: Engine) -> None:
    params = {"queue_id": Q, "now": NOW, "n": 100}
    for i in range(3):
        params.update({f"handler_{i}": f"h{i}", f"handler_version_{i}": "v1",
                       f"payload_version_{i}": "v1"})
    text = plan(big_db, queries.dispatch_many(3), **params)
    assert text.count("dispatch_rank=? AND fair_turn=? AND available_at_ms<?") == 3, text


def test_what_is_left_to_dispatch_reads_the_dispatch_index(big_db: Engine) -> None:
    text = plan(big_db, queries.DISPATCH_LEFT, queue_id=Q, handler="h", handler_version="v1",
                payload_version="v1", now=NOW, n=2)
    assert_indexed(text, "ix_tasks_dispatch")
    assert "dispatch_rank=? AND fair_turn=? AND available_at_ms<?" in text, text
    # When each queue's waiting tasks become dispatchable: an index of PENDING rows only.
    text = plan(big_db, queries.FIRST_AVAILABLE_BY_QUEUE)
    assert_indexed(text, "ix_tasks_")
    assert "ix_tasks_dispatch" in text or "ix_tasks_state_deadline" in text, text


def test_tasks_that_require_labels_are_ranges_of_the_dispatch_index(big_db: Engine) -> None:
    # Each requirement is a range of its own in dispatch order (claims.labelled_rows), and
    # the requirements a capability holds are found one index seek at a time.
    common = {"queue_id": Q, "handler": "h", "handler_version": "v1", "payload_version": "v1"}
    for stmt in (queries.DISPATCH_KEYED, queries.DISPATCH_KEYED_LEFT):
        text = plan(big_db, stmt, **common, requires_key="a" * 32, now=NOW, n=10)
        assert_indexed(text, "ix_tasks_dispatch")
        assert ("requires_key=? AND dispatch_rank=? AND fair_turn=? AND available_at_ms<?"
                in text), text
        assert "TEMP B-TREE" not in text, text
    text = plan(big_db, queries.NEXT_REQUIREMENT, **common, after="")
    assert_indexed(text, "ix_tasks_dispatch")
    assert "requires_key>?" in text and "TEMP B-TREE" not in text, text
    # The common case keeps its one range: requires_key IS NULL is an equality of the index.
    text = plan(big_db, queries.DISPATCH_ONE, **common, now=NOW, n=10)
    assert "requires_key=? AND dispatch_rank=? AND fair_turn=? AND available_at_ms<?" in text, text


def test_fair_dispatch_reads_one_range_in_turn_order(big_db: Engine) -> None:
    # Fair dispatch (docs/flow-control.md): a fair queue's numbered tasks are one range of
    # ix_tasks_dispatch per rank in (rank, turn) order: index seeks, no sort, never a scan.
    common = {"queue_id": Q, "handler": "h", "handler_version": "v1", "payload_version": "v1"}
    for stmt in (queries.FAIR_NUMBERED, queries.FAIR_NUMBERED_LEFT):
        text = plan(big_db, stmt, **common, now=NOW, n=10)
        assert_indexed(text, "ix_tasks_dispatch")
        assert "requires_key=? AND dispatch_rank=? AND fair_turn>?" in text, text
        assert "TEMP B-TREE" not in text, text
    for stmt in (queries.FAIR_NUMBERED_KEYED, queries.FAIR_NUMBERED_KEYED_LEFT):
        text = plan(big_db, stmt, **common, requires_key="k", now=NOW, n=10)
        assert "requires_key=? AND dispatch_rank=? AND fair_turn>?" in text, text
        assert "TEMP B-TREE" not in text, text


def raw_plan(engine: Engine, sql: str, params: dict[str, Any]) -> str:
    """``plan`` of a statement written as SQLite SQL with named parameters."""
    with engine.connect() as conn:
        found, blind = (
            "\n".join(str(r[-1]) for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + sql, bound).all())
            for bound in (params, dict.fromkeys(params)))
    assert found == blind, f"the plan depends on a bound value:\n{found}\nwith NULLs:\n{blind}"
    return found


def _without_cte_scans(text: str) -> str:
    """The plan without its scans of the statement's own small rows (the CTE ``v``, its
    constant seed row), which are not tables."""
    return "\n".join(line for line in text.splitlines()
                     if not re.fullmatch(r"SCAN (v|CONSTANT ROW|\d+ CONSTANT ROWS)", line))


def test_limit_usage_and_pruning_range_over_the_keys_holds(big_db: Engine) -> None:
    # The holds are their primary key (WITHOUT ROWID, migration 0021): a key's range of it.
    keys = ["k:1", "k:2"]
    for stmt, params in ((limits.KEYS_USAGE, {"since": NOW}),
                         (limits.PRUNABLE_HOLDS, {"before": NOW, "missing_before": NOW,
                                                  "n": 10})):
        text = plan(big_db, stmt, queue_id=Q, keys=keys, **params)
        assert_indexed(text, "SEARCH limit_holds USING PRIMARY KEY (queue_id=? AND limit_key=?)")
    # SQLite prunes in that same range, each old hold's attempt one primary-key seek.
    text = plan(big_db, limits.PRUNE_HOLDS_SQLITE, queue_id=Q, keys=keys, before=NOW,
                missing_before=NOW)
    assert_indexed(text, "SEARCH limit_holds USING PRIMARY KEY (queue_id=? AND limit_key=?)")
    assert text.count("SEARCH attempts USING INDEX sqlite_autoindex_attempts_1 (id=?)") == 2, text


def test_reaper_queries_use_their_indexes(big_db: Engine) -> None:
    # Lapsed leases and stale reservations: each a range of one index, in its order.
    for stmt, params, search in (
            (queries.EXPIRED_LEASES, {"now": NOW, "n": 1000},
             "(state=? AND lease_expires_at_ms<?)"),
            (queries.STALE_RESERVATIONS, {"before": NOW, "n": 1000},
             "(state=? AND lease_expires_at_ms=? AND reserved_at_ms<?)")):
        text = plan(big_db, stmt, **params)
        assert_indexed(text, f"ix_attempts_state_lease_reserved {search}")
        assert "TEMP B-TREE" not in text, text
    assert_indexed(plan(big_db, queries.OVERDUE_PENDING, now=NOW, n=1000),
                   "ix_tasks_state_deadline")
    assert_indexed(plan(big_db, queries.NEXT_LEASE_EXPIRY), "ix_attempts_state_lease_reserved")
    assert_indexed(plan(big_db, queries.OLDEST_RESERVATION), "ix_attempts_state_lease_reserved")
    assert_indexed(plan(big_db, queries.NEXT_PENDING_DEADLINE), "ix_tasks_state_deadline")


def test_an_instances_open_attempts_are_an_index_search(big_db: Engine) -> None:
    ids = ["b" * 32, "c" * 32]
    for stmt, params in ((instances.RESERVED_OF_INSTANCE, {"instance_id": ids[0]}),
                         (listing.RUNNING_OF_INSTANCES, {"ids": ids}),
                         (retention.OPEN_ATTEMPT_INSTANCES, {"ids": ids})):
        text = plan(big_db, stmt, **params)
        assert_indexed(text, "ix_attempts_instance_state (instance_id=?")
    # A queue's running attempts: the RUNNING range of the reaper's index, every queue's.
    assert_indexed(plan(big_db, listing.RUNNING_OF_QUEUE, queue_id=Q),
                   "ix_attempts_state_lease_reserved (state=?)")


def test_lookups_use_keys_and_indexes(big_db: Engine) -> None:
    ids = [f"{i:032x}" for i in (5, 77, 199_999)]
    assert_indexed(plan(big_db, queries.TASKS_BY_ID, ids=ids), "sqlite_autoindex_tasks_1")
    assert_indexed(plan(big_db, queries.ATTEMPTS_BY_ID, ids=ids), "sqlite_autoindex_attempts_1")
    joined = plan(big_db, queries.ATTEMPTS_WITH_TASKS_BY_ID, ids=ids)
    assert_indexed(joined, "sqlite_autoindex_attempts_1")
    assert_indexed(joined, "sqlite_autoindex_tasks_1")
    assert_indexed(plan(big_db, queries.RECEIPTS_BY_MSG, instance_id="b" * 32,
                        msg_ids=["m1", "m2"]), "uq_receipts_instance_msg")
    assert_indexed(plan(big_db, queries.ATTEMPTS_OF_TASK, task_id=ids[0]), "ix_attempts_task")
    assert_indexed(plan(big_db, select(audit).where(audit.c.task_id == ids[0])
                        .order_by(audit.c.at_ms, audit.c.id)), "ix_audit_task_at")
    assert_indexed(plan(big_db, select(evidence).where(evidence.c.task_id == ids[0])),
                   "ix_evidence_task")
    assert_indexed(plan(big_db, task_rows.TASKS_BY_OPERATION_KEY, queue_id=Q,
                        keys=["k1", "k2"]),
                   "uq_tasks_queue_operation_key (queue_id=? AND operation_key=?)")


def test_receipt_pruning_ranges_over_the_insertion_order(big_db: Engine) -> None:
    assert_indexed(plan(big_db, queries.RECEIPTS_AFTER, after=0, n=1000),
                   "INTEGER PRIMARY KEY (rowid>?)")
    assert_indexed(plan(big_db, queries.DELETE_RECEIPTS_UP_TO, upto=1000, before=NOW),
                   "INTEGER PRIMARY KEY (rowid<?)")


def test_task_list_pages_range_over_the_listing_index(big_db: Engine) -> None:
    from orbit_server.domain.listing import Position, TaskFilter
    from orbit_wire.model import TaskState

    for newest in (True, False):
        for states in ((TaskState.SUCCEEDED,), ()):  # one state, and every state's range
            for filt in (TaskFilter(states=states, newest_first=newest),
                         TaskFilter(states=states, newest_first=newest, handler="h",
                                    created_after=NOW - 5,
                                    after=Position(NOW - 100, f"{100:032x}"))):
                text = plan(big_db, listing.state_range(filt), **listing.state_params(filt, Q))
                # Every state's range searches the index ("SCAN anon_N" reads a range's
                # few rows back from its subquery, not a table).
                searches = [ln for ln in text.splitlines() if ln.startswith("SEARCH tasks")]
                assert len(searches) == len(filt.wanted_states()), text
                assert all("ix_tasks_queue_state_created" in ln for ln in searches), text
                assert "SCAN tasks" not in text, text
                assert "TEMP B-TREE" not in text  # the index gives each range's order
    assert_indexed(plan(big_db, listing.INSTANCES_SEEN_SINCE, since=NOW), "ix_instances_seen")


def test_retention_and_start_by_range_over_their_indexes(big_db: Engine) -> None:
    assert_indexed(plan(big_db, retention.OLD_FINISHED_TASKS, before=NOW, n=500),
                   "ix_tasks_finished")
    assert_indexed(plan(big_db, retention.OLD_INSTANCES, before=NOW, n=500),
                   "ix_instances_seen")
    assert_indexed(plan(big_db, queries.START_BY_PASSED, now=NOW, n=1000), "ix_tasks_start_by")
    assert_indexed(plan(big_db, queries.NEXT_START_BY), "ix_tasks_start_by")


def test_throughput_reads_the_finish_time_range(big_db: Engine) -> None:
    # The dashboard's chart: the tasks finished lately, not every task of the queue.
    text = plan(big_db, listing.FINISHED_BY_WINDOW, since=NOW - 1_800_000, until=NOW,
                window_ms=60_000, queue_id=Q)
    assert_indexed(text, "ix_tasks_finished")
