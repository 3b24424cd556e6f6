"""The outgoing side of one WebSocket connection (worker endpoint and producer channel).

Messages leave in the order they were put. A message is written at once, in the caller's
step, when nothing waits before it and the transport takes it (uvicorn's protocol, through
the ``DIRECT_SEND`` scope extension of ``ws_transport``): no queue, no wake-up of a writer
task, no ASGI message. Otherwise (a message already waiting, a transport over its
high-water mark, another ASGI server) it waits in the queue for ``run``, which sends it the
ASGI way and so waits while the transport is full. A peer that does not read fills the
transport, then the queue, whose length the connection bounds (``pending``).
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.websockets import WebSocket, WebSocketDisconnect

from .ws_transport import direct_send

__all__ = ["FrameWriter"]


class _Close:
    """Queue sentinel: close the socket with this code after the messages before it."""

    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


class FrameWriter:
    """One connection's outgoing text messages, in order (see the module docstring)."""

    __slots__ = ("_direct", "_holding", "_queue", "_ws")

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket
        self._direct = direct_send(websocket.scope)
        self._queue: asyncio.Queue[bytes | _Close] = asyncio.Queue()
        # ``run`` holds a message across an await (the transport was full): later ones queue.
        self._holding = False

    def pending(self) -> int:
        """Messages waiting in the queue."""
        return self._queue.qsize()

    def put(self, data: bytes) -> None:
        """Send ``data`` (UTF-8 JSON text) after every message put before it; never blocks."""
        direct = self._direct
        if direct is not None and not self._holding and self._queue.empty() and direct(data):
            return
        self._queue.put_nowait(data)

    def close(self, code: int, reason: str = "") -> None:
        """Close the socket with ``code`` once the messages put before are sent."""
        self._queue.put_nowait(_Close(code, reason))

    async def run(self) -> None:
        """Send what waits in the queue until a close was sent or the peer is gone."""
        ws = self._ws
        while True:
            item = await self._queue.get()
            if isinstance(item, _Close):
                # The peer may be gone already: there is nothing left to tell it.
                with contextlib.suppress(Exception):
                    await ws.close(item.code, item.reason)
                return
            self._holding = True
            try:
                await ws.send({"type": "websocket.send", "text": item.decode()})
            except (WebSocketDisconnect, RuntimeError, OSError):
                return  # the peer is gone
            finally:
                self._holding = False
