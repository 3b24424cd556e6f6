"""Flow-control rows (docs/flow-control.md): a queue's limits (read, locked, written,
deleted, their change log) and the holds that count each key's running attempts and recent
starts.

A key's running count is its holds whose attempt is open (RESERVED or RUNNING), read from
the attempts themselves: the transaction that ends an attempt frees its slot by moving the
attempt, with no counter to keep in step. Its recent starts are its holds reserved within
the rate interval. Both are read after the limit rows are locked (``lock_limits``: FOR
UPDATE on MySQL/MariaDB, whose READ COMMITTED then reads what the last holder committed), so
two replicas never both take a key's last slot; SQLite has one writer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    RowMapping,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    select,
)

from .prepared import Prepared, padded, prepared_select
from .tables import (
    OPEN_ATTEMPT,
    attempts,
    limit_changes,
    limit_holds,
    queue_limits,
    state_is,
    tasks,
)

__all__ = ["add_missing_holds", "delete_limit", "held_pairs", "insert_holds",
           "insert_limit_change", "key_usage", "keys_usage", "limit_changes_of", "limit_row",
           "limits_of_queue", "lock_limits", "open_keyed_attempts", "prune_holds",
           "prune_stale_holds", "upsert_limit"]

_QUEUE = queue_limits.c.queue_id == bindparam("queue_id")
LIMITS_OF_QUEUE = select(queue_limits).where(_QUEUE).order_by(queue_limits.c.pattern)
LIMIT_ROW = select(queue_limits).where(_QUEUE, queue_limits.c.pattern == bindparam("pattern"))
LOCK_LIMITS = (
    select(queue_limits)
    .where(_QUEUE, queue_limits.c.pattern.in_(bindparam("patterns", expanding=True)))
    .order_by(queue_limits.c.pattern)  # one lock order for every replica
    .with_for_update()
)
DELETE_LIMIT = delete(queue_limits).where(_QUEUE,
                                          queue_limits.c.pattern == bindparam("pattern"))
_IS_OPEN = state_is(attempts.c.state, *OPEN_ATTEMPT)
_THIS_KEY = and_(limit_holds.c.queue_id == bindparam("queue_id"),
                 limit_holds.c.limit_key == bindparam("key"))
# A key's open holds and its holds since an instant, in one pass over the key's holds. A
# hold without its attempt counts as open: the attempt is written when this transaction's
# unit of work flushes (a group commit may claim again before); a hold whose attempt is gone
# for good (retention) is older than PRUNE_AGE_MS and pruned first (holds and attempts
# commit together, so a hold lacks its attempt only inside the transaction that made both).
_HOLDS_SLOT = (attempts.c.state.is_(None)) | _IS_OPEN
KEY_USAGE = (
    select(func.coalesce(func.sum(case((_HOLDS_SLOT, 1), else_=0)), 0),
           func.coalesce(func.sum(case((limit_holds.c.reserved_at_ms > bindparam("since"), 1),
                                       else_=0)), 0))
    .select_from(limit_holds.outerjoin(attempts, attempts.c.id == limit_holds.c.attempt_id))
    .where(_THIS_KEY)
)
# The same for several keys at once, one row per key that has holds.
_THESE_KEYS = and_(limit_holds.c.queue_id == bindparam("queue_id"),
                   limit_holds.c.limit_key.in_(bindparam("keys", expanding=True)))
KEYS_USAGE = (
    select(limit_holds.c.limit_key,
           func.sum(case((_HOLDS_SLOT, 1), else_=0)),
           func.sum(case((limit_holds.c.reserved_at_ms > bindparam("since"), 1), else_=0)),
           func.min(case((limit_holds.c.reserved_at_ms > bindparam("since"),
                          limit_holds.c.reserved_at_ms), else_=None)))
    .select_from(limit_holds.outerjoin(attempts, attempts.c.id == limit_holds.c.attempt_id))
    .where(_THESE_KEYS)
    .group_by(limit_holds.c.limit_key)
)
# Holds nothing counts any more: their attempt has ended and they are past every rate window
# of their key (``before``), or their attempt is gone (retention) and they are older than
# PRUNE_AGE_MS (``missing_before``). An attempt written by this transaction's unit of work
# is not in the table until it flushes: its holds have no attempt yet and stay. Every hold
# of one attempt has the same instant, so a prunable attempt's holds all are.
PRUNE_AGE_MS = 5_000
PRUNABLE_HOLDS = (
    select(limit_holds.c.limit_key, limit_holds.c.attempt_id)
    .select_from(limit_holds.outerjoin(attempts, attempts.c.id == limit_holds.c.attempt_id))
    .where(_THESE_KEYS, limit_holds.c.reserved_at_ms <= bindparam("before"),
           ~_IS_OPEN | (attempts.c.state.is_(None)
                        & (limit_holds.c.reserved_at_ms <= bindparam("missing_before"))))
    .limit(bindparam("n", type_=Integer))
)
# Holds nothing counts whatever their key: reserved at or before ``before`` (the retention
# passes the longest window any rate may have, and more) with their attempt ended or gone. A
# key's claims prune its own holds sooner (PRUNABLE_HOLDS); this takes those of keys that
# are never claimed again.
STALE_HOLDS = (
    select(limit_holds.c.queue_id, limit_holds.c.limit_key, limit_holds.c.attempt_id)
    .select_from(limit_holds.outerjoin(attempts, attempts.c.id == limit_holds.c.attempt_id))
    .where(limit_holds.c.reserved_at_ms <= bindparam("before"),
           attempts.c.state.is_(None) | ~_IS_OPEN)
    .limit(bindparam("n", type_=Integer))
)
# SQLite: the same holds of the keys deleted in the pass that finds them (one writer, no
# locks to bound; the usage read scans the keys' holds anyway), not read and then deleted
# one primary-key seek each.
_ITS_ATTEMPT = attempts.c.id == limit_holds.c.attempt_id
PRUNE_HOLDS_SQLITE = delete(limit_holds).where(
    _THESE_KEYS,
    ((limit_holds.c.reserved_at_ms <= bindparam("before"))
     & exists().where(_ITS_ATTEMPT, ~_IS_OPEN))
    | ((limit_holds.c.reserved_at_ms <= bindparam("missing_before"))
       & ~exists().where(_ITS_ATTEMPT)))
_DELETE_ONE_HOLD = delete(limit_holds).where(
    limit_holds.c.queue_id == bindparam("q"), limit_holds.c.limit_key == bindparam("k"),
    limit_holds.c.attempt_id == bindparam("a"))
# MySQL/MariaDB: the holds PRUNABLE_HOLDS found, in one statement (the keys x the attempts:
# each such hold is prunable too).
DELETE_HOLDS = delete(limit_holds).where(
    _THESE_KEYS, limit_holds.c.attempt_id.in_(bindparam("ids", expanding=True)))
INSERT_HOLDS = Prepared(limit_holds.insert(), ["queue_id", "limit_key", "attempt_id",
                                               "reserved_at_ms"])
INSERT_CHANGE = limit_changes.insert()
# A queue's open attempts whose task has keys (ID, reservation instant, the keys' JSON
# text), and the holds some of them already have: what a limit set now must count.
OPEN_KEYED_ATTEMPTS = (
    select(attempts.c.id, attempts.c.reserved_at_ms, tasks.c.limit_keys)
    .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id))
    .where(_IS_OPEN, attempts.c.queue_id == bindparam("queue_id"),
           tasks.c.limit_keys.is_not(None))
)
HELD_PAIRS = select(limit_holds.c.limit_key, limit_holds.c.attempt_id).where(
    limit_holds.c.queue_id == bindparam("queue_id"),
    limit_holds.c.attempt_id.in_(bindparam("ids", expanding=True)))
# Two limit changes of one queue at once may both add a hold: the second is a no-op.
INSERT_MISSING_HOLDS = (limit_holds.insert().prefix_with("OR IGNORE", dialect="sqlite")
                        .prefix_with("IGNORE", dialect="mysql"))
CHANGES_OF = (
    select(limit_changes).where(limit_changes.c.queue_id == bindparam("queue_id"))
    .order_by(limit_changes.c.at_ms.desc(), limit_changes.c.id.desc())
    .limit(bindparam("n", type_=Integer))
)


def limits_of_queue(conn: Connection, queue_id: str) -> list[RowMapping]:
    """The queue's limits, by pattern."""
    return list(conn.execute(LIMITS_OF_QUEUE, {"queue_id": queue_id}).mappings())


def limit_row(conn: Connection, queue_id: str, pattern: str) -> RowMapping | None:
    return conn.execute(LIMIT_ROW, {"queue_id": queue_id, "pattern": pattern}).mappings().first()


def lock_limits(conn: Connection, queue_id: str,
                patterns: Iterable[str]) -> list[dict[str, Any]]:
    """These limits of the queue as they are now, each locked until the transaction ends
    (in pattern order)."""
    wanted = sorted(set(patterns))
    if not wanted:
        return []
    query = prepared_select(LOCK_LIMITS)
    return [dict(zip(query.keys, r, strict=True))
            for r in query.all(conn, {"queue_id": queue_id, "patterns": wanted})]


def upsert_limit(conn: Connection, row: Mapping[str, Any]) -> bool:
    """Write the limit (queue_id, pattern, bounds, who and when); True when it was new. The
    row is locked first, so a concurrent dispatch sees the old bounds or the new."""
    existing = conn.execute(LIMIT_ROW.with_for_update(), {
        "queue_id": row["queue_id"], "pattern": row["pattern"]}).first()
    if existing is None:
        conn.execute(queue_limits.insert(), dict(row))
        return True
    values = {k: v for k, v in row.items() if k not in ("queue_id", "pattern", "created_at_ms")}
    conn.execute(queue_limits.update().where(
        queue_limits.c.queue_id == row["queue_id"],
        queue_limits.c.pattern == row["pattern"]).values(**values))
    return False


def delete_limit(conn: Connection, queue_id: str, pattern: str) -> bool:
    """Remove the limit; whether there was one."""
    return conn.execute(DELETE_LIMIT, {"queue_id": queue_id, "pattern": pattern}).rowcount > 0


def insert_limit_change(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(INSERT_CHANGE, dict(row))


def limit_changes_of(conn: Connection, queue_id: str, n: int) -> list[RowMapping]:
    """The queue's ``n`` latest limit changes, newest first."""
    return list(conn.execute(CHANGES_OF, {"queue_id": queue_id, "n": n}).mappings())


def key_usage(conn: Connection, queue_id: str, key: str, since: int) -> tuple[int, int]:
    """The key's open attempts, and its starts after ``since``."""
    row = conn.execute(KEY_USAGE, {"queue_id": queue_id, "key": key, "since": since}).one()
    return int(row[0]), int(row[1])


def keys_usage(conn: Connection, queue_id: str, keys: Sequence[str],
               since: int) -> dict[str, tuple[int, int, int | None]]:
    """``key_usage`` of each of ``keys`` in one statement, with the earliest start after
    ``since`` (a key without holds: absent)."""
    rows = prepared_select(KEYS_USAGE).all(conn, {"queue_id": queue_id,
                                                  "keys": padded(keys), "since": since})
    return {str(r[0]): (int(r[1] or 0), int(r[2] or 0), None if r[3] is None else int(r[3]))
            for r in rows}


def prune_holds(conn: Connection, queue_id: str, keys: Sequence[str], before: int,
                missing_before: int, n: int) -> int:
    """Delete up to ``n`` holds of ``keys`` that nothing counts any more (PRUNABLE_HOLDS:
    reserved at or before ``before`` with their attempt ended, or at or before
    ``missing_before`` with their attempt gone); how many. On SQLite every such hold, in
    one statement (PRUNE_HOLDS_SQLITE)."""
    if conn.dialect.name == "sqlite":  # through the driver: a claim's statement
        return prepared_select(PRUNE_HOLDS_SQLITE).write(conn, {
            "queue_id": queue_id, "keys": padded(keys), "before": before,
            "missing_before": missing_before})
    found = prepared_select(PRUNABLE_HOLDS).all(conn, {
        "queue_id": queue_id, "keys": padded(keys), "before": before,
        "missing_before": missing_before, "n": n})
    if found:
        conn.execute(DELETE_HOLDS, {"queue_id": queue_id,
                                    "keys": sorted({str(r[0]) for r in found}),
                                    "ids": sorted({str(r[1]) for r in found})})
    return len(found)


def insert_holds(conn: Connection, rows: Sequence[tuple[str, str, str, int]]) -> None:
    """One hold per (key, attempt) started: (queue_id, limit_key, attempt_id,
    reserved_at_ms)."""
    INSERT_HOLDS.run_values(conn, rows)


def open_keyed_attempts(conn: Connection, queue_id: str) -> list[tuple[str, int, str]]:
    """The queue's open (RESERVED or RUNNING) attempts whose task has keys: (attempt ID,
    reserved_at_ms, the task's ``limit_keys`` text). As many as its workers' slots."""
    return [(str(r[0]), int(r[1]), str(r[2]))
            for r in conn.execute(OPEN_KEYED_ATTEMPTS, {"queue_id": queue_id}).all()]


def held_pairs(conn: Connection, queue_id: str, attempt_ids: Sequence[str]
               ) -> set[tuple[str, str]]:
    """The (key, attempt ID) holds these attempts of the queue have."""
    if not attempt_ids:
        return set()
    return {(str(k), str(a)) for k, a in conn.execute(
        HELD_PAIRS, {"queue_id": queue_id, "ids": list(attempt_ids)}).all()}


def add_missing_holds(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Holds (mappings of INSERT_HOLDS' columns) that another transaction may have added
    meanwhile."""
    if rows:
        conn.execute(INSERT_MISSING_HOLDS, [dict(r) for r in rows])


def prune_stale_holds(conn: Connection, before: int, n: int) -> int:
    """Delete up to ``n`` holds of any queue and key that nothing counts any more
    (STALE_HOLDS); how many."""
    found = conn.execute(STALE_HOLDS, {"before": before, "n": n}).all()
    if found:
        conn.execute(_DELETE_ONE_HOLD, [{"q": q, "k": k, "a": a} for q, k, a in found])
    return len(found)
