"""Connection.open against peers that hang up in the handshake, with real sockets, on both
event loops orbit-supervise may run on: every such failure is a ConnectFailed (the
supervisor backs off and connects again), never an exception that ends the run (seen: a
proxy whose server was SIGKILLed accepts the TCP connection and closes it at once; on
uvloop websockets then raises ConnectionClosedError from the handshake)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop
from support.waiting import UNIT

from orbit_supervisor.connection import ConnectFailed, Connection

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("when", ["at_once", "after_the_request"])
def test_a_peer_that_hangs_up_in_the_handshake_is_a_failed_connect(when: str, loop: str) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if when == "after_the_request":
            await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()

    async def tries() -> list[str]:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        failures = []
        try:
            for _ in range(20):  # each outcome of the race is a ConnectFailed
                try:
                    await Connection.open(f"ws://127.0.0.1:{port}/v1/worker", timeout=5 * UNIT)
                except ConnectFailed as exc:
                    failures.append(exc.reason)
        finally:
            server.close()
            await server.wait_closed()
        return failures

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        assert len(runner.run(tries())) == 20
