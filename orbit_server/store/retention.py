"""Statements of bounded storage: the oldest finished tasks past the retention (on
``ix_tasks_finished``) and their rows in every table, and instance rows long unseen (on
``ix_instances_seen``). Every one is a range on an index or a delete by keys; locked rows
are another replica's batch, skipped, so replicas never wait on each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, delete, exists, select

from .tables import (
    attempts,
    audit,
    evidence,
    instances,
    open_attempt,
    tasks,
    workflow_edges,
    workflows,
)

OLD_FINISHED_TASKS = (
    select(tasks.c.id)
    .where(tasks.c.finished_at_ms < bindparam("before"))
    .order_by(tasks.c.finished_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)
)
_IDS: Any = bindparam("ids", expanding=True)
DELETE_ATTEMPTS_OF = delete(attempts).where(attempts.c.task_id.in_(_IDS))
DELETE_EVIDENCE_OF = delete(evidence).where(evidence.c.task_id.in_(_IDS))
DELETE_AUDIT_OF = delete(audit).where(audit.c.task_id.in_(_IDS))
# The finish instant again: only a task still finished that long ago goes.
DELETE_TASKS = delete(tasks).where(tasks.c.id.in_(_IDS),
                                   tasks.c.finished_at_ms < bindparam("before"))
# Workflow nodes among them: their edges go with the node they lead to, and a workflow
# goes once none of its nodes is left.
WORKFLOWS_OF = select(tasks.c.workflow_id).where(tasks.c.id.in_(_IDS),
                                                 tasks.c.workflow_id.is_not(None)).distinct()
DELETE_EDGES_OF = delete(workflow_edges).where(
    workflow_edges.c.child_task_id.in_(_IDS),
    ~exists().where(tasks.c.id == workflow_edges.c.child_task_id))
DELETE_EMPTY_WORKFLOWS = delete(workflows).where(
    workflows.c.id.in_(bindparam("wids", expanding=True)),
    ~exists().where(tasks.c.workflow_id == workflows.c.id))

OLD_INSTANCES = (
    select(instances.c.id)
    .where(instances.c.last_seen_at_ms < bindparam("before"))
    .order_by(instances.c.last_seen_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)
)
OPEN_ATTEMPT_INSTANCES = select(attempts.c.instance_id).where(
    attempts.c.instance_id.in_(_IDS),
    open_attempt(),
)
# Unseen since ``before`` still: a hello in between (any replica) keeps the row.
DELETE_INSTANCES = delete(instances).where(instances.c.id.in_(_IDS),
                                           instances.c.last_seen_at_ms < bindparam("before"))


def old_finished_task_ids(conn: Connection, before: int, n: int) -> list[str]:
    """Up to ``n`` tasks finished before ``before``, oldest first, each locked by us."""
    return list(conn.scalars(OLD_FINISHED_TASKS, {"before": before, "n": n}))


def delete_tasks(conn: Connection, ids: Sequence[str], before: int) -> int:
    """Delete these tasks' attempts, evidence and audit rows, then the tasks still finished
    before ``before`` (and a workflow node's edges, and its workflow once empty); returns
    the tasks deleted."""
    params = {"ids": list(ids)}
    workflow_ids = list(conn.scalars(WORKFLOWS_OF, params))
    for stmt in (DELETE_ATTEMPTS_OF, DELETE_EVIDENCE_OF, DELETE_AUDIT_OF):
        conn.execute(stmt, params)
    deleted: int = conn.execute(DELETE_TASKS, {**params, "before": before}).rowcount
    if workflow_ids:
        conn.execute(DELETE_EDGES_OF, params)
        conn.execute(DELETE_EMPTY_WORKFLOWS, {"wids": workflow_ids})
    return deleted


def old_instance_ids(conn: Connection, before: int, n: int) -> list[str]:
    """Up to ``n`` instances last seen before ``before``, oldest first, each locked by us."""
    return list(conn.scalars(OLD_INSTANCES, {"before": before, "n": n}))


def instances_with_open_attempts(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of these instances hold a RESERVED or RUNNING attempt."""
    return set(conn.scalars(OPEN_ATTEMPT_INSTANCES, {"ids": list(ids)}))


def delete_instances(conn: Connection, ids: Sequence[str], before: int) -> int:
    """Delete these instances if still unseen since ``before``; returns how many."""
    deleted: int = conn.execute(DELETE_INSTANCES, {"ids": list(ids), "before": before}).rowcount
    return deleted
