"""Fair dispatch rows (docs/flow-control.md "Fair dispatch"): a queue's fair key name (read,
written, removed) and the candidate rows of a fair claim.

A fair claim finds, per capability, up to MAX_FAIR_VALUES fair values (MAX_FAIR_VALUES_SQLITE
on SQLite) in their cyclic order after the one served last, one index seek each, and never
more values than the rows it wants; then reads each value's range
(ix_tasks_fair) and the plain dispatch range (``claims.claimable_rows``: the tasks submitted
before the queue was fair, and whatever leads the dispatch order), each for its share of the
``n`` rows wanted, plus one. The rows are
put in turn order by ``domain.fairness.rotate``; the work is bounded by the values read,
never by the number of queued tasks. On MySQL/MariaDB each seek and each range is a
statement of its own (each range locked with SKIP LOCKED); on SQLite the seeks are one
statement and the ranges another (``fair_sqlite``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, delete, select

from orbit_wire.model import Capability

from . import claims, fair_sqlite, queries
from .prepared import prepared_select
from .tables import queue_fairness

__all__ = ["MAX_FAIR_VALUES", "MAX_FAIR_VALUES_SQLITE", "delete_fairness",
           "fair_keys_of_queues", "fair_rows", "fairness_of_queue", "upsert_fairness"]

# The distinct fair values one claim reads per capability (one seek and one range each): on
# MySQL/MariaDB two statements per value; on SQLite two statements in all, so more values
# cost little there and a claim of a queue with many values fills up in fewer turns.
MAX_FAIR_VALUES = 16
MAX_FAIR_VALUES_SQLITE = 32

_QUEUE = queue_fairness.c.queue_id == bindparam("queue_id")
FAIRNESS_OF_QUEUE = select(queue_fairness).where(_QUEUE)
DELETE_FAIRNESS = delete(queue_fairness).where(_QUEUE)
FAIR_KEYS_OF_QUEUES = select(queue_fairness.c.queue_id, queue_fairness.c.key_name).where(
    queue_fairness.c.queue_id.in_(bindparam("ids", expanding=True)))


def fairness_of_queue(conn: Connection, queue_id: str) -> RowMapping | None:
    """The queue's fair setting (key_name, updated_at_ms, updated_by), or None."""
    return conn.execute(FAIRNESS_OF_QUEUE, {"queue_id": queue_id}).mappings().first()


def fair_keys_of_queues(conn: Connection, queue_ids: Sequence[str]) -> dict[str, str]:
    """The fair key name of each of ``queue_ids`` that is fair (the queue views' ``fair``)."""
    if not queue_ids:
        return {}
    return {str(r[0]): str(r[1]) for r in conn.execute(FAIR_KEYS_OF_QUEUES,
                                                       {"ids": list(queue_ids)}).all()}


def upsert_fairness(conn: Connection, row: Mapping[str, Any]) -> None:
    """Make the queue fair by ``key_name`` (replacing another name)."""
    existing = conn.execute(FAIRNESS_OF_QUEUE.with_for_update(),
                            {"queue_id": row["queue_id"]}).first()
    if existing is None:
        conn.execute(queue_fairness.insert(), dict(row))
        return
    conn.execute(queue_fairness.update().where(
        queue_fairness.c.queue_id == row["queue_id"]).values(
        key_name=row["key_name"], updated_at_ms=row["updated_at_ms"],
        updated_by=row["updated_by"]))


def delete_fairness(conn: Connection, queue_id: str) -> bool:
    """The queue no longer fair; whether it was."""
    return conn.execute(DELETE_FAIRNESS, {"queue_id": queue_id}).rowcount > 0


def fair_rows(conn: Connection, queue_id: str, caps: Sequence[Capability], now: int,
              n: int, after: str | None) -> tuple[list[dict[str, Any]], bool]:
    """A fair claim's candidate rows (unordered, possibly repeated: ``rotate`` orders them)
    and whether more may be left than was read (more values than were read, or a range
    that filled its share): the claim must not conclude from a short count that the queue
    is drained. ``after`` is the value served last (None: start from the first)."""
    bounded = False
    sqlite = conn.dialect.name == "sqlite"
    by_cap: list[tuple[dict[str, Any], list[str]]] = []
    # A claim of n rows takes the first row of at most n values: it needs no more values.
    most = min(MAX_FAIR_VALUES_SQLITE if sqlite else MAX_FAIR_VALUES, n)
    for cap in caps:
        params = {"queue_id": queue_id, "handler": cap.handler,
                  "handler_version": cap.handler_version,
                  "payload_version": cap.payload_version}
        values, more = (fair_sqlite.fair_values(conn, params, after, most) if sqlite
                        else _values(conn, params, after, most))
        bounded = bounded or more
        by_cap.append((params, values))
    # Turns take about n / (values + 1) rows of each value and of the plain range (the tasks
    # from before fairness): each range reads that many, and one that filled its share may
    # hold more (the claim then does not report the queue drained).
    share = -(-n // (sum(len(values) for _p, values in by_cap) + 1))
    rows = claims.claimable_rows(conn, queue_id, caps, now, min(n, share))
    bounded = bounded or len(rows) >= min(n, share)
    for params, values in by_cap:
        if sqlite:
            found = fair_sqlite.fair_ranges(conn, params, values, now, share)
            per_value = Counter(row["fair_value"] for row in found)
            bounded = bounded or any(per_value[v] >= share for v in values)
            rows.extend(found)
            continue
        query = prepared_select(queries.DISPATCH_FAIR)
        for value in values:
            found = [dict(zip(query.keys, r, strict=True))
                     for r in query.all(conn, {**params, "fair_value": value, "now": now,
                                               "n": share})]
            bounded = bounded or len(found) >= share
            rows.extend(found)
    return rows, bounded


def _values(conn: Connection, params: Mapping[str, Any], after: str | None, most: int
            ) -> tuple[list[str], bool]:
    """Up to ``most`` values in cyclic order after ``after``, and whether more may exist."""
    first, following = prepared_select(queries.FIRST_FAIR_VALUE), prepared_select(
        queries.NEXT_FAIR_VALUE)

    def seek(above: str | None) -> str | None:
        if above is None:
            rows = first.all(conn, params)
        else:
            rows = following.all(conn, {**params, "after": above})
        return str(rows[0][0]) if rows else None

    out: list[str] = []
    current = seek(after)
    while current is not None and len(out) < most:
        out.append(current)
        current = seek(current)
    if current is not None:
        return out, True
    if after is not None:  # wrap around to the values up to ``after``
        current = seek(None)
        while current is not None and current <= after and len(out) < most:
            out.append(current)
            current = seek(current)
        if current is not None and current <= after:
            return out, True
    return out, False
