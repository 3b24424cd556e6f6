"""A queue's fair dispatch (docs/flow-control.md "Fair dispatch"): turned on with a key
name, off, read. Admins change it; a producer of the queue reads it. Each change is one
transaction that writes the setting and a ``limit_changes`` row (who, when: pattern the key
name, action ``fair_on`` or ``fair_off``), and drops the queue's entry of this server's
``FairTable`` (other replicas see it within FAIR_MAX_AGE_MS).

Tasks keep the value they were submitted with: turning fairness on applies to tasks
submitted from then on (older ones take one turn together, as the group of tasks without a
fair value); turning it off makes every task dispatch in plain priority order again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Role

from ..auth import Principal, require_role, require_visible_queue
from ..domain.flow_bodies import FAIR_REQUEST
from ..store import fairness as stored
from ..store.limits import insert_limit_change, limit_changes_of
from ..store.retry import transactional
from .context import TxContext
from .limits import _require_queue, change_view

_READERS = (Role.ADMIN, Role.PRODUCER)
_ACTIONS = ("fair_on", "fair_off")
RECENT_CHANGES = 20


def parse_fair_request(body: object) -> str:
    """The key name of a ``{"key": name}`` body; BAD_REQUEST naming the field otherwise."""
    return str(FAIR_REQUEST.parse(body, "request body")["key"])


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class FairService:
    def __init__(self, tx: TxContext) -> None:
        self._tx = tx

    def set_fair(self, principal: Principal, queue_id: str, body: object) -> dict[str, Any]:
        """Make the queue's dispatch take turns between the values of a key name."""
        require_role(principal, (Role.ADMIN,))
        key_name = parse_fair_request(body)
        now = self._tx.clock()
        row = {"queue_id": queue_id, "key_name": key_name, "updated_at_ms": now,
               "updated_by": principal.actor}
        with self._tx.write() as conn:
            _require_queue(conn, queue_id)
            stored.upsert_fairness(conn, row)
            insert_limit_change(conn, {"queue_id": queue_id, "pattern": key_name,
                                       "at_ms": now, "actor": principal.actor,
                                       "action": "fair_on", "detail": None})
            self._tx.fair.forget(queue_id)
        return fair_view(queue_id, row)

    def fair_off(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        """Plain priority dispatch again; NOT_FOUND when the queue was not fair."""
        require_role(principal, (Role.ADMIN,))
        now = self._tx.clock()
        with self._tx.write() as conn:
            _require_queue(conn, queue_id)
            row = stored.fairness_of_queue(conn, queue_id)
            if row is None or not stored.delete_fairness(conn, queue_id):
                raise OrbitError(ErrorCode.NOT_FOUND, f"queue {queue_id} is not fair")
            insert_limit_change(conn, {"queue_id": queue_id, "pattern": row["key_name"],
                                       "at_ms": now, "actor": principal.actor,
                                       "action": "fair_off", "detail": None})
            self._tx.fair.forget(queue_id)
        return fair_view(queue_id, None)

    def get_fair(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        """The setting (``key`` null: not fair) and its recent changes, newest first."""
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        with self._tx.read() as conn:
            _require_queue(conn, queue_id)
            view = fair_view(queue_id, stored.fairness_of_queue(conn, queue_id))
            view["changes"] = [
                {**change_view(c), "key": c["pattern"]}
                for c in limit_changes_of(conn, queue_id, RECENT_CHANGES)
                if c["action"] in _ACTIONS]
            return view


def fair_view(queue_id: str, row: Mapping[Any, Any] | None) -> dict[str, Any]:
    if row is None:
        return {"queue_id": queue_id, "key": None, "updated_at_ms": None, "updated_by": None}
    return {"queue_id": queue_id, "key": row["key_name"], "updated_at_ms": row["updated_at_ms"],
            "updated_by": row["updated_by"]}


