"""A short cache of each queue's worker offers (``listing.queue_offers``) for the hot paths:
every submit without a waiting worker and every read of a PENDING task answers its
``waiting`` fact from them, which otherwise costs a query over the queue's instance rows.

An entry is exact until a live instance it counted would stop being live (its last sight
plus the session TTL) or an instance row changes. Rows this server changes (a hello, a
connection's close, the pruning of old instances) drop every entry at once; rows another
replica changes are seen within ``MAX_AGE_MS``, the bound docs/http-api.md ("Waiting")
states. Store thread only, like the use cases.
"""

from __future__ import annotations

from sqlalchemy import Connection

from .context import TxContext
from .listing import Offers, queue_offers, queue_offers_until

# How long an entry may answer for rows other replicas write.
MAX_AGE_MS = 1_000
# Queues remembered at most (a bound on memory, not a working-set size).
MAX_QUEUES = 4_096


class OfferCache:
    def __init__(self, tx: TxContext, max_age_ms: int = MAX_AGE_MS) -> None:
        self._tx = tx
        self._max_age_ms = max_age_ms
        # queue -> (offers, read at ms, good until ms)
        self._by_queue: dict[str, tuple[Offers, int, int]] = {}
        # An entry read in a group commit that rolled back may hold rows never committed.
        tx.on_group_rollback(self.forget)

    def offers(self, conn: Connection, queue_id: str, now: int) -> Offers:
        """The queue's offers (treat as read-only), from the cache while it holds."""
        if self._max_age_ms <= 0:
            return queue_offers(conn, queue_id, now, self._tx.config.session_ttl_ms)
        hit = self._by_queue.get(queue_id)
        if hit is not None and hit[1] <= now < hit[2]:
            return hit[0]
        offers, live_until = queue_offers_until(conn, queue_id, now,
                                                self._tx.config.session_ttl_ms)
        if len(self._by_queue) >= MAX_QUEUES:
            self._by_queue.clear()
        until = now + self._max_age_ms if live_until is None else min(
            now + self._max_age_ms, live_until)
        self._by_queue[queue_id] = (offers, now, until)
        return offers

    def forget(self) -> None:
        """An instance row changed here: read every queue's offers afresh."""
        self._by_queue.clear()
