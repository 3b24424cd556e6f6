"""Background tasks with an owner: every task the server starts is started through one, kept
until it ends, and at the owner's end either cancelled or awaited, so none outlives the part
that started it and none fails unseen. tests/unit/server_adapters/test_task_owner.py also
checks that no module of orbit_server starts a task any other way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TaskOwner:
    """The tasks one part of the server started. A task that fails on its own (not while
    being stopped) is logged with its traceback at once."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping: set[asyncio.Task[Any]] = set()

    def start(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        stopped = task in self._stopping
        self._stopping.discard(task)
        if task.cancelled() or stopped:
            return
        exc = task.exception()
        if exc is not None:
            self._log.error("background task %s failed", task.get_name(),
                            exc_info=(type(exc), exc, exc.__traceback__))

    async def stop(self, *tasks: asyncio.Task[Any]) -> None:
        """Cancel ``tasks`` (every task still running when none is named) and wait until
        they have ended. What they raise while stopping is theirs to log: a connection's
        reader, say, whose peer is gone."""
        chosen = list(tasks) if tasks else list(self._tasks)
        for task in chosen:
            if not task.done():
                self._stopping.add(task)
                task.cancel()
        for task in chosen:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def join(self) -> None:
        """Wait, without cancelling, until every task still running has ended (one whose
        work must finish, e.g. a transaction already on the store thread)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))
