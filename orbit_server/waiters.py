"""In-memory long-poll waiters: ``GET /v1/tasks/{id}?wait_ms=`` sleeps here until woken.

Waking is a hint, unless it carries the task's view read in the very transaction that made
the task terminal (``wake(ids, views)``); otherwise a woken waiter re-reads the task. Several
servers may share one database, so a waiter also re-reads on its own every few seconds
(the HTTP layer's slice), which bounds how stale a long poll can be when another replica
finished the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any


class TaskWaiter(asyncio.Event):
    """An event that may carry the task's terminal view (``view``) when set."""

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, Any] | None = None


class TaskWaiters:
    """Events per task that somebody is waiting on. Event-loop thread only, except
    ``watching`` (a plain dict lookup, safe from the store thread)."""

    def __init__(self) -> None:
        self._events: dict[str, set[TaskWaiter]] = {}

    def watching(self, task_id: str) -> bool:
        """Whether somebody waits on ``task_id`` right now (a hint; may be stale)."""
        return task_id in self._events

    def register(self, task_id: str) -> TaskWaiter:
        """Register interest in ``task_id`` *before* reading it, so no wake-up is missed.

        Pair every ``register`` with one ``unregister(task_id, event)`` (in a ``finally``).
        """
        event = TaskWaiter()
        self._events.setdefault(task_id, set()).add(event)
        return event

    def unregister(self, task_id: str, event: TaskWaiter) -> None:
        events = self._events.get(task_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[task_id]

    def wake(self, task_ids: Iterable[str],
             views: Mapping[str, dict[str, Any]] | None = None) -> None:
        """Wake everyone waiting on these tasks (waking twice is harmless); a task with a
        view in ``views`` hands it to its waiters, the others re-read."""
        for task_id in task_ids:
            view = views.get(task_id) if views else None
            for event in self._events.get(task_id, ()):
                event.view = view
                event.set()

    def __len__(self) -> int:
        return len(self._events)
