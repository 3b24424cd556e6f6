"""In-memory waiters on tasks: a long poll (``GET /v1/tasks/{id}?wait_ms=``) sleeps here
until woken, and a producer channel's watch is called back here (``Watcher``).

Waking is a hint, unless it carries the task's view read in the very transaction that made
the task terminal (``wake(ids, views)``); otherwise a woken waiter re-reads the task. Several
servers may share one database, so a waiter also re-reads on its own every few seconds
(the HTTP layer's slice), which bounds how stale a long poll can be when another replica
finished the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Watcher(Protocol):
    def wake(self, view: dict[str, Any] | None) -> None:
        """The task may have settled: ``view`` is its view read in the transaction that
        ended it, or None (read it again). Called on the event loop; must not block."""


class TaskWaiter(asyncio.Event):
    """An event that may carry the task's terminal view (``view``) when set."""

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, Any] | None = None

    def wake(self, view: dict[str, Any] | None) -> None:
        self.view = view
        self.set()


class TaskWaiters:
    """Events per task that somebody is waiting on. Event-loop thread only, except
    ``watching`` (a plain dict lookup, safe from the store thread)."""

    def __init__(self) -> None:
        self._events: dict[str, set[Watcher]] = {}

    def watching(self, task_id: str) -> bool:
        """Whether somebody waits on ``task_id`` right now (a hint; may be stale)."""
        return task_id in self._events

    def register(self, task_id: str) -> TaskWaiter:
        """Register interest in ``task_id`` *before* reading it, so no wake-up is missed.

        Pair every ``register`` with one ``unregister(task_id, event)`` (in a ``finally``).
        """
        event = TaskWaiter()
        self.watch(task_id, event)
        return event

    def watch(self, task_id: str, watcher: Watcher) -> None:
        """Call ``watcher.wake`` whenever ``task_id`` may have settled, until ``unregister``."""
        self._events.setdefault(task_id, set()).add(watcher)

    def unregister(self, task_id: str, event: Watcher) -> None:
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
            for watcher in tuple(self._events.get(task_id, ())):  # a wake may unregister
                watcher.wake(view)

    def __len__(self) -> int:
        return len(self._events)
