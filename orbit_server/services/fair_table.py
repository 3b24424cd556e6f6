"""Each queue's fair key name held in memory, so a submit or a dispatch in a queue that is
not fair reads nothing more (docs/flow-control.md "Fair dispatch"), and when a claim of a
queue that is not fair next looks for numbered tasks left from a time it was.

Like ``LimitTable``: an entry is kept for ``max_age_ms``; a change on this server drops it
at once, another replica sees it once the entry is older (a submit there may meanwhile
store the old setting's value: the task then takes its turn with that value). Every entry
is dropped when a group commit rolls back. Used on the store thread.
"""

from __future__ import annotations

from sqlalchemy import Connection

from ..store.fairness import fairness_of_queue

FAIR_MAX_AGE_MS = 1_000
MAX_ENTRIES = 10_000

# How often a claim of a queue that is not fair looks for numbered tasks (left from a time
# it was, or numbered by a replica that had not seen it turned off yet) while the last look
# found none.
NUMBERED_LOOK_MS = 1_000


class FairTable:
    """Each queue's fair key name (None: not fair), with the instant it was read."""

    def __init__(self, max_age_ms: int = FAIR_MAX_AGE_MS) -> None:
        self._max_age_ms = max_age_ms
        self._queues: dict[str, tuple[str | None, int]] = {}
        self._numbered_due: dict[str, int] = {}

    def key_name(self, conn: Connection, queue_id: str, now_ms: int) -> str | None:
        """The queue's fair key name, from memory while fresh."""
        kept = self._queues.get(queue_id)
        if kept is not None and 0 <= now_ms - kept[1] < self._max_age_ms:
            return kept[0]
        row = fairness_of_queue(conn, queue_id)
        name = None if row is None else str(row["key_name"])
        if len(self._queues) >= MAX_ENTRIES:
            self._queues.clear()
            self._numbered_due.clear()
        self._queues[queue_id] = (name, now_ms)
        return name

    def numbered_due(self, queue_id: str, now_ms: int) -> bool:
        """Whether a claim of the queue (not fair) should look for numbered tasks now."""
        return self._numbered_due.get(queue_id, now_ms) <= now_ms

    def numbered_looked(self, queue_id: str, now_ms: int, found: bool) -> None:
        """A look found numbered tasks (look again at the next claim) or none."""
        if found:
            self._numbered_due.pop(queue_id, None)
        else:
            self._numbered_due[queue_id] = now_ms + NUMBERED_LOOK_MS

    def forget(self, queue_id: str) -> None:
        self._queues.pop(queue_id, None)

    def clear(self) -> None:
        self._queues.clear()
        self._numbered_due.clear()
