"""The reaper: what the server decides by itself when time passes. Lapsed leases end
UNKNOWN/LEASE_EXPIRED (then the retry policy), stale reservations go back, PENDING tasks past
their deadline fail, due wake-ups become ready queues, and old receipts are pruned. Every
public method is one transaction; the app's loops call them on the store thread.
"""

from __future__ import annotations

import logging

from orbit_host.logs import fields
from orbit_wire.labels import requires_from_text
from orbit_wire.model import Capability, Outcome, TaskState

from .. import domain
from ..domain.listing import waiting_fact
from ..domain.pauses import paused_fact
from ..store import reaping
from ..store.receipts import prune_receipts
from ..store.retry import transactional
from ..store.rows import UnitOfWork
from .context import TxContext
from .effects import Effects
from .listing import Offers, queue_offers
from .recording import SERVER, fail_at_deadline, record_close, release_all
from .wakeups import Wakeups

log = logging.getLogger("orbit.reaper")
# Lease expiries logged one by one per pass; more are summed up in one line.
_LOGGED_EXPIRIES = 10

# What the reaper records for every attempt whose lease lapsed.
_LEASE_EXPIRED = domain.CheckedReport(Outcome.UNKNOWN, "LEASE_EXPIRED", False, None, None)


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class Reaper:
    """Reaper passes and receipt pruning; due wake-ups come from the shared ``Wakeups``."""

    def __init__(self, tx: TxContext, wakeups: Wakeups) -> None:
        self._tx = tx
        self._wakeups = wakeups

    def reap(self) -> Effects:
        """One reaper pass, one transaction: expire lapsed leases (UNKNOWN/LEASE_EXPIRED and
        the policy), release stale reservations, fail PENDING tasks past their deadline.
        ``next_due_ms`` is when something is next known to fall due (now if a batch was
        full): the caller runs the next pass then at the latest."""
        now = self._tx.clock()
        cfg = self._tx.config
        rng = self._tx.rng
        limit = cfg.reap_batch
        effects = Effects()
        with self._tx.write() as conn:
            uow = UnitOfWork(conn, now)
            self._wakeups.load_once(conn)
            # An unconfirmed grant's lapse waits one session TTL more for the worker's word:
            # a decline, or a resume without it, releases it unspent (it never ran); a
            # word that it has it confirms it. Its handler, if it ran, is dead already
            # (the worker's expiry precedes the server's), and no retry starts before
            # the lease's end plus the kill grace either way.
            expired = [uow.adopt_attempt_row(r) for r in reaping.expired_leases(
                conn, now, limit, cfg.session_ttl_ms)]
            stale_before = now - cfg.reservation_ttl_ms
            stale = [uow.adopt_attempt_row(r)
                     for r in reaping.stale_reservations(conn, stale_before, limit)]
            uow.load_tasks([a.task_id for a in expired] + [a.task_id for a in stale])
            lines = []
            for attempt in expired:
                task = uow.tasks[attempt.task_id]
                before = task.state
                result = domain.expire(task, attempt, now, rng.random(), cfg.kill_grace_ms)
                record_close(uow, self._wakeups, SERVER, task, attempt, before, _LEASE_EXPIRED,
                             result, effects)
                effects.counted().expired.append(task.queue_id)
                if attempt.grant_connection is not None:
                    # Granted with the dispatch and never confirmed: the worker may never
                    # have received it (its process died with the frame unread).
                    effects.counted().grants_expired_unconfirmed.append(task.queue_id)
                lines.append((attempt.id, task.id, attempt.instance_id, task.state.value,
                              task.queue_id))
            release_all(uow, stale, domain.Rule.RESERVATION_EXPIRED, SERVER, effects)
            overdue = [uow.adopt_task_row(r) for r in reaping.overdue_pending(conn, now, limit)]
            # Tasks released just above are PENDING in memory only; include them too.
            overdue_ids = {t.id for t in overdue}
            overdue += [t for t in uow.tasks.values() if t.id not in overdue_ids
                        and t.state is TaskState.PENDING and t.deadline_at_ms <= now]
            for task in overdue:
                if task.state is TaskState.PENDING:
                    fail_at_deadline(uow, task, effects)
            late = self._not_started(uow, now, limit, effects)
            uow.flush()
            full = (len(expired) >= limit or len(stale) >= limit or len(overdue) >= limit
                    or late >= limit)
            effects.due(now if full else None)
            due = reaping.next_due(conn)
            lease_expiry = due.lease_expiry
            if lease_expiry is not None and lease_expiry <= now:
                # Not reaped in this pass: an unconfirmed grant's lapse waits (above).
                lease_expiry = reaping.next_lease_decision(conn, now, cfg.session_ttl_ms)
            effects.due(lease_expiry)
            if due.oldest_reservation is not None:
                effects.due(due.oldest_reservation + cfg.reservation_ttl_ms)
            effects.due(due.pending_deadline)
            effects.due(due.start_by)
        self._wakeups.take_due(now, effects)
        for attempt_id, task_id, instance_id, state, queue_id in lines[:_LOGGED_EXPIRIES]:
            log.info("lease of attempt %s (task %s, worker %s) expired; the task is %s",
                     attempt_id, task_id, instance_id, state, extra=fields(
                         "lease_expired", attempt_id=attempt_id, task_id=task_id,
                         instance_id=instance_id, queue_id=queue_id, state=state))
        if len(lines) > _LOGGED_EXPIRIES:
            more = len(lines) - _LOGGED_EXPIRIES
            log.info("%d more leases expired in this pass", more,
                     extra=fields("lease_expired_more", count=more))
        return effects

    def _not_started(self, uow: UnitOfWork, now: int, limit: int, effects: Effects) -> int:
        """Fail the tasks whose schedule_to_start_ms passed before any attempt started
        (FAILED/NOT_STARTED_IN_TIME, with what they waited for); returns the rows read."""
        rows = reaping.start_by_passed(uow.conn, now, limit)
        offers: dict[str, Offers] = {}
        ttl = self._tx.config.session_ttl_ms
        for row in rows:
            task = uow.adopt_task_row(row)
            waiting = None
            if task.state is TaskState.PENDING:
                cap = Capability(row["handler"], row["handler_version"], row["payload_version"])
                pause = (self._tx.pauses.current.pause_of(task.queue_id, cap)
                         if self._tx.pauses.current else None)
                if pause is not None:  # it waited for a pause, not for a worker
                    waiting = paused_fact(pause, cap, row["created_at_ms"])
                else:
                    if task.queue_id not in offers:
                        offers[task.queue_id] = queue_offers(uow.conn, task.queue_id, now, ttl)
                    queue_offers_now = offers[task.queue_id]
                    waiting = waiting_fact(task.state.value, cap, row["created_at_ms"],
                                           queue_offers_now, requires_from_text(row["requires"]),
                                           queue_offers_now.labels.get(cap, ()))
            if domain.expire_start_by(task, now, row["schedule_to_start_ms"], waiting):
                uow.audit(task.id, None, SERVER, "task_not_started_in_time",
                          TaskState.PENDING.value, task.state.value,
                          {"schedule_to_start_ms": row["schedule_to_start_ms"]})
                effects.terminal_tasks.append(task.id)
                effects.counted().timed_out.append((task.queue_id, "NOT_STARTED_IN_TIME"))
        return len(rows)

    def prune_receipts(self) -> int:
        """Delete the oldest receipts past the retention, about ``reap_batch`` of them in one
        transaction; the number deleted (fewer than ``reap_batch``: none are left, so the
        caller stops until its next period). A receipt only answers a resent op, and past
        the retention every lease it concerned is long over: a resend then gets the
        attempt's current answer (docs/protocol.md)."""
        cfg = self._tx.config
        before = self._tx.clock() - cfg.receipt_retention_ms
        with self._tx.write() as conn:
            return prune_receipts(conn, before, cfg.reap_batch)
