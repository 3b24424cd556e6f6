"""Which child serves which execution: the idle slots and the waiting attempts.

A ready child that no execution waits for is parked (IDLE); an execution that finds no
idle child waits, oldest first. When a child becomes ready (fresh, or done with its task)
``release`` hands it to the oldest waiting attempt at once (HAND_OUT) or parks it, and
wakes whoever waits for that many idle children (``wait_idle``). The allocator moves the
slot (slots.py) but runs nothing: the pool starts the attempt it is given on the slot.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .attempts import Attempt
from .slots import SlotCounts, SlotEvent, SlotState

__all__ = ["Allocator"]


class AllocatedSlot(Protocol):
    @property
    def state(self) -> SlotState: ...

    def fire(self, event: SlotEvent) -> None: ...


S = TypeVar("S", bound=AllocatedSlot)


class Allocator(Generic[S]):
    """Idle slots, waiting attempts and idle watchers of one pool."""

    __slots__ = ("_counts", "_idle", "_make_future", "_waiting", "_watchers")

    def __init__(self, counts: SlotCounts,
                 make_future: Callable[[], asyncio.Future[None]]) -> None:
        self._counts = counts
        self._make_future = make_future
        self._idle: deque[S] = deque()
        self._waiting: deque[Attempt] = deque()
        self._watchers: list[tuple[int, asyncio.Future[None]]] = []

    def take_idle(self) -> S | None:
        """An idle slot, now BUSY, or None; stale entries (replaced meanwhile) are skipped."""
        while self._idle:
            slot = self._idle.popleft()
            if slot.state is SlotState.IDLE:
                slot.fire(SlotEvent.HAND_OUT)
                return slot
        return None

    def release(self, slot: S) -> Attempt | None:
        """A ready slot: BUSY with the oldest waiting attempt (returned), or parked IDLE."""
        if self._waiting:
            slot.fire(SlotEvent.HAND_OUT)
            return self._waiting.popleft()
        slot.fire(SlotEvent.PARK)
        self._idle.append(slot)
        if self._watchers:
            idle = self._counts[SlotState.IDLE]
            for count, watcher in self._watchers:
                if count <= idle and not watcher.done():
                    watcher.set_result(None)
            self._watchers = [w for w in self._watchers if not w[1].done()]
        return None

    def wait(self, att: Attempt) -> None:
        """``att`` waits for the next ready slot, after those waiting already."""
        self._waiting.append(att)

    def unwait(self, att: Attempt) -> bool:
        """``att`` waits no more; False if it was not waiting."""
        try:
            self._waiting.remove(att)
        except ValueError:
            return False
        return True

    async def wait_idle(self, count: int) -> None:
        """Return once at least ``count`` slots are idle."""
        if self._counts[SlotState.IDLE] >= count:
            return
        watcher = self._make_future()
        self._watchers.append((count, watcher))
        try:
            await watcher
        finally:
            self._watchers = [w for w in self._watchers if w[1] is not watcher]

    def close(self, error: Callable[[], BaseException]) -> list[Attempt]:
        """The pool closes: every idle watcher fails with ``error()``; returns the attempts
        that were still waiting (they wait no more)."""
        for _count, watcher in self._watchers:
            if not watcher.done():
                watcher.set_exception(error())
        waiting = list(self._waiting)
        self._waiting.clear()
        return waiting
