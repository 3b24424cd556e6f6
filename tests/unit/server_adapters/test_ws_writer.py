"""FrameWriter's order: a message is written at once only when nothing waits before it.

The socket here is a recorder standing in for Starlette's WebSocket and uvicorn's transport
(whether the transport takes a message is the test's switch); the real endpoints run it in
tests/integration/server (test_producer_ws.py, test_security_slow_clients.py, ...)."""

from __future__ import annotations

import asyncio
from typing import Any

from orbit_server.ws_transport import DIRECT_SEND
from orbit_server.ws_writer import FrameWriter


class Recorder:
    """What reached the peer, in order; ``takes``: the transport takes a direct write."""

    def __init__(self, direct: bool = True) -> None:
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.takes = True
        self.gate = asyncio.Event()  # the ASGI send waits for it (a full transport)
        self.gate.set()
        self.scope: dict[str, Any] = {"extensions": {DIRECT_SEND: self._direct} if direct
                                      else {}}

    def _direct(self, data: bytes) -> bool:
        if not self.takes:
            return False
        self.sent.append(data.decode())
        return True

    async def send(self, message: dict[str, Any]) -> None:
        await self.gate.wait()
        self.sent.append(message["text"])

    async def close(self, code: int, reason: str = "") -> None:
        self.closed = (code, reason)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def writer_of(ws: Recorder) -> FrameWriter:
    return FrameWriter(ws)  # type: ignore[arg-type]


async def close_and_wait(writer: FrameWriter, task: asyncio.Task[None], code: int = 1000,
                         reason: str = "") -> None:
    """Put the close behind what is queued and wait (bounded) until the writer sent it."""
    writer.close(code, reason)
    await asyncio.wait_for(task, 5)


def test_a_message_with_nothing_before_it_is_written_at_once() -> None:
    async def scenario() -> None:
        ws = Recorder()
        writer = writer_of(ws)
        writer.put(b"a")
        writer.put(b"b")
        assert ws.sent == ["a", "b"]  # no await: nothing was queued
        assert writer.pending() == 0

    run(scenario())


def test_once_one_waits_the_later_ones_queue_behind_it() -> None:
    async def scenario() -> None:
        ws = Recorder()
        writer = writer_of(ws)
        task = asyncio.get_running_loop().create_task(writer.run())
        ws.takes = False
        writer.put(b"1")  # refused: queued
        ws.takes = True
        writer.put(b"2")  # the transport would take it, but "1" waits before it
        assert ws.sent == [] and writer.pending() == 2
        await close_and_wait(writer, task)
        assert ws.sent == ["1", "2"]
        assert ws.closed == (1000, "")

    run(scenario())


def test_a_message_the_writer_holds_across_an_await_keeps_its_place() -> None:
    async def scenario() -> None:
        ws = Recorder()
        writer = writer_of(ws)
        task = asyncio.get_running_loop().create_task(writer.run())
        ws.takes = False
        ws.gate.clear()  # the ASGI send will wait: the transport is full
        writer.put(b"1")
        for _ in range(5):  # the writer takes "1" off the queue and waits in send
            await asyncio.sleep(0)
        assert writer.pending() == 0 and ws.sent == []
        ws.takes = True
        writer.put(b"2")  # the queue is empty, but "1" is still on its way
        assert ws.sent == []
        ws.gate.set()
        await close_and_wait(writer, task)
        assert ws.sent == ["1", "2"]

    run(scenario())


def test_without_the_extension_everything_goes_through_the_queue() -> None:
    async def scenario() -> None:
        ws = Recorder(direct=False)
        writer = writer_of(ws)
        writer.put(b"x")
        assert ws.sent == [] and writer.pending() == 1
        task = asyncio.get_running_loop().create_task(writer.run())
        await close_and_wait(writer, task, 4000, "bye")
        assert ws.sent == ["x"] and ws.closed == (4000, "bye")

    run(scenario())
