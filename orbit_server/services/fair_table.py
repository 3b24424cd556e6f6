"""Each queue's fair key name held in memory, and where its rotation stands, so a submit or
a dispatch in a queue that is not fair reads nothing more (docs/flow-control.md "Fair
dispatch").

Like ``LimitTable``: an entry is kept for ``max_age_ms``; a change on this server drops it
at once, another replica sees it once the entry is older (a submit there may meanwhile
store the old setting's value: the task then takes its turn with that value). The rotation's
place (the value served last) is per server and not durable: two replicas each take turns,
and a restart starts again from the first value. Every entry is dropped when a group commit
rolls back. Used on the store thread.
"""

from __future__ import annotations

from sqlalchemy import Connection

from ..store.fairness import fairness_of_queue

FAIR_MAX_AGE_MS = 1_000
MAX_ENTRIES = 10_000

# Where a queue's rotation stands: ``domain.fairness.position`` of the row served last.
Position = tuple[int, str]


class FairTable:
    """Each queue's fair key name (None: not fair), with the instant it was read."""

    def __init__(self, max_age_ms: int = FAIR_MAX_AGE_MS) -> None:
        self._max_age_ms = max_age_ms
        self._queues: dict[str, tuple[str | None, int]] = {}
        self._served: dict[str, Position] = {}

    def key_name(self, conn: Connection, queue_id: str, now_ms: int) -> str | None:
        """The queue's fair key name, from memory while fresh."""
        kept = self._queues.get(queue_id)
        if kept is not None and 0 <= now_ms - kept[1] < self._max_age_ms:
            return kept[0]
        row = fairness_of_queue(conn, queue_id)
        name = None if row is None else str(row["key_name"])
        if len(self._queues) >= MAX_ENTRIES:
            self._queues.clear()
            self._served.clear()
        self._queues[queue_id] = (name, now_ms)
        return name

    def served_last(self, queue_id: str) -> Position | None:
        return self._served.get(queue_id)

    def served(self, queue_id: str, where: Position) -> None:
        self._served[queue_id] = where

    def forget(self, queue_id: str) -> None:
        self._queues.pop(queue_id, None)

    def clear(self) -> None:
        self._queues.clear()
