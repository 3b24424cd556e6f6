"""The operator's reads: a state's range of a queue's task list (keyset, on
``ix_tasks_queue_state_created``), the page's rows by id, queue counts and a queue's stats,
the instances of a queue and their running attempts, what each queue's pending work waits
for, and the tasks finished per window. tests/integration/store/test_index_plans.py checks
the task list's plan."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    RowMapping,
    Select,
    and_,
    bindparam,
    func,
    literal,
    or_,
    select,
    union_all,
)

from orbit_wire.model import AttemptState

from ..domain.listing import TaskFilter
from .rows import IN_CHUNK
from .tables import PENDING, attempts, instances, open_attempt, state_is, tasks

_PENDING = state_is(tasks.c.state, PENDING)
_INDEX_HINT = "FORCE INDEX (ix_tasks_queue_state_created)"
# What a page row shows: everything but the payload, the result (each up to 256 KiB) and
# the checkpoint (up to 64 KiB).
LIST_COLUMNS = [c for c in tasks.c if c.name not in ("payload", "result", "checkpoint")]
_SCAN_EXTRA = (tasks.c.handler, tasks.c.handler_version, tasks.c.payload_version,
               tasks.c.finished_at_ms)


def _one_state(state: str, newest_first: bool, scanned_filters: bool, after: bool,
               created_after: bool, created_before: bool) -> Select[Any]:
    """The state's rows of a queue in list order past the cursor: id and created_at_ms only
    (the index holds both) unless filters need the capability and finish time. The state is
    a constant of the statement: a bound one would be compared with the partial indexes'
    states by re-preparing the statement on every execution (tables.state_is)."""
    created, ident = tasks.c.created_at_ms, tasks.c.id
    cols = [ident, created, *(_SCAN_EXTRA if scanned_filters else ())]
    where = [tasks.c.queue_id == bindparam("queue_id"), state_is(tasks.c.state, state)]
    if created_after:
        where.append(created >= bindparam("created_after"))
    if created_before:
        where.append(created <= bindparam("created_before"))
    if after:
        c: Any = bindparam("after_created")
        i_: Any = bindparam("after_id")
        if newest_first:  # the range bound first (an index range), then the tie-break
            where += [created <= c, or_(created < c, ident < i_)]
        else:
            where += [created >= c, or_(created > c, ident > i_)]
    order = [created.desc(), ident.desc()] if newest_first else [created, ident]
    return (
        select(*cols).where(and_(*where)).order_by(*order)
        .limit(bindparam("n", type_=Integer))
        .with_hint(tasks, _INDEX_HINT, dialect_name="mysql")
        .with_hint(tasks, _INDEX_HINT, dialect_name="mariadb")
    )


@functools.cache
def _states_range(states: tuple[str, ...], *flags: bool) -> Select[Any]:
    """The ranges of ``states`` in ONE statement (one round trip): a UNION ALL of limited
    subqueries, each its own index range; the page is cut from their rows in Python."""
    if len(states) == 1:
        return _one_state(states[0], *flags)
    parts = [_one_state(state, *flags).subquery() for state in states]
    merged = union_all(*(select(sub).select_from(sub) for sub in parts)).subquery()
    return select(merged)


def state_range(filt: TaskFilter) -> Select[Any]:
    """The statement reading every wanted state's range (bind with ``state_params``)."""
    return _states_range(tuple(state.value for state in filt.wanted_states()),
                         filt.newest_first, filt.scanned_filters, filt.after is not None,
                         filt.created_after is not None, filt.created_before is not None)


def state_params(filt: TaskFilter, queue_id: str) -> dict[str, Any]:
    params: dict[str, Any] = {"queue_id": queue_id, "n": filt.scan_size}
    if filt.created_after is not None:
        params["created_after"] = filt.created_after
    if filt.created_before is not None:
        params["created_before"] = filt.created_before
    if filt.after is not None:
        params["after_created"] = filt.after.created_at_ms
        params["after_id"] = filt.after.id
    return params


LIST_ROWS_BY_ID = select(*LIST_COLUMNS).where(tasks.c.id.in_(bindparam("ids", expanding=True)))
COUNTS_BY_QUEUE_STATE = (
    select(tasks.c.queue_id, tasks.c.state, func.count())
    .group_by(tasks.c.queue_id, tasks.c.state)
)
COUNTS_OF_QUEUES = (
    select(tasks.c.queue_id, tasks.c.state, func.count())
    .where(tasks.c.queue_id.in_(bindparam("queue_ids", expanding=True)))
    .group_by(tasks.c.queue_id, tasks.c.state)
)
# Instances seen since ``since`` (ix_instances_seen): the live ones, and recent sightings.
INSTANCES_SEEN_SINCE = (
    select(instances).where(instances.c.last_seen_at_ms >= bindparam("since"))
    .order_by(instances.c.queue_id, instances.c.connected_at_ms, instances.c.id)
)
# What each instance of a queue offered and when it was last seen (the waiting fact).
INSTANCE_OFFERS_OF_QUEUE = select(
    instances.c.capabilities, instances.c.last_seen_at_ms, instances.c.disconnected_at_ms,
    instances.c.labels,
).where(instances.c.queue_id == bindparam("queue_id"))
RUNNING_OF_INSTANCES = (
    select(attempts.c.instance_id, attempts.c.task_id, attempts.c.id, attempts.c.child_pid,
           attempts.c.started_at_ms)
    .where(attempts.c.instance_id.in_(bindparam("ids", expanding=True)),
           open_attempt(AttemptState.RUNNING))
    .order_by(attempts.c.started_at_ms)
)
PENDING_BY_CAPABILITY = (
    select(tasks.c.handler, tasks.c.handler_version, tasks.c.payload_version,
           func.count(), func.min(tasks.c.created_at_ms))
    .where(tasks.c.queue_id == bindparam("queue_id"),
           _PENDING)
    .group_by(tasks.c.handler, tasks.c.handler_version, tasks.c.payload_version)
)
PENDING_BY_QUEUE_CAPABILITY = (
    select(tasks.c.queue_id, tasks.c.handler, tasks.c.handler_version, tasks.c.payload_version,
           func.count(), func.min(tasks.c.created_at_ms))
    .where(_PENDING)
    .group_by(tasks.c.queue_id, tasks.c.handler, tasks.c.handler_version,
              tasks.c.payload_version)
)
# Tasks of a queue finished in [since, until), counted by end state and window: a range of
# ix_tasks_finished (the rows every queue finished in the span), never all the queue's rows.
# The queue is compared through "|| ''" so SQLite's planner does not take the queue's
# equality on ix_tasks_queue_state_created instead; MySQL/MariaDB are told by FORCE INDEX.
_FINISHED_HINT = "FORCE INDEX (ix_tasks_finished)"
FINISHED_BY_WINDOW = (
    select(tasks.c.state,
           ((tasks.c.finished_at_ms - bindparam("since", type_=BigInteger))
            // bindparam("window_ms", type_=BigInteger)).label("slot"),
           func.count())
    .where(tasks.c.finished_at_ms >= bindparam("since"),
           tasks.c.finished_at_ms < bindparam("until"),
           tasks.c.queue_id.concat(literal("")) == bindparam("queue_id"))
    .group_by(tasks.c.state, "slot")
    .with_hint(tasks, _FINISHED_HINT, dialect_name="mysql")
    .with_hint(tasks, _FINISHED_HINT, dialect_name="mariadb")
)

# A queue's stats (services.tasks.TaskService.queue_stats).
STATE_COUNTS_OF_QUEUE = (select(tasks.c.state, func.count())
                         .where(tasks.c.queue_id == bindparam("queue_id"))
                         .group_by(tasks.c.state))
RUNNING_OF_QUEUE = select(func.count()).select_from(attempts).where(
    open_attempt(AttemptState.RUNNING),
    attempts.c.queue_id == bindparam("queue_id"),
)
OLDEST_PENDING_OF_QUEUE = select(func.min(tasks.c.created_at_ms)).where(
    tasks.c.queue_id == bindparam("queue_id"), _PENDING)
_LATER = tasks.c.available_at_ms > bindparam("now")
PENDING_BY_RANK = (
    select(tasks.c.dispatch_rank, _LATER, func.count())
    .where(tasks.c.queue_id == bindparam("queue_id"), _PENDING)
    .group_by(tasks.c.dispatch_rank, _LATER)
)


def state_range_rows(conn: Connection, filt: TaskFilter, queue_id: str) -> list[RowMapping]:
    """The rows of every state range ``filt`` wants of the queue (``state_range``)."""
    return list(conn.execute(state_range(filt), state_params(filt, queue_id)).mappings())


def list_rows_by_id(conn: Connection, ids: Sequence[str]) -> dict[str, RowMapping]:
    """These tasks' page rows (LIST_COLUMNS), by ID."""
    if not ids:
        return {}
    return {r["id"]: r for r in conn.execute(LIST_ROWS_BY_ID, {"ids": list(ids)}).mappings()}


def task_counts_of_queues(conn: Connection, queue_ids: Sequence[str]
                          ) -> dict[str, dict[str, int]]:
    """Each queue's task counts by state (states without tasks left out), by queue."""
    counts: dict[str, dict[str, int]] = {}
    for start in range(0, len(queue_ids), IN_CHUNK):
        for queue_id, state, n in conn.execute(
                COUNTS_OF_QUEUES, {"queue_ids": list(queue_ids[start:start + IN_CHUNK])}):
            counts.setdefault(queue_id, {})[state] = n
    return counts


def task_counts_by_queue_state(conn: Connection) -> dict[tuple[str, str], int]:
    """Every queue's task counts by state, by (queue, state)."""
    return {(q, s): int(n) for q, s, n in conn.execute(COUNTS_BY_QUEUE_STATE)}


def state_counts_of_queue(conn: Connection, queue_id: str) -> dict[str, int]:
    """The queue's task counts by state (states without tasks left out)."""
    return {state: n for state, n in conn.execute(STATE_COUNTS_OF_QUEUE,
                                                  {"queue_id": queue_id})}


def running_attempts_of_queue(conn: Connection, queue_id: str) -> int:
    running: int | None = conn.scalar(RUNNING_OF_QUEUE, {"queue_id": queue_id})
    return running or 0


def oldest_pending_created(conn: Connection, queue_id: str) -> int | None:
    """When the queue's oldest PENDING task was created, or None."""
    oldest: int | None = conn.scalar(OLDEST_PENDING_OF_QUEUE, {"queue_id": queue_id})
    return oldest


def pending_by_rank(conn: Connection, queue_id: str, now: int) -> list[Any]:
    """(dispatch rank, available after ``now``, count) of the queue's PENDING tasks."""
    return list(conn.execute(PENDING_BY_RANK, {"queue_id": queue_id, "now": now}))


def instances_seen_since(conn: Connection, since: int) -> list[RowMapping]:
    """Instance rows seen at or after ``since``, by queue, connect instant and ID."""
    return list(conn.execute(INSTANCES_SEEN_SINCE, {"since": since}).mappings())


def instance_offers_of_queue(conn: Connection, queue_id: str) -> list[Any]:
    """(capabilities JSON, last seen, disconnected at, labels JSON) of each instance of the
    queue."""
    return list(conn.execute(INSTANCE_OFFERS_OF_QUEUE, {"queue_id": queue_id}))


def running_of_instances(conn: Connection, instance_ids: Sequence[str]) -> list[RowMapping]:
    """The RUNNING attempts of these instances (instance, task, attempt, child pid, start),
    by start within each chunk of IN_CHUNK instances."""
    rows: list[RowMapping] = []
    for start in range(0, len(instance_ids), IN_CHUNK):
        rows.extend(conn.execute(RUNNING_OF_INSTANCES, {
            "ids": list(instance_ids[start:start + IN_CHUNK])}).mappings())
    return rows


def pending_by_capability(conn: Connection, queue_id: str) -> list[Any]:
    """(handler, handler version, payload version, count, oldest creation) of the queue's
    PENDING tasks."""
    return list(conn.execute(PENDING_BY_CAPABILITY, {"queue_id": queue_id}))


def pending_by_queue_capability(conn: Connection) -> list[Any]:
    """(queue, handler, handler version, payload version, count, oldest creation) of every
    queue's PENDING tasks."""
    return list(conn.execute(PENDING_BY_QUEUE_CAPABILITY))


def finished_by_window(conn: Connection, queue_id: str, since: int, until: int,
                       window_ms: int) -> list[Any]:
    """(end state, window index, count) of the queue's tasks finished in [since, until)."""
    return list(conn.execute(FINISHED_BY_WINDOW, {
        "since": since, "until": until, "window_ms": window_ms, "queue_id": queue_id}))
