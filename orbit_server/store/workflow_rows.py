"""Workflows' rows: a workflow's inserts (its row, its nodes' tasks, its edges: one
executemany each), its reads, and ``pass_on_ends``, which the unit of work runs before it
writes back a transaction that ended a workflow node (``UnitOfWork.flush``): every path that
ends a task (a worker's finish, the reaper, a cancel, a review) moves the node's children in
that same transaction. Plain tasks (``workflow_id`` NULL) never reach this module.

Exactly once across replicas: the edges of a parent are taken (marked ``done``) together
with each child's ``parents_left`` under the child's row lock (a locking read on
MySQL/MariaDB, the one writer on SQLite), then decremented, which serializes two
transactions ending two parents of one child on the child's row: the second reads the count
the first left. The one that brings it to 0 releases the child, and the child's own
compare-and-set write (state WAITING) makes a second move of it roll back and run again."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    and_,
    bindparam,
    func,
    select,
    true,
    update,
)

from orbit_wire.limits import MAX_PARENTS_BYTES
from orbit_wire.model import TaskState

from ..domain import workflows as wf
from .prepared import Prepared, prepared_select
from .tables import tasks, workflow_edges, workflows

if TYPE_CHECKING:
    from ..domain import TaskRec
    from .rows import UnitOfWork

__all__ = ["find_by_operation_key", "insert_workflow", "nodes_of", "on_release",
           "open_sink_ids", "pass_on_ends", "set_cancelled", "workflow_page", "workflow_row"]

ACTOR = "server:workflow"
_ENDED = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
_CHUNK = 500

# Per engine: called with the queues where this transaction released nodes and the nodes it
# ended (the server runs a dispatch pass for those queues and wakes the long polls on those
# nodes, both queued behind the transaction; the dispatcher's poll and the waiters' own
# re-reads are the safety net).
Listener = Callable[[set[str], list[str]], None]
_listeners: weakref.WeakKeyDictionary[Engine, Listener] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def on_release(engine: Engine, listener: Listener) -> None:
    with _lock:
        _listeners[engine] = listener


def _chunks(items: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield list(items[start:start + _CHUNK])


# The not-done edges of ended parents, each with its child's parents_left as it is before
# this end's decrement, marked done in the same step. SQLite: one UPDATE ... RETURNING (its
# transaction is the only writer). MariaDB has no UPDATE ... RETURNING: a locking read
# (FOR UPDATE reads the latest committed rows and holds the edges and the child's row until
# commit, so a concurrent end of another parent of the child waits and then reads the
# decremented count), then the UPDATE that marks them done.
_TAKE_EDGES_SQLITE = (
    update(workflow_edges)
    .where(workflow_edges.c.parent_task_id.in_(bindparam("ids", expanding=True)),
           workflow_edges.c.done.is_(False))
    .values(done=true())
    .returning(workflow_edges.c.child_task_id, workflow_edges.c.parent_task_id,
               workflow_edges.c.parent_key, workflow_edges.c.on_failure,
               select(tasks.c.parents_left)
               .where(tasks.c.id == workflow_edges.c.child_task_id).scalar_subquery()))
_EDGES_FOR_UPDATE = (
    select(workflow_edges.c.child_task_id, workflow_edges.c.parent_task_id,
           workflow_edges.c.parent_key, workflow_edges.c.on_failure, tasks.c.parents_left)
    .join_from(workflow_edges, tasks, tasks.c.id == workflow_edges.c.child_task_id)
    .where(workflow_edges.c.parent_task_id.in_(bindparam("ids", expanding=True)),
           workflow_edges.c.done.is_(False))
    .with_for_update())
_MARK_DONE = (
    update(workflow_edges)
    .where(workflow_edges.c.parent_task_id.in_(bindparam("ids", expanding=True)),
           workflow_edges.c.done.is_(False))
    .values(done=true()))
_DECREMENT = Prepared(
    update(tasks).where(tasks.c.id == bindparam("_id"))
    .values(parents_left=tasks.c.parents_left - bindparam("_n")))
_PARENTS_OF = (
    select(workflow_edges.c.child_task_id, workflow_edges.c.parent_key, tasks.c.id,
           tasks.c.state, tasks.c.result, tasks.c.failure_code, tasks.c.failure_details)
    .join_from(workflow_edges, tasks, tasks.c.id == workflow_edges.c.parent_task_id)
    .where(workflow_edges.c.child_task_id.in_(bindparam("ids", expanding=True)))
    .order_by(workflow_edges.c.child_task_id, workflow_edges.c.position))


def _take_edges(conn: Connection, ids: list[str]) -> list[Any]:
    """(child, parent, parent_key, on_failure, child's parents_left before this end) for
    the edges of ``ids`` not done yet, now marked done."""
    if conn.dialect.name == "sqlite":
        return prepared_select(_TAKE_EDGES_SQLITE).all(conn, {"ids": ids})
    rows = list(conn.execute(_EDGES_FOR_UPDATE, {"ids": ids}).all())
    if rows:
        conn.execute(_MARK_DONE, {"ids": ids})
    return rows


def pass_on_ends(uow: UnitOfWork) -> None:
    """Move the children of every workflow node this unit of work ended (SUCCEEDED, FAILED,
    CANCELLED), transitively: a cancelled child's own children follow in the same pass.

    A parent's end costs its edges' take and one decrement per child; a child is loaded only
    when this end releases or cancels it (a chord member's end loads nothing)."""
    conn = uow.conn
    snaps = uow._task_snap
    ended = [rec for tid, rec in uow.tasks.items()
             if rec.workflow_id is not None and tid not in uow.workflow_seen
             and rec.state in _ENDED and rec.state != snaps[tid][0]]
    released_queues: set[str] = set()
    moved: list[str] = []
    while ended:
        uow.workflow_seen.update(r.id for r in ended)
        by_id = {r.id: r for r in ended}
        ids = list(by_id)
        edges: list[Any] = []
        for chunk in _chunks(ids):
            edges.extend(_take_edges(conn, chunk))
        ended = []
        if not edges:
            break
        done: dict[str, int] = {}
        left: dict[str, int | None] = {}
        cancels: dict[str, tuple[str, str, str]] = {}
        for child_id, parent_id, parent_key, on_failure, parents_left in edges:
            left[child_id] = parents_left
            parent = by_id[parent_id]
            effect = wf.edge_effect(parent.state, on_failure)
            if effect is wf.EdgeEffect.DONE:
                done[child_id] = done.get(child_id, 0) + 1
            elif effect is wf.EdgeEffect.CANCEL:
                cancels.setdefault(child_id, (parent_key, parent_id, parent.state.value))
        if done:
            _DECREMENT.run(conn, [{"_id": c, "_n": n} for c, n in done.items()])
        # A child moves when a parent's failure cancels it or its last parent is done.
        moving = [c for c, n in left.items()
                  if c in cancels or (n is not None and n == done.get(c, 0))]
        if not moving:
            continue
        uow.load_tasks(moving)
        to_release: list[TaskRec] = []
        for child_id in moving:
            child = uow.tasks[child_id]
            if child.state is not TaskState.WAITING:
                continue  # cancelled meanwhile, or run again by an operator
            if child_id in cancels:
                parent_key, parent_id, parent_state = cancels[child_id]
                wf.cancel_for_parent(child, parent_key, parent_id, parent_state, uow.now_ms)
                uow.audit(child.id, None, ACTOR, "task_cancelled", TaskState.WAITING.value,
                          child.state.value, {"code": wf.PARENT_FAILED,
                                              "parent_key": parent_key,
                                              "parent_task_id": parent_id})
                ended.append(child)
            else:
                to_release.append(child)
        if to_release:
            ended.extend(_release(uow, to_release, released_queues))
        moved.extend(r.id for r in ended)
    if released_queues or moved:
        listener = _listeners.get(conn.engine)
        if listener is not None:
            listener(released_queues, moved)


def _release(uow: UnitOfWork, children: list[TaskRec], queues: set[str]) -> list[TaskRec]:
    """Release ``children`` (all their parents done) with their parents' results; a child
    whose parents' results are over MAX_PARENTS_BYTES fails instead (returned: it ended)."""
    rows: dict[str, list[wf.ParentRow]] = {c.id: [] for c in children}
    for chunk in _chunks(list(rows)):
        for child_id, key, pid, state, result, code, details in conn_all(uow.conn, chunk):
            rec = uow.tasks.get(pid)
            if rec is not None:  # changed in this transaction: not written yet
                state = rec.state.value
                code = rec.failure_code
                result = rec.result if rec.result is not None else result
                details = rec.failure_details if rec.failure_details is not None else details
            rows[child_id].append(wf.ParentRow(key, pid, state, result, code, details))
    failed: list[TaskRec] = []
    for child in children:
        text, size = wf.parents_json(rows[child.id])
        if size > MAX_PARENTS_BYTES:
            wf.fail_parents_too_large(child, size, uow.now_ms)
            uow.audit(child.id, None, ACTOR, "task_failed", TaskState.WAITING.value,
                      child.state.value, {"code": wf.PARENTS_TOO_LARGE, "bytes": size})
            failed.append(child)
            continue
        wf.release(child, text, uow.now_ms)
        uow.audit(child.id, None, ACTOR, "task_released", TaskState.WAITING.value,
                  child.state.value, {"parents": [p.key for p in rows[child.id]]})
        queues.add(child.queue_id)
    return failed


def conn_all(conn: Connection, child_ids: list[str]) -> list[Any]:
    return list(conn.execute(_PARENTS_OF, {"ids": child_ids}).all())


# --------------------------------------------------------------------------- submit


def insert_workflow(conn: Connection, row: Mapping[str, Any],
                    edge_rows: Sequence[Mapping[str, Any]]) -> None:
    """The workflow's row and its edges (its nodes' tasks go in with the tasks' insert)."""
    conn.execute(workflows.insert(), [dict(row)])
    for start in range(0, len(edge_rows), 1000):
        conn.execute(workflow_edges.insert(), [dict(r) for r in edge_rows[start:start + 1000]])


def find_by_operation_key(conn: Connection, queue_id: str, key: str) -> RowMapping | None:
    return conn.execute(select(workflows).where(
        workflows.c.queue_id == queue_id, workflows.c.operation_key == key)).mappings().first()


# --------------------------------------------------------------------------- reads


def workflow_row(conn: Connection, workflow_id: str) -> RowMapping | None:
    return conn.execute(select(workflows).where(workflows.c.id == workflow_id)
                        ).mappings().first()


_NODE_COLUMNS = (tasks.c.id, tasks.c.node_key, tasks.c.state, tasks.c.failure_code,
                 tasks.c.failure_details, tasks.c.finished_at_ms, tasks.c.current_attempt_id)


def nodes_of(conn: Connection, workflow_id: str) -> tuple[list[RowMapping], list[RowMapping]]:
    """The workflow's nodes (in submit order: their IDs grow) and its edges."""
    nodes = list(conn.execute(select(*_NODE_COLUMNS).where(tasks.c.workflow_id == workflow_id)
                              .order_by(tasks.c.id)).mappings())
    edges = list(conn.execute(
        select(workflow_edges.c.child_task_id, workflow_edges.c.parent_key,
               workflow_edges.c.on_failure)
        .where(workflow_edges.c.workflow_id == workflow_id)
        .order_by(workflow_edges.c.child_task_id, workflow_edges.c.position)).mappings())
    return nodes, edges


def open_sink_ids(conn: Connection, workflow_id: str, limit: int) -> list[str]:
    """Up to ``limit`` of the workflow's sinks (the nodes no other node waits for: its
    results) not ended yet, in submit order."""
    has_child = (select(workflow_edges.c.parent_task_id)
                 .where(workflow_edges.c.parent_task_id == tasks.c.id).exists())
    return [r[0] for r in conn.execute(
        select(tasks.c.id).where(tasks.c.workflow_id == workflow_id,
                                 tasks.c.state.not_in([s.value for s in _ENDED]), ~has_child)
        .order_by(tasks.c.id).limit(limit)).all()]


def state_counts(conn: Connection, workflow_ids: Sequence[str]
                 ) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Node counts by state per workflow, and the last instant a node of each ended."""
    out: dict[str, dict[str, int]] = {w: {} for w in workflow_ids}
    last: dict[str, int] = {}
    for chunk in _chunks(list(workflow_ids)):
        for wid, state, n, ended in conn.execute(
                select(tasks.c.workflow_id, tasks.c.state, func.count(),
                       func.max(tasks.c.finished_at_ms))
                .where(tasks.c.workflow_id.in_(chunk))
                .group_by(tasks.c.workflow_id, tasks.c.state)).all():
            out[wid][state] = n
            if ended is not None:
                last[wid] = max(last.get(wid, 0), int(ended))
    return out, last


def workflow_page(conn: Connection, queue_id: str, limit: int,
                  after: tuple[int, str] | None) -> list[RowMapping]:
    """A queue's workflows, newest first, after the cursor (created_at_ms, id)."""
    stmt = select(workflows).where(workflows.c.queue_id == queue_id)
    if after is not None:
        at, wid = after
        stmt = stmt.where((workflows.c.created_at_ms < at) | and_(
            workflows.c.created_at_ms == at, workflows.c.id < wid))
    stmt = stmt.order_by(workflows.c.created_at_ms.desc(), workflows.c.id.desc()).limit(limit)
    return list(conn.execute(stmt).mappings())


def set_cancelled(conn: Connection, workflow_id: str, now_ms: int) -> None:
    conn.execute(update(workflows).where(workflows.c.id == workflow_id,
                                         workflows.c.cancelled_at_ms.is_(None))
                 .values(cancelled_at_ms=now_ms))


def open_node_ids(conn: Connection, workflow_id: str) -> list[str]:
    """The IDs of the workflow's nodes not ended yet."""
    ended = [s.value for s in _ENDED]
    return [r[0] for r in conn.execute(
        select(tasks.c.id).where(tasks.c.workflow_id == workflow_id,
                                 tasks.c.state.not_in(ended)).order_by(tasks.c.id)).all()]


_PARENT_STATES = (
    select(workflow_edges.c.parent_key, tasks.c.id, tasks.c.state)
    .join_from(workflow_edges, tasks, tasks.c.id == workflow_edges.c.parent_task_id)
    .where(workflow_edges.c.child_task_id == bindparam("id"))
    .order_by(workflow_edges.c.position))
_MAX_BLOCKED_WALK = 64  # nodes read looking for the review that blocks a WAITING node


def blocking_review(conn: Connection, task_id: str) -> dict[str, str] | None:
    """For a WAITING node: the parent in NEEDS_REVIEW it waits on, directly or through
    WAITING ancestors (the nearest, in declared order), as the ``waiting`` fact; or None."""
    frontier, seen = [task_id], {task_id}
    while frontier and len(seen) <= _MAX_BLOCKED_WALK:
        rows = [r for tid in frontier for r in conn.execute(_PARENT_STATES, {"id": tid}).all()]
        for key, pid, state in rows:
            if state == TaskState.NEEDS_REVIEW.value:
                return {"reason": wf.BLOCKED_BY_REVIEW, "parent_key": key,
                        "parent_task_id": pid}
        frontier = [pid for _, pid, state in rows
                    if state == TaskState.WAITING.value and pid not in seen]
        seen.update(frontier)
    return None
