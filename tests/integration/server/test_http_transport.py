"""The server's HTTP protocol sends a response with a known length in ONE write (head and
body together: one syscall, one wake-up of the client), still sends the head of a HEAD
answer and of a response that ends without body writes, and leaves chunked responses as
uvicorn writes them. A real uvicorn protocol on a real loopback socket; the connection's
transport is wrapped only to count its writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from orbit_server.http_transport import http_protocol

BODY = b'{"ok":true}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        return
    path = scope["path"]
    if path == "/stream":  # no length: chunked, two body messages
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})
        return
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if path == "/pieces":  # a known length sent in two body messages
        await send({"type": "http.response.body", "body": BODY[:4], "more_body": True})
        await send({"type": "http.response.body", "body": BODY[4:]})
    elif path == "/no-body":  # returns without completing: uvicorn closes the connection
        return
    else:
        await send({"type": "http.response.body", "body": BODY})


class CountingTransport:
    """The real transport, with its write calls counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def exchange(request: bytes, until: bytes | None = None) -> tuple[bytes, list[bytes]]:
    """Serve one connection with the server's protocol; send ``request``; the bytes
    answered (up to ``until``; b"": up to the close) and the writes the protocol made."""
    # No log_config, level or access log: uvicorn would configure the process's loggers.
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
    config.load()
    counted: list[CountingTransport] = []
    base = http_protocol(5.0, 5.0)

    class Counted(base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            counted.append(CountingTransport(transport))
            super().connection_made(counted[-1])  # type: ignore[arg-type]

    loop = asyncio.get_running_loop()
    state = ServerState()
    server = await loop.create_server(
        lambda: Counted(config=config, server_state=state, app_state={}), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        if until == b"":
            answer = await asyncio.wait_for(reader.read(), 10)
        elif until is not None:
            answer = await asyncio.wait_for(reader.readuntil(until), 10)
        else:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            method = request.split(b" ", 1)[0]
            body = b"" if method == b"HEAD" else await asyncio.wait_for(
                reader.readexactly(length), 10)
            answer = head + body
        writer.close()
        await writer.wait_closed()
        for _ in range(100):  # the server side sees the close (bounded)
            if not state.connections:
                break
            await asyncio.sleep(0.01)
        return answer, counted[0].writes
    finally:
        server.close()
        await server.wait_closed()


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode()


@pytest.mark.asyncio
async def test_a_response_with_a_length_goes_out_in_one_write() -> None:
    answer, writes = await exchange(get("/fixed"))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n" + BODY)
    assert len(writes) == 1 and writes[0] == answer


@pytest.mark.asyncio
async def test_a_head_answer_still_sends_its_head() -> None:
    answer, writes = await exchange(get("/fixed", "HEAD"))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n")
    assert len(writes) == 1


@pytest.mark.asyncio
async def test_a_body_in_pieces_sends_the_head_with_the_first() -> None:
    answer, writes = await exchange(get("/pieces"))
    assert answer.endswith(BODY)
    assert len(writes) == 2 and writes[0].endswith(b"\r\n\r\n" + BODY[:4])


@pytest.mark.asyncio
async def test_an_unfinished_response_sends_its_head_before_the_close() -> None:
    answer, writes = await exchange(get("/no-body"), until=b"")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n")
    assert len(writes) == 1


@pytest.mark.asyncio
async def test_chunked_responses_are_written_as_uvicorn_writes_them() -> None:
    answer, writes = await exchange(get("/stream"), until=b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in answer
    assert len(writes) == 3 and writes[0].endswith(b"\r\n\r\n")
