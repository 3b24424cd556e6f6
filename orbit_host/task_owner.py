"""Background tasks with an owner, for the server and the supervisor alike.

A part whose tasks start and end with events rather than with one ``async with`` (a
connection's reader and writer, the dispatcher's passes, the pool's template restart, a
child's memory watch) starts them through a ``TaskOwner``: it keeps every task until it
ends, ``stop`` cancels them and waits until each has ended, ``join`` waits without
cancelling. None outlives the part that started it, and with a logger none fails unseen.
Tests of both packages read the code for any task started another way
(tests/unit/server_adapters/test_task_owner.py, tests/unit/supervisor/test_owned_tasks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskOwner", "current_task"]

T = TypeVar("T")


class TaskOwner:
    """The tasks one part started. With ``log``, a task that fails on its own (not while
    being stopped) is logged with its traceback at once; without, its exception is left to
    the loop's handler, as for any task whose exception nobody retrieved."""

    __slots__ = ("_log", "_stopping", "_tasks")

    def __init__(self, log: logging.Logger | None = None) -> None:
        self._log = log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping: set[asyncio.Task[Any]] = set()

    def start(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as a task of this owner, on the running loop."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def __len__(self) -> int:
        """Tasks not ended yet."""
        return len(self._tasks)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        stopped = task in self._stopping
        self._stopping.discard(task)
        if self._log is None or task.cancelled() or stopped:
            return
        exc = task.exception()
        if exc is not None:
            self._log.error("background task %s failed", task.get_name(),
                            exc_info=(type(exc), exc, exc.__traceback__))

    def cancel(self, *tasks: asyncio.Task[Any]) -> list[asyncio.Task[Any]]:
        """Cancel ``tasks`` (every task not ended yet when none is named), never the
        caller's own; the tasks cancelled."""
        current = current_task()
        chosen = [t for t in (tasks or tuple(self._tasks)) if t is not current and not t.done()]
        for task in chosen:
            self._stopping.add(task)
            task.cancel()
        return chosen

    async def stop(self, *tasks: asyncio.Task[Any]) -> None:
        """Cancel ``tasks`` (every task not ended yet when none is named; never the caller's
        own) and wait until they have ended. What they raise while stopping is theirs to log:
        a connection's reader, say, whose peer is gone."""
        for task in self.cancel(*tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def join(self) -> None:
        """Wait, without cancelling, until every task still running has ended (one whose
        work must finish, e.g. a transaction already on the store thread); never the
        caller's own."""
        current = current_task()
        while others := {t for t in self._tasks if t is not current}:
            await asyncio.wait(others)


def current_task() -> asyncio.Task[Any] | None:
    """The task running this code, or None (outside a task or a running loop)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: called from outside any task
        return None
