"""The one thread that runs every use case (``orbit_server.services``).

SQLite has a single writer, and every use case is exactly one transaction, so the
adapters hop to this thread once per transaction (never per statement).

Two lanes share the thread. The *worker* lane (dispatch claims, worker requests, releases)
goes first: a worker waiting for a `start` or `finish` answer holds a handler slot, and a
task's completion is what a producer's long poll waits for. The *normal* lane (HTTP calls,
the reaper) is still served at least once every ``WORKER_STREAK`` worker turns (a call, or
a group of them: below), so it never starves. Within a lane calls run in submission order:
an adapter that submits A before B in the same lane can rely on A's transaction committing
before B's starts (the WebSocket adapter relies on this to release a closed connection's
reservations after any reserve it had already asked for).

Group commit: when a ``group`` runner is given (``TxContext.run_group``) and several calls are
queued in the lane whose turn it is, up to ``group_max`` of them run in one database
transaction with one commit, and all their futures are resolved after it (a group of worker
calls is one turn of the streak above). A lone call runs
as before, so an idle server answers no later than without grouping; under load the calls
that queued during one commit share the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar

from orbit_host.tally import Histogram
from orbit_wire.errors import ErrorCode, OrbitError

from .wal_sync import CommitCounter, WalSync

P = ParamSpec("P")
T = TypeVar("T")

# Worker-lane calls served in a row before a waiting normal-lane call gets its turn.
WORKER_STREAK = 4

# Calls committed together at most (1: no grouping).
GROUP_MAX = 32

_Item = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]
# Runs calls in one transaction; the (ok, value or exception) of each, in order.
GroupRunner = Callable[[Sequence[Callable[[], Any]]], list[tuple[bool, Any]]]


def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.cancelled():  # the caller went away; the transaction itself has already run
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _resolve_all(items: list[_Item], outcomes: list[tuple[bool, Any]]) -> None:
    for (fut, _fn, _args), (ok, value) in zip(items, outcomes, strict=True):
        _resolve(fut, ok, value)


def _hand_over(loop: asyncio.AbstractEventLoop, items: list[_Item],
               outcomes: list[tuple[bool, Any]]) -> None:
    """Resolve a turn's futures on the loop: one wake-up for the whole turn."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
        loop.call_soon_threadsafe(_resolve_all, items, outcomes)


class StoreThread:
    """Runs callables one at a time on a dedicated thread.

    ``start()`` inside the running event loop; ``await call(fn, ...)`` (normal lane) or
    ``await call_worker(fn, ...)`` (worker lane) from coroutines; ``close()`` once at
    shutdown: it lets queued calls finish and stops the thread.
    """

    def __init__(self, group: GroupRunner | None = None, group_max: int = GROUP_MAX,
                 around: Callable[[], AbstractContextManager[None]] | None = None, *,
                 timed: bool = False, wal: WalSync | None = None,
                 commits: CommitCounter | None = None) -> None:
        # timed: each turn's duration on the thread (one call or one group commit, retries
        # included) goes into ``timings`` by lane, written by this thread only.
        self.timings: dict[str, Histogram] | None = (
            {"worker": Histogram(), "normal": Histogram()} if timed else None)
        self._group = group
        self._around = around  # held on the thread while it runs (``TxContext.pinned``)
        self._group_max = group_max if group is not None else 1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cv = threading.Condition()
        self._worker: deque[_Item] = deque()
        self._normal: deque[_Item] = deque()
        self._closing = False
        self._thread: threading.Thread | None = None
        # With a WAL sync thread (--durability), a turn's answers wait for the sync that
        # covers the commits made up to its end (orbit_server/wal_sync.py).
        self._wal = wal
        self._commits = commits
        if (wal is None) != (commits is None):
            raise ValueError("wal and commits go together")

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="orbit-store", daemon=True)
        self._thread.start()

    def queued(self) -> dict[str, int]:
        """Calls waiting for the thread, by lane (not counting those running)."""
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

    def _next(self, streak: int) -> tuple[list[_Item], int]:
        """The next calls to run: one, or a group from ONE lane (none once closing with
        nothing queued). A worker call never waits for a normal call's work (a big batch
        submit) before its commit; a group of worker calls counts as one turn of the
        streak."""
        items: list[_Item] = []
        with self._cv:
            while not self._worker and not self._normal:
                if self._closing:
                    return items, streak
                self._cv.wait()
            if self._worker and (streak < WORKER_STREAK or not self._normal):
                lane, streak = self._worker, streak + 1
            else:
                lane, streak = self._normal, 0
            while lane and len(items) < self._group_max:
                items.append(lane.popleft())
        return items, streak

    def _run(self) -> None:
        with self._around() if self._around is not None else contextlib.nullcontext():
            self._serve()

    def _serve(self) -> None:
        loop = self._loop
        assert loop is not None
        streak = 0
        timings = self.timings
        while True:
            items, streak = self._next(streak)
            if not items:
                return
            started = time.perf_counter() if timings is not None else 0.0
            outcomes = self._outcomes(items)
            if timings is not None:
                timings["worker" if streak else "normal"].observe(time.perf_counter() - started)
            if self._wal is not None and self._commits is not None:
                # Nothing queued: this thread syncs its own turn (one thread hop less).
                self._wal.after(self._commits.count,
                                functools.partial(_hand_over, loop, items, outcomes),
                                here=not self._worker and not self._normal)
            elif loop.is_closed():
                return
            else:
                _hand_over(loop, items, outcomes)

    def _outcomes(self, items: list[_Item]) -> list[tuple[bool, Any]]:
        if len(items) > 1 and self._group is not None:
            calls = [functools.partial(fn, *args) for _fut, fn, args in items]
            try:
                return self._group(calls)
            except BaseException as exc:  # handed to every awaiting coroutine
                return [(False, exc)] * len(items)
        outcomes: list[tuple[bool, Any]] = []
        for _fut, fn, args in items:
            try:
                outcomes.append((True, fn(*args)))
            except BaseException as exc:  # handed to the awaiting coroutine
                outcomes.append((False, exc))
        return outcomes

    def close(self) -> None:
        """Let queued calls finish, then stop the thread (bounded by the queued work)."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
