"""A queue's flow-control limits (docs/flow-control.md): set, read, list, delete. Admins
set and delete; a producer of the queue reads. Each change is one transaction that writes
the limit row and its ``limit_changes`` row (who, when, what), and drops the queue's entry
of this server's ``LimitTable`` (other replicas see it within LIMITS_MAX_AGE_MS)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy import Connection

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.flow import check_pattern
from orbit_wire.model import Role

from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..domain.bodies import parse_limit_request
from ..domain.flow import Limit, limit_of_row, matching, usage_since
from ..store import limits as stored
from ..store.queues import queue_exists
from ..store.retry import transactional
from .context import TxContext

_READERS = (Role.ADMIN, Role.PRODUCER)
RECENT_CHANGES = 20


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class LimitService:
    def __init__(self, tx: TxContext) -> None:
        self._tx = tx

    def set_limit(self, principal: Principal, queue_id: str, pattern: str,
                  body: object) -> dict[str, Any]:
        """Create or replace the limit of ``pattern`` in the queue."""
        require_role(principal, (Role.ADMIN,))
        check_pattern(pattern)
        request = parse_limit_request(body)
        now = self._tx.clock()
        row = {
            "queue_id": queue_id, "pattern": pattern, "max_running": request.max_running,
            "rate_count": None if request.rate is None else request.rate.count,
            "rate_interval_ms": None if request.rate is None else request.rate.interval_ms,
            "created_at_ms": now, "updated_at_ms": now, "updated_by": principal.actor,
        }
        with self._tx.write() as conn:
            _require_queue(conn, queue_id)
            created = stored.upsert_limit(conn, row)
            _hold_open_attempts(conn, queue_id, pattern)
            stored.insert_limit_change(conn, _change(row, principal, now, "set"))
            self._tx.limits.forget(queue_id)
            found = stored.limit_row(conn, queue_id, pattern)
            assert found is not None
            return {**limit_view(found), "created": created}

    def get_limit(self, principal: Principal, queue_id: str, pattern: str) -> dict[str, Any]:
        """The limit with its recent changes and, for a key (not ``name:*``), its usage."""
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        check_pattern(pattern)
        with self._tx.read() as conn:
            _require_queue(conn, queue_id)
            row = stored.limit_row(conn, queue_id, pattern)
            if row is None:
                raise OrbitError(ErrorCode.NOT_FOUND,
                                 f"queue {queue_id} has no limit {pattern!r}")
            view = limit_view(row)
            if not pattern.endswith(":*"):
                now = self._tx.clock()
                running, recent = stored.key_usage(conn, queue_id, pattern,
                                                   usage_since(limit_of_row(row), now))
                view["usage"] = {"running": running, "recent_starts": recent}
            view["changes"] = [change_view(c) for c in stored.limit_changes_of(
                conn, queue_id, RECENT_CHANGES) if c["pattern"] == pattern]
            return view

    def list_limits(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        with self._tx.read() as conn:
            _require_queue(conn, queue_id)
            return {"limits": [limit_view(r) for r in stored.limits_of_queue(conn, queue_id)]}

    def delete_limit(self, principal: Principal, queue_id: str,
                     pattern: str) -> dict[str, Any]:
        """Remove the limit; its keys' tasks are no longer held by it."""
        require_role(principal, (Role.ADMIN,))
        check_pattern(pattern)
        now = self._tx.clock()
        with self._tx.write() as conn:
            _require_queue(conn, queue_id)
            if not stored.delete_limit(conn, queue_id, pattern):
                raise OrbitError(ErrorCode.NOT_FOUND,
                                 f"queue {queue_id} has no limit {pattern!r}")
            stored.insert_limit_change(conn, _change(
                {"queue_id": queue_id, "pattern": pattern}, principal, now, "delete"))
            self._tx.limits.forget(queue_id)
        return {"queue_id": queue_id, "pattern": pattern, "deleted": True}


def _require_queue(conn: Connection, queue_id: str) -> None:
    if not queue_exists(conn, queue_id):
        raise queue_not_found(queue_id)


def _change(row: Mapping[str, Any], principal: Principal, now: int,
            action: str) -> dict[str, Any]:
    detail = None
    if action == "set":
        detail = orjson.dumps({k: row[k] for k in ("max_running", "rate_count",
                                                   "rate_interval_ms")}).decode()
    return {"queue_id": row["queue_id"], "pattern": row["pattern"], "at_ms": now,
            "actor": principal.actor, "action": action, "detail": detail}


def _hold_open_attempts(conn: Connection, queue_id: str, pattern: str) -> None:
    """A hold for each key the pattern matches of each attempt already open in the queue
    that lacks one, reserved when the attempt was: the limit counts what runs when it is
    set (a claim writes holds only for the limits it applies)."""
    wanted: set[tuple[str, str, int]] = set()
    for attempt_id, reserved_at, text in stored.open_keyed_attempts(conn, queue_id):
        wanted.update((key, attempt_id, reserved_at)
                      for key, _p in matching(orjson.loads(text), (pattern,)))
    if not wanted:
        return
    have = stored.held_pairs(conn, queue_id, sorted({a for _k, a, _r in wanted}))
    stored.add_missing_holds(conn, [
        {"queue_id": queue_id, "limit_key": key, "attempt_id": attempt_id,
         "reserved_at_ms": reserved_at}
        for key, attempt_id, reserved_at in sorted(wanted) if (key, attempt_id) not in have])


def limit_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    limit: Limit = limit_of_row(row)
    rate = (None if limit.rate_count is None else
            {"count": limit.rate_count, "interval_ms": limit.rate_interval_ms})
    return {"queue_id": row["queue_id"], "pattern": limit.pattern,
            "wildcard": limit.pattern.endswith(":*"), "max_running": limit.max_running,
            "rate": rate, "created_at_ms": row["created_at_ms"],
            "updated_at_ms": row["updated_at_ms"], "updated_by": row["updated_by"]}


def change_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {"at_ms": row["at_ms"], "actor": row["actor"], "action": row["action"],
            "detail": None if row["detail"] is None else orjson.loads(row["detail"])}
