"""A close the server starts ends the TCP connection within a bound, whether or not the peer
answers the closing handshake: a WebSocket that never says hello (4008) and one that sends
a bad frame (4001), from a raw socket that reads everything and never echoes a close.
Real sockets against a real server (the transport is the same on both stores: SQLite)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server import ServerProcess
from support.waiting import UNIT
from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

HELLO_MS = 500
# The server waits WS_CLOSE_TIMEOUT_S (1 s) for the close echo, then drops the connection;
# uvicorn alone would hold it 10 s. Far above the first, well below the second.
AFTER_CLOSE_S = 5 * UNIT


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("close")) / "server",
                        extra_args=("--hello-timeout-ms", str(HELLO_MS)))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


class RawPeer:
    """A WebSocket client over a plain socket that sends only what the test asks for: the
    handshake, then its own frames; never a close frame, never a pong."""

    def __init__(self, ws_url: str) -> None:
        uri = parse_uri(ws_url)
        self.sock = socket.create_connection((uri.host, uri.port), timeout=30 * UNIT)
        self.proto = ClientProtocol(uri)
        self.proto.send_request(self.proto.connect())
        self._flush()
        while not any(isinstance(e, Response) for e in self._read_events()):
            pass

    def _flush(self) -> None:
        self.sock.sendall(b"".join(self.proto.data_to_send()))

    def _read_events(self) -> list[object]:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.proto.receive_data(data)
        return list(self.proto.events_received())

    def send_text(self, text: str) -> None:
        self.proto.send_text(text.encode())
        self._flush()

    def until_dropped(self) -> tuple[int, float]:
        """Read until the server ends the TCP connection: the close code it sent, and the
        seconds from its close frame to the end of the connection."""
        code, closed_at = 0, 0.0
        while True:
            try:
                events = self._read_events()
            except (EOFError, ConnectionResetError):
                assert closed_at, "the connection ended without a close frame"
                return code, time.monotonic() - closed_at
            for event in events:
                if getattr(event, "opcode", None) is Opcode.CLOSE and not closed_at:
                    closed_at = time.monotonic()
                    code = self.proto.close_rcvd.code if self.proto.close_rcvd else 0

    def close(self) -> None:
        self.sock.close()


def test_a_socket_without_hello_is_dropped_soon_after_its_close(server: ServerProcess) -> None:
    peer = RawPeer(server.ws_url)
    try:
        code, after_close = peer.until_dropped()
    finally:
        peer.close()
    assert code == 4008
    assert after_close < AFTER_CLOSE_S, after_close


def test_a_fatal_close_drops_a_peer_that_does_not_answer_it(server: ServerProcess) -> None:
    peer = RawPeer(server.ws_url)
    try:
        peer.send_text("{not json")
        code, after_close = peer.until_dropped()
    finally:
        peer.close()
    assert code == 4001
    assert after_close < AFTER_CLOSE_S, after_close
