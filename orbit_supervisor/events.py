"""The local, read-only event stream of a Supervisor (docs/supervisor.md, "Python API").

128 events are buffered; when nobody reads and the buffer is full, new events are dropped
and counted (the runtime never waits for a reader). ``close()`` ends every iterator once the
buffered events are read.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from .actions import SupervisorEvent

EVENT_BUFFER = 128

__all__ = ["EVENT_BUFFER", "EventStream", "SupervisorEvent"]


class EventStream:
    """Bounded buffer with drop counting; ``publish`` never blocks and never raises."""

    def __init__(self, capacity: int = EVENT_BUFFER) -> None:
        self._buffer: deque[SupervisorEvent] = deque()
        self._capacity = capacity
        self._closed = False
        self._wakeup: asyncio.Event | None = None
        self.dropped = 0

    def publish(self, event: SupervisorEvent, queue_id: str | None = None) -> None:
        """Buffer ``event``, stamped with ``queue_id`` when one is given (a copy made only
        when it is kept: with nobody reading, most are dropped)."""
        if self._closed:
            return
        if len(self._buffer) >= self._capacity:
            self.dropped += 1
            return
        if queue_id is not None:
            event = SupervisorEvent(event.type, event.task_id, event.attempt_id,
                                    event.classification, queue_id)
        self._buffer.append(event)
        if self._wakeup is not None:
            self._wakeup.set()

    def close(self) -> None:
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aiter__(self) -> AsyncIterator[SupervisorEvent]:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        while True:
            while self._buffer:
                yield self._buffer.popleft()
            if self._closed:
                return
            self._wakeup.clear()
            await self._wakeup.wait()
