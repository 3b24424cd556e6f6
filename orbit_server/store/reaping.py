"""The reaper's reads (services/reaper.py): the attempts and tasks that fell due, each batch
locked with SKIP LOCKED so replicas' reapers never wait on each other, when something is
next due, and (at its first pass) when each queue's waiting tasks become dispatchable, for
services/wakeups.py. The statements are queries.py's (their plans are checked there)."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, RowMapping

from . import queries

__all__ = ["NextDue", "expired_leases", "first_available_by_queue", "next_due",
           "next_lease_decision", "overdue_pending", "stale_reservations", "start_by_passed"]


def expired_leases(conn: Connection, now: int, n: int, grant_grace_ms: int
                   ) -> list[RowMapping]:
    """Up to ``n`` RUNNING attempts whose lease ended by ``now``, earliest first; an
    unconfirmed grant's only once its lease ended ``grant_grace_ms`` before ``now``."""
    rows = list(conn.execute(queries.EXPIRED_LEASES, {"now": now, "n": n}).mappings())
    rows += conn.execute(queries.EXPIRED_GRANTS,
                         {"before": now - grant_grace_ms, "n": n}).mappings()
    rows.sort(key=lambda row: row["lease_expires_at_ms"])
    return rows[:n]


def stale_reservations(conn: Connection, before: int, n: int) -> list[RowMapping]:
    """Up to ``n`` RESERVED attempts reserved by ``before``, oldest first."""
    return list(conn.execute(queries.STALE_RESERVATIONS, {"before": before, "n": n}).mappings())


def overdue_pending(conn: Connection, now: int, n: int) -> list[RowMapping]:
    """Up to ``n`` PENDING tasks whose deadline passed by ``now``, earliest first."""
    return list(conn.execute(queries.OVERDUE_PENDING, {"now": now, "n": n}).mappings())


def start_by_passed(conn: Connection, now: int, n: int) -> list[RowMapping]:
    """Up to ``n`` tasks whose start-by instant passed by ``now``, earliest first."""
    return list(conn.execute(queries.START_BY_PASSED, {"now": now, "n": n}).mappings())


class NextDue(NamedTuple):
    """When something is next due, each None when nothing is (MIN over an indexed range)."""

    lease_expiry: int | None  # the earliest lease end of a RUNNING attempt
    oldest_reservation: int | None  # when the oldest RESERVED attempt was reserved
    pending_deadline: int | None  # the earliest deadline of a PENDING task
    start_by: int | None  # the earliest start-by instant


def next_due(conn: Connection) -> NextDue:
    return NextDue(*(conn.scalar(stmt) for stmt in (
        queries.NEXT_LEASE_EXPIRY, queries.OLDEST_RESERVATION, queries.NEXT_PENDING_DEADLINE,
        queries.NEXT_START_BY)))


def first_available_by_queue(conn: Connection) -> list[tuple[str, int]]:
    """Each queue with PENDING tasks, and when the first of them becomes dispatchable."""
    return [(queue_id, first) for queue_id, first in
            conn.execute(queries.FIRST_AVAILABLE_BY_QUEUE)]


def next_lease_decision(conn: Connection, now: int, grant_grace_ms: int) -> int | None:
    """When the reaper next decides a lapsed lease, given that the earliest lease end has
    passed (``now``: an unconfirmed grant waits ``grant_grace_ms`` more for the worker's
    word): the earliest confirmed lease end, or an unconfirmed grant's end plus the grace."""
    confirmed = conn.scalar(queries.NEXT_CONFIRMED_EXPIRY)
    granted = conn.scalar(queries.NEXT_GRANT_EXPIRY)
    ends = [confirmed, None if granted is None else granted + grant_grace_ms]
    return min((end for end in ends if end is not None), default=None)
