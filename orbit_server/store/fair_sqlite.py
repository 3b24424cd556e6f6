"""A fair claim's reads on SQLite in two statements per capability instead of two per value
(docs/flow-control.md "Fair dispatch", "Cost"): the values in turn order, up to a bound, by
one recursive query that seeks ix_tasks_fair once per value (``fair_values``), then each
value's range, its first ``share`` rows in dispatch order, by one query that reads each
range on the same index (``fair_ranges``). The rows and their order are those of the
per-value statements ``store.fairness`` runs on MySQL/MariaDB, where each range needs its
own ``FOR UPDATE SKIP LOCKED`` (SQLite has one writer and no row locks).

SQLite only: the statements use ``rowid`` and a correlated ``IN (... LIMIT)``, which MySQL
and MariaDB do not take.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from . import queries
from .prepared import sqlite_fetch_all
from .tables import DISPATCH_RANKS

__all__ = ["fair_ranges", "fair_values"]

# The PENDING tasks of one capability in ix_tasks_fair (partial: state = 'PENDING' and a
# fair value; a comparison of fair_value implies the latter), for alias ``a``.
_CAPABILITY = ("{a}.queue_id = :queue_id AND {a}.state = 'PENDING' AND {a}.handler = :handler"
               " AND {a}.handler_version = :handler_version"
               " AND {a}.payload_version = :payload_version")
_RANKS = ", ".join(str(r) for r in DISPATCH_RANKS)
DISPATCH_NAMES = tuple(c.name for c in queries.DISPATCH_COLUMNS)


@functools.cache
def _values_sql(from_first: bool, bounded: bool) -> str:
    """Up to ``:most`` + 1 values in order: from the first (``from_first``) or after
    ``:after``, and (``bounded``) none above ``:upto``; one index seek each."""
    cap = _CAPABILITY.format(a="tasks")
    upto = " AND fair_value <= :upto" if bounded else ""
    seed = "fair_value IS NOT NULL" if from_first else "fair_value > :after"
    return (
        "WITH RECURSIVE v(val, k) AS ("
        f"SELECT (SELECT fair_value FROM tasks WHERE {cap} AND {seed}{upto}"
        " ORDER BY fair_value LIMIT 1), 1"
        " UNION ALL "
        f"SELECT (SELECT fair_value FROM tasks WHERE {cap} AND fair_value > v.val{upto}"
        " ORDER BY fair_value LIMIT 1), v.k + 1 FROM v WHERE v.val IS NOT NULL AND v.k <= :most)"
        " SELECT val FROM v WHERE val IS NOT NULL ORDER BY k"
    )


@functools.cache
def _ranges_sql(count: int) -> str:
    """The first ``:share`` claimable rows (DISPATCH_COLUMNS) of each of ``count`` values
    (``:v0`` ...), each range read on ix_tasks_fair in dispatch order, as DISPATCH_FAIR."""
    values = ", ".join(f"(:v{i})" for i in range(count))
    columns = ", ".join(f"t.{name}" for name in DISPATCH_NAMES)
    return (
        f"WITH v(val) AS (VALUES {values}) "
        f"SELECT {columns} FROM v JOIN tasks AS t ON t.rowid IN ("
        f"SELECT r.rowid FROM tasks AS r WHERE {_CAPABILITY.format(a='r')}"
        " AND r.fair_value = v.val AND r.requires_key IS NULL"
        f" AND r.dispatch_rank IN ({_RANKS}) AND r.available_at_ms <= :now"
        " AND r.deadline_at_ms + 0 > :now"
        " ORDER BY r.dispatch_rank, r.available_at_ms LIMIT :share)"
    )


def fair_values(conn: Connection, params: Mapping[str, Any], after: str | None,
                most: int) -> tuple[list[str], bool]:
    """Up to ``most`` values of the capability (``params``) in cyclic order after ``after``
    (None: from the first), and whether more may exist."""
    found = [str(r[0]) for r in sqlite_fetch_all(conn, _values_sql(after is None, False),
                                                  {**params, "after": after, "most": most})]
    if len(found) > most:
        return found[:most], True
    if after is None:
        return found, False
    room = most - len(found)  # wrap around to the values up to ``after``
    wrapped = [str(r[0]) for r in sqlite_fetch_all(conn, _values_sql(True, True),
                                                    {**params, "upto": after, "most": room})]
    return found + wrapped[:room], len(wrapped) > room


def fair_ranges(conn: Connection, params: Mapping[str, Any], values: Sequence[str],
                now: int, share: int) -> list[dict[str, Any]]:
    """The first ``share`` claimable rows of each of ``values`` (tasks that require no
    label), as dicts of DISPATCH_COLUMNS."""
    if not values:
        return []
    bound = {**params, "now": now, "share": share}
    bound.update((f"v{i}", value) for i, value in enumerate(values))
    rows = sqlite_fetch_all(conn, _ranges_sql(len(values)), bound)
    return [dict(zip(DISPATCH_NAMES, r, strict=True)) for r in rows]
