"""The one thread that runs every use case (``orbit_server.services``).

SQLite has a single writer, and every use case is exactly one transaction, so the
adapters hop to this thread once per transaction (never per statement).

Two lanes share the thread. The *worker* lane (dispatch claims, worker requests, releases)
goes first: a worker waiting for a `start` or `finish` answer holds a handler slot, and a
task's completion is what a producer's long poll waits for. The *normal* lane (HTTP calls,
the reaper) is still served at least once every ``WORKER_STREAK`` worker calls, so it never
starves. Within a lane calls run in submission order: an adapter that submits A before B in
the same lane can rely on A's transaction committing before B's starts (the WebSocket adapter
relies on this to release a closed connection's reservations after any reserve it had
already asked for).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from orbit_host.tally import Buckets
from orbit_wire.errors import ErrorCode, OrbitError

P = ParamSpec("P")
T = TypeVar("T")

# Worker-lane calls served in a row before a waiting normal-lane call gets its turn.
WORKER_STREAK = 4

_Item = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.cancelled():  # the caller went away; the transaction itself has already run
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class StoreThread:
    """Runs callables one at a time on a dedicated thread.

    ``start()`` inside the running event loop; ``await call(fn, ...)`` (normal lane) or
    ``await call_worker(fn, ...)`` (worker lane) from coroutines; ``close()`` once at
    shutdown: it lets queued calls finish and stops the thread.

    ``timed=True``: each call's duration on the thread (its transaction, retries included)
    goes into ``timings`` by lane, written by this thread only (the metrics read them).
    """

    def __init__(self, *, timed: bool = False) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cv = threading.Condition()
        self._worker: deque[_Item] = deque()
        self._normal: deque[_Item] = deque()
        self.timings: dict[str, Buckets] | None = (
            {"worker": Buckets(), "normal": Buckets()} if timed else None)
        self._closing = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="orbit-store", daemon=True)
        self._thread.start()

    def queued(self) -> dict[str, int]:
        """Calls waiting for the thread, by lane (not counting the one running)."""
        return {"worker": len(self._worker), "normal": len(self._normal)}

    def on_store_thread(self) -> bool:
        return threading.current_thread() is self._thread

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the store thread (normal lane); return or raise."""
        return await self._submit(self._normal, fn, args, kwargs)

    async def call_worker(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like ``call``, in the worker lane (served first)."""
        return await self._submit(self._worker, fn, args, kwargs)

    async def _submit(self, lane: deque[_Item], fn: Callable[..., T], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> T:
        if self._closing:  # the server is stopping: a client retries, elsewhere or later
            raise OrbitError(ErrorCode.UNAVAILABLE, "the server is shutting down; retry",
                             retryable=True)
        if self._loop is None or self._thread is None:
            raise RuntimeError("StoreThread.start() was not called")
        fut: asyncio.Future[T] = self._loop.create_future()
        call: Callable[..., T] = (lambda: fn(*args, **kwargs)) if kwargs else fn
        with self._cv:
            lane.append((fut, call, () if kwargs else args))
            self._cv.notify()
        return await fut

    def _next(self, streak: int) -> tuple[_Item | None, int]:
        """The next call and the new streak (> 0: the call is from the worker lane)."""
        with self._cv:
            while not self._worker and not self._normal:
                if self._closing:
                    return None, streak
                self._cv.wait()
            if self._worker and (streak < WORKER_STREAK or not self._normal):
                return self._worker.popleft(), streak + 1
            return self._normal.popleft(), 0

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        timings = self.timings
        streak = 0
        while True:
            item, streak = self._next(streak)
            if item is None:
                return
            fut, fn, args = item
            started = time.perf_counter() if timings is not None else 0.0
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting coroutine
                outcome: tuple[bool, Any] = (False, exc)
            else:
                outcome = (True, result)
            if timings is not None:
                timings["worker" if streak else "normal"].observe(time.perf_counter() - started)
            try:
                loop.call_soon_threadsafe(_resolve, fut, *outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def close(self) -> None:
        """Let queued calls finish, then stop the thread (bounded by the queued work)."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
