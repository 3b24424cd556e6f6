"""Finding 4 of the security review, slow clients: request headers that trickle in, a
connection that sends nothing, and a declared body that does not arrive are each answered
408 and closed once ``--header-timeout-ms`` / ``--body-timeout-ms`` pass (short here), with
one log line and no traceback; requests and worker sessions at a normal pace are unaffected.
Real sockets against a real server (the transport is the same on both stores: SQLite)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.orbit_http import OrbitEnv, expect, http_client
from support.protocol_client import ProtocolClient
from support.server import ServerProcess
from support.waiting import UNIT, wait_until

HEADER_MS, BODY_MS = 500, 1000
# Far beyond both timeouts: a socket still open after this long was not closed by them.
BOUND_S = 15 * UNIT


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OrbitEnv]:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("slow")) / "server", extra_args=(
        "--header-timeout-ms", str(HEADER_MS), "--body-timeout-ms", str(BODY_MS)))
    srv.start()
    try:
        admin = srv.bootstrap_admin()
        with http_client(srv.url, admin.bearer) as http:
            orbit = OrbitEnv(srv, admin, http)
            yield orbit
            orbit.close()
    finally:
        srv.stop()


def _connect(env: OrbitEnv) -> socket.socket:
    host, port = env.server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=BOUND_S)
    sock.settimeout(0.05)
    return sock


def _trickle_until_closed(sock: socket.socket, data: bytes) -> tuple[bytes, float]:
    """Send ``data`` one byte per 50 ms (then keep sending spaces) until the server closes;
    returns what it answered and how long that took (bounded by BOUND_S)."""
    started = time.monotonic()
    answer = b""
    index = 0
    while time.monotonic() - started < BOUND_S:
        try:
            sock.send(data[index:index + 1] if index < len(data) else b" ")
        except OSError:
            break
        index += 1
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        answer += chunk
    return answer, time.monotonic() - started


def _wait_for_logged_cut(env: OrbitEnv, line: str) -> None:
    """The server logs a cut as it closes the connection, which may come just after the
    answer reached the client: wait (bounded) for the line rather than read the log at once.
    Each test checks its own line: the module's tests may run on different xdist workers,
    each with its own server."""
    def logged() -> str:
        text = env.server.log_tail(200_000)
        return text if line in text else ""

    log = wait_until(logged, timeout=BOUND_S / UNIT, what=f"{line!r} logged")
    assert "Traceback" not in log, log[-3000:]


def test_trickled_headers_are_cut(env: OrbitEnv) -> None:
    socks = [_connect(env) for _ in range(10)]
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        answer, took = _trickle_until_closed(socks[0], b"X-Slow: " + b"a" * 10_000)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"connection: close" in answer.lower() and took < BOUND_S
        # The other nine, silent since their first line, were cut as well.
        for sock in socks[1:]:
            sock.settimeout(BOUND_S)
            assert sock.recv(65536).startswith(b"HTTP/1.1 408")
            assert sock.recv(65536) == b""
    finally:
        for sock in socks:
            sock.close()
    _wait_for_logged_cut(env, "headers not complete within")


def test_a_connection_that_sends_nothing_is_cut(env: OrbitEnv) -> None:
    sock = _connect(env)
    try:
        sock.settimeout(BOUND_S)
        assert sock.recv(65536).startswith(b"HTTP/1.1 408")
    finally:
        sock.close()


def test_a_body_that_does_not_arrive_is_cut(env: OrbitEnv) -> None:
    before = len(expect(env.admin_http.get("/v1/queues"), 200)["queues"])
    sock = _connect(env)
    try:
        body = b'{"name": "never-made"}'
        sock.sendall(b"POST /v1/queues HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + env.admin.bearer.encode() + b"\r\n"
                     b"Content-Length: %d\r\n\r\n" % (len(body) + 1000))
        answer, took = _trickle_until_closed(sock, body)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"BAD_REQUEST"' in answer and took < BOUND_S
    finally:
        sock.close()
    assert len(expect(env.admin_http.get("/v1/queues"), 200)["queues"]) == before
    _wait_for_logged_cut(env, "body not complete within")


def test_requests_and_sessions_at_a_normal_pace_are_served(env: OrbitEnv) -> None:
    # A body in two parts, well within the body timeout.
    sock = _connect(env)
    try:
        body = b'{"name": "made"}'
        sock.sendall(b"POST /v1/queues HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + env.admin.bearer.encode() + b"\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
        time.sleep(BODY_MS / 1000 / 4)
        sock.sendall(body[5:])
        sock.settimeout(BOUND_S)
        assert sock.recv(65536).startswith(b"HTTP/1.1 201")
    finally:
        sock.close()
    # A worker session outlives both timeouts: the WebSocket has its own hello timeout.
    queue = env.queue()
    worker = env.worker_credential(queue)

    async def session() -> None:
        async with await ProtocolClient.connect(env.server.ws_url) as wc:
            await wc.hello_as(worker)
            await asyncio.sleep(2 * BODY_MS / 1000)
            await wc.heartbeat()

    asyncio.run(session())
