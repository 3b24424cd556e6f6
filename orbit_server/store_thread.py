"""The one thread that runs every Service call.

SQLite has a single writer, and every Service method is exactly one transaction, so the
adapters hop to this thread once per transaction (never per statement). Calls run in the
order they were submitted: an adapter that submits A before B on the event loop can rely on
A's transaction committing before B's starts (the WebSocket adapter relies on this to release
a closed connection's reservations after any reserve it had already asked for).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StoreThread:
    """Runs callables one at a time, in submission order, on a dedicated thread.

    Create it inside the running event loop (``start``), ``await call(fn, ...)`` from
    coroutines, and ``close()`` once at shutdown after the last call returned.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id: int | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orbit-store")
        # Record the thread id so `on_store_thread` can assert the contract in debug checks.
        self._executor.submit(self._remember_thread).result()

    def _remember_thread(self) -> None:
        self._thread_id = threading.get_ident()

    def on_store_thread(self) -> bool:
        return threading.get_ident() == self._thread_id

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the store thread and return (or raise) its result."""
        if self._executor is None or self._loop is None:
            raise RuntimeError("StoreThread.start() was not called")
        if kwargs:
            return await self._loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))
        return await self._loop.run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        """Wait for queued calls to finish and stop the thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
