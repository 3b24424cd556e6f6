"""The producer channel of the asyncio client: one WebSocket (``websockets.asyncio``) shared
by every task that submits or waits, and one reader task per connection, owned by a
``TaskOwner``.

The same thin driver of ``ChannelCore`` as channel.py, on the event loop: no lock around the
core (the loop runs one thing at a time), boxes are ``asyncio.Queue``\\ s, openings are
serialized by an ``asyncio.Lock``, and the reader task of a dropped connection opens the
next one while calls wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from orbit_host.task_owner import TaskOwner

from .channel_core import run_posts
from .channel_link import (
    ChannelBase,
    ChannelRefused,
    closed_error,
    opening_failure,
)
from .errors import ServerUnreachable, unreachable

__all__ = ["AsyncChannel"]

log = logging.getLogger("orbit.client.channel")


class AsyncChannel(ChannelBase):
    """As BlockingChannel, for asyncio code; use it from one event loop."""

    def __init__(self, base_url: str, headers: Mapping[str, str], tls: ssl.SSLContext | None,
                 timeout: float) -> None:
        super().__init__(base_url, headers, tls, timeout)
        self._connecting = asyncio.Lock()
        self._ws: ClientConnection | None = None
        self._closed = False
        self._tasks = TaskOwner(log)

    async def submit(self, queue_id: str, specs: Sequence[bytes]) -> list[dict[str, Any]]:
        """As BlockingChannel.submit."""
        box: asyncio.Queue[Any] = asyncio.Queue()
        request, frames = self._core.submit(queue_id, specs, box.put_nowait)
        try:
            await self._send_or_open(self._ws, frames)
            async with asyncio.timeout(self._timeout):
                answer = await box.get()
        except TimeoutError:
            raise unreachable(self.url, "ReadTimeout") from None
        finally:
            self._core.abandon(request)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)

    async def settled(self, task_ids: Iterable[str], timeout: float
                      ) -> AsyncGenerator[tuple[str, dict[str, Any] | None], None]:
        """As BlockingChannel.settled."""
        deadline = asyncio.get_running_loop().time() + timeout
        wanted = list(dict.fromkeys(task_ids))
        box: asyncio.Queue[Any] = asyncio.Queue()
        waiter, posts, frames = self._core.wait(wanted, box.put_nowait)
        try:
            run_posts(posts)
            await self._send_or_open(self._ws, frames)
            for _ in wanted:
                try:
                    async with asyncio.timeout_at(deadline):
                        item = await box.get()
                except TimeoutError:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._core.stop_waiting(waiter)

    async def aclose(self) -> None:
        """As BlockingChannel.close."""
        self._closed = True
        ws, self._ws = self._ws, None
        run_posts(self._core.fail_all(closed_error()))
        self._core.disconnected()
        await self._tasks.stop()
        if ws is not None:
            await ws.close()

    # ------------------------------------------------------------------ the connection

    async def _send_or_open(self, ws: ClientConnection | None, frames: list[bytes]) -> None:
        if ws is None:
            await self._open()
        else:
            await _send(ws, frames)

    async def _open(self) -> None:
        """As BlockingChannel._open."""
        async with self._connecting:
            failure: Exception = unreachable(self.url, "ConnectionRefusedError")
            while True:
                if self._closed:
                    run_posts(self._core.fail_all(ChannelRefused(None, True)))
                    return
                if self._ws is not None or not self._core.busy:
                    return
                pause = self._core.next_pause()
                if pause is None:
                    run_posts(self._core.fail_all(failure))
                    return
                if pause:
                    await asyncio.sleep(pause)
                    if self._closed:
                        continue
                try:
                    ws = await connect(self.url, **self._options)
                except Exception as exc:
                    failure = opening_failure(self.url, exc)
                    if isinstance(failure, ServerUnreachable):
                        self._core.connect_failed()
                        continue
                    run_posts(self._core.fail_all(failure))
                    return
                await self._start(ws)
                return

    async def _start(self, ws: ClientConnection) -> None:
        if self._closed:
            await ws.close()
            return
        self._ws = ws
        frames = self._core.connected()
        self._tasks.start(self._read(ws), name="orbit-channel-reader")
        await _send(ws, frames)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for data in ws:
                reaction = self._core.receive(data)
                run_posts(reaction.posts)
                if reaction.drop:
                    break
        except (ConnectionClosed, OSError):
            pass
        finally:
            if self._ws is ws:
                self._ws = None
                self._core.disconnected()
            ws.transport.abort()
        if self._core.busy and not self._closed:
            await self._open()


async def _send(ws: ClientConnection, frames: list[bytes]) -> None:
    # A failed send is the reader's to notice: it reconnects and the core sends again.
    with contextlib.suppress(ConnectionClosed, OSError):
        for frame in frames:
            await ws.send(frame.decode())
