"""The owner of background tasks that live outside a TaskGroup's block.

A part whose tasks start and end with events rather than with one ``async with`` (the
pool's template restart, a child's memory watch, the orphan sweeps, a connection's writer)
spawns them through a ``TaskOwner``: it keeps every task until it ends, ``cancel`` cancels
them, and ``close`` cancels them and waits until each has ended. No task of
orbit_supervisor runs unowned: besides this module only the Supervisor's TaskGroup makes
tasks (tests/unit/supervisor/test_owned_tasks.py reads the code for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskOwner", "current_task"]

T = TypeVar("T")


class TaskOwner:
    """Tasks spawned here are kept until they end. The coroutines handle what they expect
    themselves; an exception that escapes one is left to the loop's handler, as for any
    task whose exception nobody retrieved."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` as a task of this owner, on the running loop."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        """Tasks not ended yet."""
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel every task not ended yet, except the caller's own."""
        current = current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def close(self) -> None:
        """Cancel every task not ended yet and wait until each has ended (not the caller's
        own, which ends when the caller returns)."""
        self.cancel()
        current = current_task()
        others = [task for task in self._tasks if task is not current]
        if others:
            await asyncio.wait(others)


def current_task() -> asyncio.Task[Any] | None:
    """The task running this code, or None (outside a task or a running loop)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: called from outside any task
        return None
