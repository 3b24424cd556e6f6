"""Bounded storage: finished tasks past ``config.task_retention_ms`` are deleted with their
attempts, evidence and audit rows, oldest first, a bounded batch per transaction; instance
rows unseen for the receipt retention (no open attempt, so nothing to resume) are deleted
too, and so are flow-control holds no limit counts any more (those of keys never claimed
again). Every public method is one transaction, safe with several replicas: each skips the
rows another replica's batch holds, and a row deleted twice is simply gone.
"""

from __future__ import annotations

from orbit_wire.flow import MAX_RATE_INTERVAL_MS

from ..store import retention as q
from ..store.limits import PRUNE_AGE_MS, prune_stale_holds
from ..store.retry import transactional
from .context import TxContext
from .offers import OfferCache

# Tasks per transaction: each takes its attempts, evidence and audit rows with it.
TASK_BATCH = 500


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class Retention:
    """Deletes what is kept no longer (docs/deployment.md "Retention")."""

    def __init__(self, tx: TxContext, offers: OfferCache | None = None) -> None:
        self._tx = tx
        self._offers = offers

    def prune_tasks(self) -> int:
        """Delete up to TASK_BATCH of the oldest tasks finished before the retention, with
        their rows in every table; the number deleted (0 with a retention of 0: keep all).
        Fewer than TASK_BATCH means none is left for now."""
        retention = self._tx.config.task_retention_ms
        if retention <= 0:
            return 0
        before = self._tx.clock() - retention
        with self._tx.write() as conn:
            ids = q.old_finished_task_ids(conn, before, TASK_BATCH)
            if not ids:
                return 0
            return q.delete_tasks(conn, ids, before)

    def prune_instances(self) -> int:
        """Delete up to ``reap_batch`` instance rows not seen for the receipt retention and
        holding no reserved or running attempt; the number deleted. Their receipts are
        gone by then, and an instance that comes back is registered anew at its hello."""
        cfg = self._tx.config
        before = self._tx.clock() - cfg.receipt_retention_ms
        with self._tx.write() as conn:
            ids = q.old_instance_ids(conn, before, cfg.reap_batch)
            if not ids:
                return 0
            busy = q.instances_with_open_attempts(conn, ids)
            idle = [i for i in ids if i not in busy]
            if not idle:
                return 0
            deleted = q.delete_instances(conn, idle, before)
            if deleted and self._offers is not None:
                self._offers.forget()  # a gone row may have been a capability's last sight
        return deleted

    def prune_holds(self) -> int:
        """Delete up to ``reap_batch`` flow-control holds older than the longest rate window
        any limit may have (and PRUNE_AGE_MS more) whose attempt has ended or is gone: no
        limit counts them. The number deleted."""
        before = self._tx.clock() - MAX_RATE_INTERVAL_MS - PRUNE_AGE_MS
        with self._tx.write() as conn:
            return prune_stale_holds(conn, before, self._tx.config.reap_batch)
