"""Retries and reviewed tasks scheduled in the future, in memory: ``Wakeups`` turns each into
a ready queue once it falls due, so the dispatcher looks again without polling the table.

One instance is shared by whoever schedules (an operator's review, a finish or expiry that
retries later) and the reaper, whose pass takes the due ones. The heap is only a hint that
saves a poll: a task scheduled by another replica is found by the dispatcher's slow poll,
and a restarted server loads every queue's next instant at its first reaper pass.
"""

from __future__ import annotations

import heapq

from sqlalchemy import Connection

from ..store import reaping
from .effects import Effects


class Wakeups:
    """A heap of (available_at_ms, queue_id). Store thread only, like the use cases."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []
        self._loaded = False

    def schedule(self, queue_id: str, at_ms: int, now_ms: int, effects: Effects) -> None:
        """Make ``queue_id`` dispatchable at ``at_ms``: a ready queue now if it is due, else
        a wake-up at that instant (which ``effects`` reports as due)."""
        if at_ms <= now_ms:
            effects.ready_queues.add(queue_id)
        else:
            heapq.heappush(self._heap, (at_ms, queue_id))
            effects.due(at_ms)

    def load_once(self, conn: Connection) -> None:
        """At the first reaper pass, learn when each queue's waiting tasks become
        dispatchable (work scheduled before this server started)."""
        if self._loaded:
            return
        for queue_id, first in reaping.first_available_by_queue(conn):
            heapq.heappush(self._heap, (first, queue_id))
        self._loaded = True

    def take_due(self, now_ms: int, effects: Effects) -> None:
        """Move every wake-up due at ``now_ms`` into ``effects.ready_queues`` and report the
        next one as due."""
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            effects.ready_queues.add(heapq.heappop(heap)[1])
        if heap:
            effects.due(heap[0][0])
