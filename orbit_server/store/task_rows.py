"""A task's rows as producers and the worker protocol read them beside the unit of work: the
task by ID, its attempts, evidence and audit trail, its last attempt, a replayed claim's
attempts, the tasks of a queue carrying given operation keys; and a submit's inserts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, select

from . import queries
from .prepared import first_row
from .rows import IN_CHUNK, INSERT_AUDIT, INSERT_TASK
from .tables import audit, evidence, tasks

__all__ = ["attempts_of_task", "audit_of_task", "claimed_attempts", "evidence_of_task",
           "insert_new_tasks", "keep_run_budget", "last_attempt_of_task", "task_row",
           "task_rows", "tasks_by_operation_key"]

EVIDENCE_OF_TASK = (select(evidence).where(evidence.c.task_id == bindparam("task_id"))
                    .order_by(evidence.c.received_at_ms, evidence.c.id))
AUDIT_OF_TASK = (select(audit).where(audit.c.task_id == bindparam("task_id"))
                 .order_by(audit.c.at_ms, audit.c.id))
TASKS_BY_IDS = select(tasks).where(tasks.c.id.in_(bindparam("ids", expanding=True)))
TASKS_BY_OPERATION_KEY = select(tasks).where(
    tasks.c.queue_id == bindparam("queue_id"),
    tasks.c.operation_key.in_(bindparam("keys", expanding=True)))


def task_row(conn: Connection, task_id: str) -> dict[str, Any] | None:
    """The task's row (every column), or None; a statement built once, on the driver's
    prepared path (every task read and long poll asks)."""
    return first_row(conn, queries.TASK_BY_ID, {"id": task_id})


def task_rows(conn: Connection, task_ids: Sequence[str]) -> list[RowMapping]:
    """The rows (every column) of those of ``task_ids`` that exist, in chunks."""
    found: list[RowMapping] = []
    for start in range(0, len(task_ids), IN_CHUNK):
        chunk = list(task_ids[start:start + IN_CHUNK])
        found.extend(conn.execute(TASKS_BY_IDS, {"ids": chunk}).mappings())
    return found


def attempts_of_task(conn: Connection, task_id: str) -> list[RowMapping]:
    """The task's attempts, by epoch."""
    return list(conn.execute(queries.ATTEMPTS_OF_TASK, {"task_id": task_id}).mappings())


def evidence_of_task(conn: Connection, task_id: str) -> list[RowMapping]:
    """The evidence stored for the task, oldest first."""
    return list(conn.execute(EVIDENCE_OF_TASK, {"task_id": task_id}).mappings())


def audit_of_task(conn: Connection, task_id: str) -> list[RowMapping]:
    """The task's audit rows, oldest first."""
    return list(conn.execute(AUDIT_OF_TASK, {"task_id": task_id}).mappings())


def last_attempt_of_task(conn: Connection, task_id: str) -> RowMapping | None:
    """The task's attempt of the highest epoch, or None."""
    return conn.execute(queries.LAST_ATTEMPT_OF_TASK, {"task_id": task_id}).mappings().first()


def claimed_attempts(conn: Connection, attempt_ids: Sequence[str]) -> dict[str, RowMapping]:
    """These attempts, with what a reservation carries of their tasks, by attempt ID
    (queries.CLAIMED_ATTEMPTS: a resent ``claim``'s answer)."""
    if not attempt_ids:
        return {}
    return {row["attempt_id"]: row for row in conn.execute(
        queries.CLAIMED_ATTEMPTS, {"ids": list(attempt_ids)}).mappings()}


def tasks_by_operation_key(conn: Connection, queue_id: str,
                           keys: Sequence[str]) -> dict[str, Mapping[Any, Any]]:
    """The queue's tasks that carry one of ``keys`` as their operation key, by key; one
    statement per IN_CHUNK keys."""
    found: dict[str, Mapping[Any, Any]] = {}
    wanted = list(dict.fromkeys(keys))
    for start in range(0, len(wanted), IN_CHUNK):
        chunk = wanted[start:start + IN_CHUNK]
        for row in conn.execute(TASKS_BY_OPERATION_KEY,
                                {"queue_id": queue_id, "keys": chunk}).mappings():
            found[row["operation_key"]] = row
    return found


def insert_new_tasks(conn: Connection, task_rows: Sequence[dict[str, Any]],
                     audit_rows: Sequence[dict[str, Any]]) -> None:
    """New task rows, then their audit rows: one executemany each."""
    INSERT_TASK.run(conn, task_rows)
    INSERT_AUDIT.run(conn, audit_rows)


_KEEP_RUN_BUDGET = (
    tasks.update()
    .where(tasks.c.id == bindparam("task_id"), tasks.c.run_max_attempts.is_(None))
    .values(run_max_attempts=bindparam("run_attempts"), run_deadline_ms=bindparam("run_span"))
)


def keep_run_budget(conn: Connection, task_id: str, max_attempts: int, deadline_ms: int) -> None:
    """Record the budget of one run of the task, unless one is recorded already (the first
    review or retry that raises its limits keeps the submitted one)."""
    conn.execute(_KEEP_RUN_BUDGET, {"task_id": task_id, "run_attempts": max_attempts,
                                    "run_span": deadline_ms})
