"""Hot-path SELECTs built once (bound parameters, memoised cache keys), so a call only
binds values. Every one of them is a range or point lookup on an index of tables.py;
tests/integration/store/test_index_plans.py checks the plans."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    and_,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    union_all,
)

from orbit_wire.model import AttemptState

from .tables import (
    DISPATCH_RANKS,
    PENDING,
    attempts,
    credentials,
    open_attempt,
    queues,
    receipts,
    state_is,
    tasks,
)

# What a state change needs of a task: everything but the capability, the payload and the
# big JSON outputs (a payload or result may be 256 KiB; finishing 100 tasks must not read them).
_NOT_FOR_RULES = {"handler", "handler_version", "payload_version", "payload", "result",
                  "failure_details", "operation_key", "created_at_ms", "spec_digest",
                  "schedule_to_start_ms", "cancel_grace_ms", "policy_source", "run_max_attempts",
                  "run_deadline_ms", "progress_timeout_ms", "checkpoint", "limit_keys",
                  "node_key", "parents_left", "parents_json", "fair_turn"}
TASK_REC_COLUMNS = [c for c in tasks.c if c.name not in _NOT_FOR_RULES]
# What a reservation needs of a task: those, its capability, payload, cancel grace,
# progress timeout and checkpoint (null on a first attempt: the retry's one read is this).
DISPATCH_COLUMNS = [*TASK_REC_COLUMNS, tasks.c.handler, tasks.c.handler_version,
                    tasks.c.payload_version, tasks.c.payload, tasks.c.cancel_grace_ms,
                    tasks.c.progress_timeout_ms, tasks.c.checkpoint, tasks.c.limit_keys,
                    tasks.c.parents_json, tasks.c.fair_turn]
TASKS_BY_ID = (
    select(*TASK_REC_COLUMNS).where(tasks.c.id.in_(bindparam("ids", expanding=True)))
    .with_for_update()
)
# Attempts with their tasks in one statement: what a worker request needs to decide.
ATTEMPTS_WITH_TASKS_BY_ID = (
    select(*attempts.c, *TASK_REC_COLUMNS)
    .join_from(attempts, tasks, tasks.c.id == attempts.c.task_id)
    .where(attempts.c.id.in_(bindparam("ids", expanding=True)))
    .with_for_update()
)
ATTEMPTS_BY_ID = (
    select(attempts).where(attempts.c.id.in_(bindparam("ids", expanding=True)))
    .with_for_update()
)
# A replayed ``claim`` answer: its attempts with what a reservation carries of their tasks.
CLAIMED_ATTEMPTS = (
    select(attempts.c.id.label("attempt_id"), attempts.c.epoch, attempts.c.attempt_number,
           attempts.c.state.label("attempt_state"), attempts.c.lease_expires_at_ms,
           tasks.c.id.label("task_id"), tasks.c.handler, tasks.c.handler_version,
           tasks.c.payload_version, tasks.c.payload, tasks.c.idempotency, tasks.c.lease_ttl_ms,
           tasks.c.attempt_timeout_ms, tasks.c.deadline_at_ms, tasks.c.cancel_grace_ms,
           tasks.c.progress_timeout_ms, tasks.c.checkpoint, tasks.c.parents_json)
    .join_from(attempts, tasks, tasks.c.id == attempts.c.task_id)
    .where(attempts.c.id.in_(bindparam("ids", expanding=True)))
)
# The rows the partial indexes of tables.py hold, as their queries must state them. A
# RESERVED attempt has no lease until it starts: its entry in ix_attempts_state_lease_reserved
# is (RESERVED, NULL, reserved_at_ms).
_PENDING = state_is(tasks.c.state, PENDING)
_RUNNING = open_attempt(AttemptState.RUNNING)
_RESERVED = and_(open_attempt(AttemptState.RESERVED), attempts.c.lease_expires_at_ms.is_(None))
# A lease granted with the dispatch that the worker has not confirmed: its lapse is decided
# later than a confirmed one's (services/reaper.py).
_CONFIRMED = attempts.c.grant_connection.is_(None)
_UNCONFIRMED = attempts.c.grant_connection.is_not(None)

RECEIPTS_BY_MSG = select(receipts.c.msg_id, receipts.c.op, receipts.c.answer).where(
    receipts.c.instance_id == bindparam("instance_id"),
    receipts.c.msg_id.in_(bindparam("msg_ids", expanding=True)),
)


# Every rank, inline: with the capability fixed, the index is then read as one range per
# rank (rank = r AND available_at_ms <= now), in (rank, available_at) order, so LIMIT n
# still stops after n rows and a delayed task of a high priority is never scanned past.
_ANY_RANK = tasks.c.dispatch_rank.in_([literal_column(str(r)) for r in DISPATCH_RANKS])
DISPATCH_ORDER = (tasks.c.dispatch_rank, tasks.c.available_at_ms)
# A fair queue's numbered tasks (docs/flow-control.md "Fair dispatch"): priority, then turn;
# a task gets its turn once ready, so this range holds no task that waits for its instant.
FAIR_ORDER = (tasks.c.dispatch_rank, tasks.c.fair_turn)
_NUMBERED = tasks.c.fair_turn > 0
_UNNUMBERED = tasks.c.fair_turn.is_(None)
# "+ 0" keeps SQLite's planner off ix_tasks_state_deadline (every queue's PENDING rows, then
# a sort), which it would otherwise prefer over the ten-range IN above; the deadline is
# checked on the rows the dispatch index yields. MySQL/MariaDB are told by FORCE INDEX.
_LIVE = (tasks.c.deadline_at_ms + literal_column("0")) > bindparam("now")
# Tasks that require no label (the common case) are one range of the dispatch index; those
# that do are one range per requirement (claims.labelled_rows).
_ANYONE = tasks.c.requires_key.is_(None)


def _dispatch_range(*columns: Any, live_only: bool = True, keyed: bool = False,
                    numbered: bool = False) -> Select[Any]:
    """The dispatch range of one capability (and with ``keyed`` one requirement, bind
    ``requires_key``), without a locking clause: its tasks without a fair turn in
    (rank, available_at) order, or (``numbered``) a fair queue's numbered tasks in
    (rank, turn) order."""
    where = [
        tasks.c.queue_id == bindparam("queue_id"),
        _PENDING,
        tasks.c.handler == bindparam("handler"),
        tasks.c.handler_version == bindparam("handler_version"),
        tasks.c.payload_version == bindparam("payload_version"),
        tasks.c.requires_key == bindparam("requires_key") if keyed else _ANYONE,
        _ANY_RANK,
        _NUMBERED if numbered else _UNNUMBERED,
        tasks.c.available_at_ms <= bindparam("now"),
    ]
    return (
        select(*columns)
        .where(*where, *([_LIVE] if live_only else []))
        .order_by(*(FAIR_ORDER if numbered else DISPATCH_ORDER))
        .limit(bindparam("n", type_=Integer))
        # MariaDB may otherwise pick ix_tasks_state_deadline (all queues' PENDING rows, then
        # a sort); the dispatch index gives the order and stops after n rows.
        .with_hint(tasks, "FORCE INDEX (ix_tasks_dispatch)", dialect_name="mysql")
        .with_hint(tasks, "FORCE INDEX (ix_tasks_dispatch)", dialect_name="mariadb")
    )


# The dispatch range: ix_tasks_dispatch gives (queue, state, capability) equality and
# (rank, available_at) order, so LIMIT n stops after n rows however many tasks have finished.
# Shared databases: rows another server is claiming are skipped (SQLite ignores the clause).
DISPATCH_ONE = _dispatch_range(*DISPATCH_COLUMNS).with_for_update(skip_locked=True)
# What is left in that range, ids only and read from the index alone (the deadline is not
# checked: a task past it only costs one empty claim until the deadline sweep ends it).
# Without locks: a locking read would make another server's claim skip these rows.
DISPATCH_LEFT = _dispatch_range(tasks.c.id, live_only=False)
# The same two for the tasks of one requirement (``requires_key``).
DISPATCH_KEYED = _dispatch_range(*DISPATCH_COLUMNS, keyed=True).with_for_update(
    skip_locked=True)
DISPATCH_KEYED_LEFT = _dispatch_range(tasks.c.id, live_only=False, keyed=True)
# The same four for a fair queue's numbered tasks.
FAIR_NUMBERED = _dispatch_range(*DISPATCH_COLUMNS, numbered=True).with_for_update(
    skip_locked=True)
FAIR_NUMBERED_LEFT = _dispatch_range(tasks.c.id, live_only=False, numbered=True)
FAIR_NUMBERED_KEYED = _dispatch_range(*DISPATCH_COLUMNS, keyed=True,
                                      numbered=True).with_for_update(skip_locked=True)
FAIR_NUMBERED_KEYED_LEFT = _dispatch_range(tasks.c.id, live_only=False, keyed=True,
                                           numbered=True)
# The requirements a capability's PENDING tasks hold, one at a time: the next key after
# ``after`` in the dispatch index (one seek each), with its text.
NEXT_REQUIREMENT = (
    select(tasks.c.requires_key, tasks.c.requires)
    .where(tasks.c.queue_id == bindparam("queue_id"), _PENDING,
           tasks.c.handler == bindparam("handler"),
           tasks.c.handler_version == bindparam("handler_version"),
           tasks.c.payload_version == bindparam("payload_version"),
           tasks.c.requires_key > bindparam("after"))
    .order_by(tasks.c.requires_key)
    .limit(1)
    .with_hint(tasks, "FORCE INDEX (ix_tasks_dispatch)", dialect_name="mysql")
    .with_hint(tasks, "FORCE INDEX (ix_tasks_dispatch)", dialect_name="mariadb")
)


@functools.cache
def dispatch_many(count: int) -> Select[Any]:
    """DISPATCH_ONE over ``count`` capabilities (bind ``handler_i``, ``handler_version_i``,
    ``payload_version_i`` for i < count, plus ``queue_id``, ``now``, ``n``).

    Each capability keeps its own limited index range and the union is ordered, so no range
    scans past ``n``. Built once per count: constructing the union costs more than running it.
    """
    def one(i: int) -> Any:
        return (
            select(*DISPATCH_COLUMNS)
            .where(
                tasks.c.queue_id == bindparam("queue_id"),
                _PENDING,
                tasks.c.handler == bindparam(f"handler_{i}"),
                tasks.c.handler_version == bindparam(f"handler_version_{i}"),
                tasks.c.payload_version == bindparam(f"payload_version_{i}"),
                _ANYONE,
                _ANY_RANK,
                _UNNUMBERED,
                tasks.c.available_at_ms <= bindparam("now"),
                _LIVE,
            )
            .order_by(*DISPATCH_ORDER)
            .limit(bindparam("n", type_=Integer))
            .subquery()
        )

    parts = [select(sub).select_from(sub) for sub in (one(i) for i in range(count))]
    merged = union_all(*parts).subquery()
    return (select(merged).order_by(merged.c.dispatch_rank, merged.c.available_at_ms)
            .limit(bindparam("n", type_=Integer)))

EXPIRED_LEASES = (
    select(attempts)
    .where(_RUNNING, _CONFIRMED, attempts.c.lease_expires_at_ms <= bindparam("now"))
    .order_by(attempts.c.lease_expires_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)  # another replica's reaper has these
)
EXPIRED_GRANTS = (
    select(attempts)
    .where(_RUNNING, _UNCONFIRMED, attempts.c.lease_expires_at_ms <= bindparam("before"))
    .order_by(attempts.c.lease_expires_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)
)
STALE_RESERVATIONS = (
    select(attempts)
    .where(_RESERVED, attempts.c.reserved_at_ms <= bindparam("before"))
    .order_by(attempts.c.reserved_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)  # another replica's reaper has these
)
OVERDUE_PENDING = (
    select(tasks)
    .where(_PENDING, tasks.c.deadline_at_ms <= bindparam("now"))
    .order_by(tasks.c.deadline_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)  # another replica's reaper has these
)
# Tasks whose schedule_to_start_ms passed (ix_tasks_start_by): unstarted ones fail, the
# others only get the instant cleared, so the index holds just the tasks still waiting.
START_BY_PASSED = (
    select(tasks)
    .where(tasks.c.start_by_at_ms <= bindparam("now"))
    .order_by(tasks.c.start_by_at_ms)
    .limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)  # another replica's reaper has these
)
# IS NOT NULL: the term SQLite's partial ix_tasks_start_by needs to answer min() from it.
NEXT_START_BY = select(func.min(tasks.c.start_by_at_ms)).where(
    tasks.c.start_by_at_ms.is_not(None))
# Receipt pruning, oldest first, a bounded batch per transaction, along the primary key
# (insertion order): the next receipts after ``after``, then a range delete up to the last
# old one. Both are ranges of the primary key on every store.
RECEIPTS_AFTER = (
    select(receipts.c.seq, receipts.c.created_at_ms)
    .where(receipts.c.seq > bindparam("after"))
    .order_by(receipts.c.seq)
    .limit(bindparam("n", type_=Integer))
)
# The creation instant again: a receipt inserted meanwhile is never in the range (MySQL
# hands out keys before commit, so one may land below ``upto`` and become visible later).
DELETE_RECEIPTS_UP_TO = delete(receipts).where(receipts.c.seq <= bindparam("upto"),
                                               receipts.c.created_at_ms < bindparam("before"))
QUEUE_EXISTS = select(queues.c.id).where(queues.c.id == bindparam("id"))
CREDENTIAL_BY_ID = select(credentials).where(credentials.c.id == bindparam("id"))
TASK_BY_ID = select(tasks).where(tasks.c.id == bindparam("id"))
ATTEMPTS_OF_TASK = select(attempts).where(attempts.c.task_id == bindparam("task_id")).order_by(
    attempts.c.epoch
)
LAST_ATTEMPT_OF_TASK = (
    select(attempts).where(attempts.c.task_id == bindparam("task_id"))
    .order_by(attempts.c.epoch.desc()).limit(1)
)
# The reaper's "when is something next due" look-ups (MIN over an indexed state range).
NEXT_LEASE_EXPIRY = select(func.min(attempts.c.lease_expires_at_ms)).where(_RUNNING)
# Read only when the earliest lease end has passed (an unconfirmed grant waiting for the
# worker's word): the earliest of each kind, scanning the running attempts.
NEXT_CONFIRMED_EXPIRY = select(func.min(attempts.c.lease_expires_at_ms)).where(
    _RUNNING, _CONFIRMED)
NEXT_GRANT_EXPIRY = select(func.min(attempts.c.lease_expires_at_ms)).where(
    _RUNNING, _UNCONFIRMED)
OLDEST_RESERVATION = select(func.min(attempts.c.reserved_at_ms)).where(_RESERVED)
NEXT_PENDING_DEADLINE = select(func.min(tasks.c.deadline_at_ms)).where(_PENDING)
# When each queue's waiting tasks become dispatchable: the reaper's wake-ups after a start.
FIRST_AVAILABLE_BY_QUEUE = (
    select(tasks.c.queue_id, func.min(tasks.c.available_at_ms))
    .where(_PENDING).group_by(tasks.c.queue_id)
)
