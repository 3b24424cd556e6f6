"""Pausing and resuming a queue, a capability or a capability version (docs/flow-control.md
"Pause and resume"): no new starts for the matching tasks while paused, running attempts
finish, the tasks stay PENDING. Every pause and resume is logged with who and why
(``pause_log``). Every public method is one transaction.

Each server keeps the pauses in memory (``TxContext.pauses``); a pause or resume taken here
replaces that board from the rows read back in its own transaction, and ``refresh`` (every
server, at least once per heartbeat interval) brings in those taken through another replica.
A resume makes the queue dispatchable at once here (``Effects.ready_queues``) and within a
heartbeat elsewhere (the refresh answers the queues some pause left).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from orbit_wire.model import Role

from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..domain.pauses import Pause, PauseSet, check_pause_reason, pause_key
from ..store import pauses as stored
from ..store.queues import queue_exists
from ..store.retry import transactional
from .context import TxContext
from .effects import Effects

_OPERATORS = (Role.ADMIN, Role.PRODUCER)
# Pauses and resumes a queue's view lists, newest first.
LOG_SHOWN = 50


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class PauseService:
    def __init__(self, tx: TxContext) -> None:
        self._tx = tx

    def pause(self, principal: Principal, queue_id: str, handler: str | None,
              handler_version: str | None, reason: object) -> dict[str, Any]:
        """Pause (or re-pause with a new reason) the queue, one of its capabilities, or one
        version of it; the queue's pauses and log after it."""
        key = pause_key(queue_id, handler, handler_version)
        why = check_pause_reason(reason, required=True)
        assert why is not None
        now = self._tx.clock()
        with self._tx.write() as conn:
            self._check_queue(conn, principal, queue_id)
            stored.put_pause(conn, key.stored(), why, principal.operator, now)
            stored.log_pause(conn, key.stored(), "paused", principal.operator, why, now)
            self._tx.pauses.replace(_pause_set(conn))
            return _queue_pauses(conn, queue_id)

    def resume(self, principal: Principal, queue_id: str, handler: str | None,
               handler_version: str | None, reason: object
               ) -> tuple[dict[str, Any], Effects]:
        """Lift the pause of exactly this key (a capability's pause is not lifted by the
        queue's resume, nor the other way round); ``resumed`` says whether one was in
        force. The queue is dispatchable at once."""
        key = pause_key(queue_id, handler, handler_version)
        why = check_pause_reason(reason, required=False)
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            self._check_queue(conn, principal, queue_id)
            resumed = stored.delete_pause(conn, key.stored())
            if resumed:
                stored.log_pause(conn, key.stored(), "resumed", principal.operator, why, now)
            self._tx.pauses.replace(_pause_set(conn))
            view = _queue_pauses(conn, queue_id)
        if resumed:
            effects.ready_queues.add(queue_id)
        return {**view, "resumed": resumed}, effects

    def of_queue(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        """The queue's pauses in force and its last pauses and resumes."""
        with self._tx.read() as conn:
            self._check_queue(conn, principal, queue_id)
            return _queue_pauses(conn, queue_id)

    def refresh(self) -> set[str]:
        """Read the pauses in force into memory; the queues some pause left since the last
        read (worth a dispatch pass)."""
        with self._tx.read() as conn:
            return self._tx.pauses.replace(_pause_set(conn))

    def _check_queue(self, conn: Connection, principal: Principal, queue_id: str) -> None:
        require_role(principal, _OPERATORS)
        require_visible_queue(principal, queue_id)
        if not queue_exists(conn, queue_id):
            raise queue_not_found(queue_id)


def _pause_set(conn: Connection) -> PauseSet:
    return PauseSet(Pause.of_row(r) for r in stored.all_pauses(conn))


def paused_views(conn: Connection, queue_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The pauses in force of each of ``queue_ids`` (the queue views' ``paused``)."""
    out: dict[str, list[dict[str, Any]]] = {q: [] for q in queue_ids}
    for row in stored.pauses_of_queues(conn, queue_ids):
        out.setdefault(str(row["queue_id"]), []).append(Pause.of_row(row).view())
    return out


def _queue_pauses(conn: Connection, queue_id: str) -> dict[str, Any]:
    log = [{"action": r["action"], "scope": _scope(r), "handler": r["handler"] or None,
            "handler_version": r["handler_version"] or None, "actor": r["actor"],
            "reason": r["reason"], "at_ms": r["at_ms"]}
           for r in stored.pause_log_of(conn, queue_id, LOG_SHOWN)]
    return {"queue_id": queue_id, "paused": paused_views(conn, [queue_id])[queue_id],
            "log": log}


def _scope(row: Any) -> str:
    if not row["handler"]:
        return "queue"
    return "capability" if not row["handler_version"] else "capability_version"
