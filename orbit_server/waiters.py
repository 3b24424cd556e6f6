"""In-memory long-poll waiters: ``GET /v1/tasks/{id}?wait_ms=`` sleeps here until woken.

Waking is a hint, not a result: a woken waiter re-reads the task from the store. Several
servers may share one database, so a waiter also re-reads on its own every few seconds
(the HTTP layer's slice), which bounds how stale a long poll can be when another replica
finished the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class TaskWaiters:
    """Events per task that somebody is waiting on. Event-loop thread only."""

    def __init__(self) -> None:
        self._events: dict[str, set[asyncio.Event]] = {}

    def register(self, task_id: str) -> asyncio.Event:
        """Register interest in ``task_id`` *before* reading it, so no wake-up is missed.

        Pair every ``register`` with one ``unregister(task_id, event)`` (in a ``finally``).
        """
        event = asyncio.Event()
        self._events.setdefault(task_id, set()).add(event)
        return event

    def unregister(self, task_id: str, event: asyncio.Event) -> None:
        events = self._events.get(task_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[task_id]

    def wake(self, task_ids: Iterable[str]) -> None:
        """Wake everyone waiting on these tasks (they re-read; waking twice is harmless)."""
        for task_id in task_ids:
            for event in self._events.get(task_id, ()):
                event.set()

    def __len__(self) -> int:
        return len(self._events)
