"""The store thread: one thread, FIFO within a lane, worker lane first, never starving."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from support.waiting import hold, wait_until_async

from orbit_server.store_thread import WORKER_STREAK, StoreThread
from orbit_wire.errors import ErrorCode, OrbitError

pytestmark = pytest.mark.asyncio



async def test_runs_on_one_dedicated_thread_in_order() -> None:
    store = StoreThread()
    store.start()
    try:
        seen: list[tuple[int, int]] = []

        def record(i: int) -> int:
            seen.append((i, threading.get_ident()))
            return i * 2

        results = await asyncio.gather(*(store.call(record, i) for i in range(50)))
        assert results == [i * 2 for i in range(50)]
        assert [i for i, _ in seen] == list(range(50))
        assert len({t for _, t in seen}) == 1
        assert seen[0][1] != threading.get_ident()
        assert await store.call(store.on_store_thread)
        assert not store.on_store_thread()
    finally:
        store.close()


async def test_exceptions_reach_the_caller() -> None:
    store = StoreThread()
    store.start()
    try:
        def fail() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await store.call(fail)
        assert await store.call(lambda: 7) == 7  # the thread survives
    finally:
        store.close()


async def test_worker_lane_first_but_normal_lane_not_starved() -> None:
    store = StoreThread()
    store.start()
    try:
        gate, started = threading.Event(), threading.Event()
        order: list[str] = []
        blocker = asyncio.ensure_future(store.call(hold, gate, started))
        await wait_until_async(started.is_set, timeout=5, what="the thread busy with the blocker")
        normal = [asyncio.ensure_future(store.call(order.append, f"n{i}")) for i in range(2)]
        worker = [asyncio.ensure_future(store.call_worker(order.append, f"w{i}"))
                  for i in range(WORKER_STREAK + 2)]
        gate.set()
        await asyncio.gather(blocker, *normal, *worker)
        # Worker calls first, but after WORKER_STREAK of them a normal call gets its turn.
        expected = [f"w{i}" for i in range(WORKER_STREAK)] + ["n0"]
        assert order[: WORKER_STREAK + 1] == expected
        assert sorted(order) == sorted([f"n{i}" for i in range(2)] +
                                       [f"w{i}" for i in range(WORKER_STREAK + 2)])
        assert [x for x in order if x.startswith("w")] == [f"w{i}" for i in
                                                           range(WORKER_STREAK + 2)]
    finally:
        store.close()


async def test_a_cancelled_caller_does_not_break_the_thread() -> None:
    store = StoreThread()
    store.start()
    try:
        gate, started = threading.Event(), threading.Event()
        slow = asyncio.ensure_future(store.call(hold, gate, started))
        await wait_until_async(started.is_set, timeout=5, what="the thread busy with the call")
        slow.cancel()
        gate.set()
        assert await store.call(lambda: "still here") == "still here"
    finally:
        store.close()


async def test_a_closed_store_thread_answers_unavailable_retryable() -> None:
    store = StoreThread()
    store.start()
    assert await store.call(lambda: 1) == 1
    store.close()
    with pytest.raises(OrbitError) as caught:
        await store.call_worker(lambda: 2)
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert caught.value.retryable


async def test_timed_store_thread_times_each_call_by_its_lane() -> None:
    store = StoreThread(timed=True)
    store.start()
    try:
        await asyncio.gather(*(store.call(time.sleep, 0.001) for _ in range(3)))
        await store.call_worker(lambda: None)
        assert store.timings is not None
        normal, normal_sum = store.timings["normal"].snapshot()
        worker, _ = store.timings["worker"].snapshot()
        assert normal[-1][1] == 3 and worker[-1][1] == 1
        assert normal_sum >= 0.003  # a sleep lasts at least as long as asked
        assert store.queued() == {"worker": 0, "normal": 0}
    finally:
        store.close()
    assert StoreThread().timings is None  # untimed by default: nothing to pay
