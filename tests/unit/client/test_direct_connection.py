"""The blocking channel's connection (orbit_client/channel.py, ``_DirectConnection``) against a
real websockets server on 127.0.0.1: whole text messages are offered to ``take`` on the
receiving thread, and from the first one it leaves (or a fragmented or binary one) every
message goes through websockets' queue, in order."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator

import pytest
from support.waiting import UNIT
from websockets.sync.client import ClientConnection, connect
from websockets.sync.server import ServerConnection, serve

from orbit_client.channel import _DirectConnection

# Starts a server whose one connection runs the given script; returns its URL.
Serve = Callable[[Callable[[ServerConnection], None]], str]


@pytest.fixture
def sends() -> Iterator[Serve]:
    """A server on a free port that runs the given script on its one connection; its URL."""
    servers = []

    def start(script: Callable[[ServerConnection], None]) -> str:
        def handler(ws: ServerConnection) -> None:
            script(ws)
            ws.recv()  # until the client closes

        server = serve(handler, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"ws://127.0.0.1:{server.socket.getsockname()[1]}"

    yield start
    for server in servers:
        server.shutdown()


def _client(url: str, take: Callable[[_DirectConnection, str], bool]) -> ClientConnection:
    direct = functools.partial(_DirectConnection, take=take)
    return connect(url, create_connection=direct)  # type: ignore[arg-type]


def test_whole_text_messages_are_taken_on_the_receiving_thread(sends: Serve) -> None:
    url = sends(lambda ws: [ws.send(f"m{i}") for i in range(3)])
    taken: list[tuple[str, str]] = []
    all_three = threading.Event()

    def take(_ws: _DirectConnection, text: str) -> bool:
        taken.append((text, threading.current_thread().name))
        if len(taken) == 3:
            all_three.set()
        return True

    with _client(url, take) as ws:
        assert all_three.wait(10 * UNIT)
        assert [t for t, _ in taken] == ["m0", "m1", "m2"]
        assert all(name != threading.current_thread().name for _, name in taken)
        assert ws.recv_messages.frames.empty()  # nothing was queued


def test_a_fragmented_message_turns_direct_taking_off_and_order_holds(sends: Serve) -> None:
    def script(ws: ServerConnection) -> None:
        ws.send("first")
        ws.send(iter(["sec", "ond"]))  # one message in two frames
        ws.send("third")

    url = sends(script)
    taken: list[str] = []
    with _client(url, lambda _ws, text: taken.append(text) is None) as ws:
        assert [ws.recv(timeout=10 * UNIT), ws.recv(timeout=10 * UNIT)] == ["second", "third"]
        assert taken == ["first"]
        assert isinstance(ws, _DirectConnection) and not ws.direct


def test_a_message_left_by_take_and_all_after_it_go_to_the_queue(sends: Serve) -> None:
    url = sends(lambda ws: [ws.send(f"m{i}") for i in range(4)])
    offered: list[str] = []

    def take(_ws: _DirectConnection, text: str) -> bool:
        offered.append(text)
        return text != "m1"

    with _client(url, take) as ws:
        assert [ws.recv(timeout=10 * UNIT) for _ in range(3)] == ["m1", "m2", "m3"]
        assert offered == ["m0", "m1"]
