"""Taking text messages in uvicorn's data callback (orbit_server/ws_transport.py,
``receive_directly``) on a real uvicorn server on 127.0.0.1: whole text messages go to the
taker in order (a fragmented one once whole); a binary one and every later one go through
``websocket.receive``, in order; a taker that leaves one turns it off the same way."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from websockets.asyncio.client import connect

from orbit_server.ws_transport import DIRECT_RECEIVE, OrbitWebSocketProtocol

Seen = list[tuple[str, str]]  # (how, text): "direct" or "queued"


def _app(seen: Seen, done: asyncio.Event, leave: str | None) -> Callable[..., Any]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})

        def take(text: str) -> bool:
            if text == leave:
                return False
            seen.append(("direct", text))
            if text == "end":
                done.set()
            return True

        assert scope["extensions"][DIRECT_RECEIVE](take)
        while (message := await receive())["type"] == "websocket.receive":
            text = message.get("text") or message["bytes"].decode()
            seen.append(("queued", text))
            if text == "end":
                done.set()

    return app


@contextlib.asynccontextmanager
async def _server(app: Callable[..., Any]) -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # log_config None: uvicorn must not reconfigure this process's loggers (later tests in
    # it check where log records go).
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           ws=OrbitWebSocketProtocol, log_config=None))
    task = asyncio.get_running_loop().create_task(server.serve())
    try:
        for _ in range(500):  # bounded: about 5 s
            if server.started:
                break
            await asyncio.sleep(0.01)
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def _scenario(leave: str | None, fragment: bool, binary: bool) -> Seen:
    seen: Seen = []
    done = asyncio.Event()
    async with _server(_app(seen, done, leave)) as url, connect(url) as ws:
        await ws.send("a")
        await ws.send("b")
        if fragment:
            await ws.send(iter(["fr", "ag"]))
        if binary:
            await ws.send(b"bin")
        await ws.send("c")
        await ws.send("end")
        await asyncio.wait_for(done.wait(), 10)
    return seen


@pytest.mark.parametrize(("leave", "fragment", "binary", "expected"), [
    (None, False, False, [("direct", "a"), ("direct", "b"), ("direct", "c"),
                          ("direct", "end")]),
    (None, True, False, [("direct", "a"), ("direct", "b"), ("direct", "frag"),
                         ("direct", "c"), ("direct", "end")]),
    (None, False, True, [("direct", "a"), ("direct", "b"), ("queued", "bin"),
                         ("queued", "c"), ("queued", "end")]),
    ("b", False, False, [("direct", "a"), ("queued", "b"), ("queued", "c"),
                         ("queued", "end")]),
])
def test_messages_keep_their_order_whichever_way_they_go(
        leave: str | None, fragment: bool, binary: bool, expected: Seen) -> None:
    assert asyncio.run(_scenario(leave, fragment, binary)) == expected
