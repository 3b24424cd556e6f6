"""The rows a dispatch claim takes: the PENDING tasks of a queue for exactly a worker's
capabilities, within their deadline, highest priority first and oldest-available first
within a priority (``claimable_rows``). A delayed task (``available_at_ms`` ahead) is not
claimable until its instant.

On SQLite, and for one capability anywhere, that is one statement built once
(queries.DISPATCH_ONE, or queries.dispatch_many for several), run as a prepared SELECT.
On a shared database (MySQL/MariaDB), where several servers reserve at once, each
capability's range is read with ``SELECT … FOR UPDATE SKIP LOCKED`` (DISPATCH_ONE carries
the locking clause; SQLite ignores it, having one writer): a row another server is claiming
right now is skipped rather than waited for or handed out twice. MySQL allows no locking
clause inside a UNION, so several capabilities take one locking range each and the first
``n`` are kept; the extra rows stay locked only until this transaction ends.

Tasks that require labels (``requires_key`` set) are not in those ranges: a worker with
labels also reads them with ``labelled_rows`` and ``labelled_left``, kept apart from the
common case so a worker without labels pays nothing for them.

Those ranges hold the tasks without a fair turn: every task of a queue that is not fair. A
fair queue's numbered tasks are ranges of their own, in (rank, turn) order
(``numbered_rows``, ``keyed_rows(numbered=True)``; docs/flow-control.md "Fair dispatch").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Select

from orbit_wire.labels import labels_match, requires_from_text
from orbit_wire.model import Capability

from . import queries
from .prepared import prepared_select

__all__ = ["any_left", "claimable_rows", "dispatch_query", "in_dispatch_order", "keyed_rows",
           "labelled_left", "labelled_rows", "lock_each", "matching_requirements",
           "numbered_rows"]

# Dispatch order over rows of several ranges: priority, then oldest ready, then ID (the
# index's own tie order on MySQL/MariaDB, and insertion order on SQLite, near enough).
in_dispatch_order = itemgetter("dispatch_rank", "available_at_ms", "id")


def _range_params(queue_id: str, cap: Capability, now: int, n: int,
                  **extra: Any) -> dict[str, Any]:
    """The parameters of one capability's dispatch range (queries._dispatch_range)."""
    return {"queue_id": queue_id, "handler": cap.handler,
            "handler_version": cap.handler_version, "payload_version": cap.payload_version,
            "now": now, "n": n, **extra}


# The distinct requirements read per capability and claim, each one index seek: a bound on
# the work of one claim (a capability whose tasks hold more distinct requirements than this
# serves the first ones, in key order, until they are done).
MAX_REQUIREMENTS = 64


def claimable_rows(conn: Connection, queue_id: str, caps: Sequence[Capability], now: int,
                   n: int) -> list[dict[str, Any]]:
    """Up to ``n`` claimable task rows of ``queue_id`` over ``caps``, by priority then
    oldest-available first, each a full task row (the caller reserves them in this transaction)."""
    if len(caps) > 1 and conn.dialect.name != "sqlite":
        return lock_each(conn, queue_id, caps, now, n)
    stmt, params = dispatch_query(queue_id, caps, now, n)
    query = prepared_select(stmt)
    names = query.keys
    return [dict(zip(names, r, strict=True)) for r in query.all(conn, params)]


def numbered_rows(conn: Connection, queue_id: str, caps: Sequence[Capability], now: int,
                  n: int) -> list[dict[str, Any]]:
    """A fair queue's first ``n`` numbered task rows per capability in (rank, turn) order
    (docs/flow-control.md "Fair dispatch"), each locked like ``claimable_rows``' rows."""
    query = prepared_select(queries.FAIR_NUMBERED)
    names = query.keys
    found: list[dict[str, Any]] = []
    for cap in caps:
        found += [dict(zip(names, r, strict=True))
                  for r in query.all(conn, _range_params(queue_id, cap, now, n))]
    return found


def dispatch_query(queue_id: str, caps: Sequence[Capability], now: int,
                   n: int) -> tuple[Select[Any], dict[str, Any]]:
    """The dispatch statement for these capabilities and its parameters (statements built
    once, see queries.dispatch_many)."""
    params: dict[str, Any] = {"queue_id": queue_id, "now": now, "n": n}
    if len(caps) == 1:
        cap = caps[0]
        params.update(handler=cap.handler, handler_version=cap.handler_version,
                      payload_version=cap.payload_version)
        return queries.DISPATCH_ONE, params
    for i, cap in enumerate(caps):
        params[f"handler_{i}"] = cap.handler
        params[f"handler_version_{i}"] = cap.handler_version
        params[f"payload_version_{i}"] = cap.payload_version
    return queries.dispatch_many(len(caps)), params


def lock_each(conn: Connection, queue_id: str, caps: Sequence[Capability], now: int,
              n: int) -> list[dict[str, Any]]:
    """The first ``n`` claimable task rows over ``caps`` in dispatch order, each locked by
    us."""
    found: list[dict[str, Any]] = []
    for cap in caps:
        result = conn.execute(queries.DISPATCH_ONE, _range_params(queue_id, cap, now, n))
        names = tuple(result.keys())
        found.extend(dict(zip(names, r, strict=True)) for r in result.all())
    found.sort(key=lambda row: (row["dispatch_rank"], row["available_at_ms"]))
    return found[:n]


def any_left(conn: Connection, queue_id: str, caps: Sequence[Capability], now: int,
             taken: Collection[str], numbered: bool = False) -> bool:
    """Whether a claimable task of ``queue_id`` over ``caps`` is left besides ``taken`` (the
    tasks this transaction claimed: still PENDING in the database until it flushes), with
    ``numbered`` a fair queue's numbered tasks too. A plain read of the dispatch index that
    locks nothing; a task another server is claiming right now counts as left (the
    dispatcher then only claims once more for nothing)."""
    ranges = (queries.DISPATCH_LEFT, queries.FAIR_NUMBERED_LEFT) if numbered else (
        queries.DISPATCH_LEFT,)
    for cap in caps:
        for query in ranges:
            rows = conn.execute(query, _range_params(queue_id, cap, now, len(taken) + 1)).all()
            if any(row[0] not in taken for row in rows):
                return True
    return False


# ----------------------------------------------------------- tasks that require labels


def matching_requirements(conn: Connection, queue_id: str, cap: Capability,
                          labels: Mapping[str, str]) -> list[str]:
    """The ``requires_key`` of each requirement the PENDING tasks of ``cap`` hold that
    ``labels`` meet (at most MAX_REQUIREMENTS read, one index seek each)."""
    found: list[str] = []
    after = ""
    params = {"queue_id": queue_id, "handler": cap.handler,
              "handler_version": cap.handler_version, "payload_version": cap.payload_version}
    for _ in range(MAX_REQUIREMENTS):
        row = conn.execute(queries.NEXT_REQUIREMENT, {**params, "after": after}).first()
        if row is None:
            break
        after = row[0]
        if labels_match(labels, requires_from_text(row[1])):
            found.append(after)
    return found


def labelled_rows(conn: Connection, queue_id: str, caps: Sequence[Capability],
                  labels: Mapping[str, str], now: int, n: int) -> list[dict[str, Any]]:
    """``claimable_rows`` for a worker with ``labels``: the rows that require nothing and
    those of every requirement its labels meet, the first ``n`` in dispatch order. Each
    requirement is a range of its own, so a task no worker can match never hides one that
    this worker can."""
    found = claimable_rows(conn, queue_id, caps, now, n)
    found.extend(keyed_rows(conn, queue_id, caps, labels, now, n))
    found.sort(key=in_dispatch_order)
    return found[:n]


def keyed_rows(conn: Connection, queue_id: str, caps: Sequence[Capability],
               labels: Mapping[str, str], now: int, n: int, numbered: bool = False
               ) -> list[dict[str, Any]]:
    """The first ``n`` claimable rows of each requirement ``labels`` meet, per capability
    (``numbered``: a fair queue's numbered ones, in (rank, turn) order)."""
    query = queries.FAIR_NUMBERED_KEYED if numbered else queries.DISPATCH_KEYED
    found: list[dict[str, Any]] = []
    for cap in caps:
        for key in matching_requirements(conn, queue_id, cap, labels):
            result = conn.execute(query, _range_params(queue_id, cap, now, n,
                                                       requires_key=key))
            names = tuple(result.keys())
            found.extend(dict(zip(names, r, strict=True)) for r in result.all())
    return found


def labelled_left(conn: Connection, queue_id: str, caps: Sequence[Capability],
                  labels: Mapping[str, str], now: int, taken: Collection[str],
                  numbered: bool = False) -> bool:
    """``any_left`` for a worker with ``labels`` (requirements its labels meet count)."""
    if any_left(conn, queue_id, caps, now, taken, numbered):
        return True
    ranges = (queries.DISPATCH_KEYED_LEFT, queries.FAIR_NUMBERED_KEYED_LEFT) if numbered else (
        queries.DISPATCH_KEYED_LEFT,)
    for cap in caps:
        for key in matching_requirements(conn, queue_id, cap, labels):
            for query in ranges:
                rows = conn.execute(query, _range_params(queue_id, cap, now, len(taken) + 1,
                                                         requires_key=key)).all()
                if any(row[0] not in taken for row in rows):
                    return True
    return False
