"""Each queue's flow-control limits held in memory, so a dispatch in a queue without limits
reads no limit row (docs/flow-control.md, "Costs").

An entry is the queue's limits as last read, kept for ``max_age_ms``: a limit set or deleted
on this server drops its queue's entry at once; on another replica it is seen once the entry
is older than that (the TTL is the whole cross-replica story: a dispatch that finds limits
locks and re-reads the rows it applies, so a limit's *size* is always the committed one; only
whether a queue has limits at all may lag by the TTL). Every entry is dropped when a group
commit rolls back. Used on the store thread, but for ``limited``.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

from ..domain.flow import Limit, limit_of_row
from ..store.limits import limits_of_queue

# How long a replica may go on not knowing of a queue's first limit (or its last one gone).
LIMITS_MAX_AGE_MS = 1_000
MAX_ENTRIES = 10_000


class LimitTable:
    """Each queue's limits by pattern, with the instant they were read."""

    def __init__(self, max_age_ms: int = LIMITS_MAX_AGE_MS) -> None:
        self._max_age_ms = max_age_ms
        self._queues: dict[str, tuple[dict[str, Limit], int]] = {}

    def limits(self, conn: Connection, queue_id: str, now_ms: int) -> dict[str, Limit]:
        """The queue's limits by pattern (empty: none), from memory while fresh."""
        kept = self._queues.get(queue_id)
        if kept is not None and 0 <= now_ms - kept[1] < self._max_age_ms:
            return kept[0]
        found = {row["pattern"]: limit_of_row(row) for row in limits_of_queue(conn, queue_id)}
        if len(self._queues) >= MAX_ENTRIES:
            self._queues.clear()
        self._queues[queue_id] = (found, now_ms)
        return found

    def limited(self, queue_ids: Iterable[str]) -> set[str]:
        """Those of the queues known (from memory, without a statement) to have limits.
        Called from the event loop (``OrbitServer.act_on``): single dict look-ups only, safe
        beside the store thread's writes."""
        out: set[str] = set()
        for queue_id in queue_ids:
            kept = self._queues.get(queue_id)
            if kept is not None and kept[0]:
                out.add(queue_id)
        return out

    def forget(self, queue_id: str) -> None:
        self._queues.pop(queue_id, None)

    def clear(self) -> None:
        self._queues.clear()
