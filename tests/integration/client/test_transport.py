"""The blocking client's transport against a real loopback HTTP/1.1 peer whose behaviour the
test decides: keep-alive reuse, an idle connection the server closed, no answer, timeouts,
a path prefix, the connection bound."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from support.waiting import UNIT, hold, wait_until

from orbit_client.transport import BlockingTransport, NoAnswer

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
BOUND_S = 5.0 * UNIT  # generous: how long a loopback peer that answers at once may take


@dataclass
class Peer:
    """Accepts connections on 127.0.0.1; ``answer(request_head) -> bytes | None`` says what to
    send back (None: close without answering); ``close_after`` closes after each answer."""

    answer: Callable[[bytes], bytes | None] = lambda head: OK
    close_after: bool = False
    delay_s: float = 0.0  # units before each answer
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.stopping = False
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(BOUND_S)
        buffer = b""
        try:
            for _ in range(10_000):
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                with self.lock:
                    self.heads.append(head)
                time.sleep(self.delay_s * UNIT)
                reply = self.answer(head)
                if reply is None:
                    return
                conn.sendall(reply)
                if self.close_after:
                    return
        except OSError:
            return
        finally:
            conn.close()
            with self.lock:
                self.open_now -= 1

    def stop(self) -> None:
        self.stopping = True
        self.sock.close()
        self.acceptor.join(BOUND_S)
        for thread in self.threads:
            thread.join(BOUND_S)


@pytest.fixture
def peer() -> Iterator[Peer]:
    made = Peer()
    yield made
    made.stop()


def transport(port: int, prefix: str = "", connections: int = 4,
              timeout: float = BOUND_S) -> BlockingTransport:
    return BlockingTransport(f"http://127.0.0.1:{port}{prefix}", {"Accept": "application/json"},
                             connections, timeout)


def test_connections_are_kept_alive_and_reused(peer: Peer) -> None:
    http = transport(peer.port)
    try:
        answers = [http.request("GET", "/healthz", None, None, BOUND_S) for _ in range(20)]
    finally:
        http.close()
    assert {a.status for a in answers} == {200} and answers[0].body == b"{}"
    assert peer.connections == 1


def test_an_idle_connection_the_server_closed_is_replaced_before_use(peer: Peer) -> None:
    peer.close_after = True
    http = transport(peer.port)
    try:
        for _ in range(5):
            assert http.request("GET", "/healthz", None, None, BOUND_S).status == 200
            # The peer has closed its end (on loopback its FIN is in our socket by then).
            wait_until(lambda: peer.open_now == 0, timeout=5, what="the peer's close")
    finally:
        http.close()
    assert peer.connections == 5


def test_the_prefix_params_and_body_reach_the_server(peer: Peer) -> None:
    http = transport(peer.port, prefix="/orbit/")
    try:
        http.request("POST", "/v1/tasks/x", {"wait_ms": "10", "a b": "c&d"}, b'{"k":1}',
                     BOUND_S)
    finally:
        http.close()
    (head,) = peer.heads
    assert head.split(b"\r\n")[0] == b"POST /orbit/v1/tasks/x?wait_ms=10&a+b=c%26d HTTP/1.1"
    assert b"Content-Length: 7" in head and b"Accept: application/json" in head


def test_no_answer_is_reported_as_such_and_never_retried(peer: Peer) -> None:
    peer.answer = lambda head: None
    http = transport(peer.port)
    try:
        with pytest.raises(NoAnswer) as info:
            http.request("POST", "/v1/queues/q/tasks", None, b"{}", BOUND_S)
    finally:
        http.close()
    assert info.value.kind == "RemoteDisconnected"
    assert len(peer.heads) == 1


def test_a_read_timeout_and_a_refused_connect_are_no_answer(peer: Peer) -> None:
    gate, held = threading.Event(), threading.Event()
    # The peer answers nothing until the client has given up: the read must time out.
    peer.answer = lambda head: hold(gate, held)
    http = transport(peer.port)
    try:
        with pytest.raises(NoAnswer) as info:
            http.request("GET", "/slow", None, None, 0.2)
        assert held.is_set()  # the request reached the peer, which held it
    finally:
        gate.set()
        http.close()
    assert info.value.kind == "TimeoutError"
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    refused = transport(port)
    with pytest.raises(NoAnswer) as info:
        refused.request("GET", "/healthz", None, None, BOUND_S)
    assert info.value.kind == "ConnectionRefusedError"


def test_threads_share_at_most_max_connections(peer: Peer) -> None:
    peer.delay_s = 0.02
    http = transport(peer.port, connections=2)
    statuses: list[int] = []

    def work() -> None:
        for _ in range(5):
            statuses.append(http.request("GET", "/healthz", None, None, BOUND_S).status)

    threads = [threading.Thread(target=work) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30 * UNIT)
    finally:
        http.close()
    assert statuses == [200] * 30
    assert peer.most_open <= 2 and peer.connections == 2
