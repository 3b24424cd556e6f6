"""Connection.run against a real websockets server, on both event loops: whole text frames
are taken in websockets' data callback, a fragmented one through its queue, and the order
holds across the two; a bad frame ends the connection as BAD_SERVER_FRAME; what on_frame
raises ends run() with it; frames sent in send() arrive in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop
from support.waiting import UNIT
from websockets.asyncio.server import ServerConnection, serve

from orbit_supervisor.connection import Connection
from orbit_wire.frames import Credit, ErrorFrame, HeartbeatAck, ServerFrame, encode

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}

ACK = b'{"type":"heartbeat_ack"}'


def run_against(script: Callable[[ServerConnection], object], loop: str,
                on_frame: Callable[[ServerFrame], None],
                sends: int = 0) -> tuple[str | BaseException, list[bytes]]:
    """Connect to a server running ``script``, send ``sends`` credits, run until the end."""
    got: list[bytes] = []

    async def handler(ws: ServerConnection) -> None:
        for _ in range(sends):
            got.append(bytes(await ws.recv(decode=False)))
        await script(ws)  # type: ignore[misc]

    async def main() -> str | BaseException:
        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            conn = await Connection.open(f"ws://127.0.0.1:{port}/v1/worker", timeout=5 * UNIT)
            for slots in range(sends):
                conn.send(Credit(credits=slots + 1))
            try:
                return await asyncio.wait_for(conn.run(on_frame), 10 * UNIT)
            except RuntimeError as exc:
                return exc

    runner = asyncio.Runner(loop_factory=LOOPS[loop])
    try:
        return runner.run(main()), got
    finally:
        runner.close()


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_frames_whole_and_fragmented_arrive_in_order(loop: str) -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(ACK, text=True)
        await ws.send([b'{"type":"heartbeat', b'_ack"}'], text=True)  # fragmented
        await ws.send(b'{"type":"error","code":"INTERNAL","message":"3"}', text=True)
        await ws.close()

    frames: list[ServerFrame] = []
    reason, got = run_against(script, loop, frames.append, sends=3)
    assert reason == "CLOSED_BY_SERVER"
    assert [type(f) for f in frames] == [HeartbeatAck, HeartbeatAck, ErrorFrame]
    assert got == [encode(Credit(credits=n)) for n in (1, 2, 3)]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_bad_frame_ends_the_connection(loop: str) -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(b'{"type":"nonsense"}', text=True)
        await ws.send(ACK, text=True)  # after the bad one: never taken
        await ws.wait_closed()

    frames: list[ServerFrame] = []
    reason, _ = run_against(script, loop, frames.append)
    assert reason == "BAD_SERVER_FRAME"
    assert len(frames) == 1 and isinstance(frames[0], ErrorFrame)
    assert frames[0].message.startswith("server sent a bad frame")


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_what_on_frame_raises_ends_run_with_it(loop: str) -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(ACK, text=True)
        await ws.send(ACK, text=True)
        await ws.wait_closed()

    frames: list[ServerFrame] = []

    def on_frame(frame: ServerFrame) -> None:
        frames.append(frame)
        raise RuntimeError("a bug")

    reason, _ = run_against(script, loop, on_frame)
    assert isinstance(reason, RuntimeError) and str(reason) == "a bug"
    assert len(frames) == 1
