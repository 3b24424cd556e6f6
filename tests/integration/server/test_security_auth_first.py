"""Finding 3 of the security review: a request is authenticated before its body is read.

A raw socket declares a 15 MiB batch body, sends its headers and 1 KiB of it, and waits:
a wrong (but well-formed) bearer, a malformed one and none at all are each answered 401 at
once, without the server waiting for (or reading) the rest of the body.
"""

from __future__ import annotations

import socket

from support.orbit_http import OrbitEnv
from support.waiting import UNIT

DECLARED = 15 * 1024 * 1024


def _answer_to_partial_upload(port: int, path: str, authorization: str | None) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            f"Content-Length: {DECLARED}"]
    if authorization is not None:
        head.append(f"Authorization: {authorization}")
    with socket.create_connection(("127.0.0.1", port), timeout=5 * UNIT) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b"{" + b" " * 1023)
        answer = b""
        try:  # the rest of the body is never sent; read the answer until its body is in
            for _ in range(20):
                chunk = sock.recv(4096)
                answer += chunk
                if not chunk or answer.endswith(b"}"):
                    break
        except TimeoutError:
            answer += b"(no complete answer: the server waited for the body)"
        return answer


def test_wrong_bearer_is_refused_before_the_body_is_read(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    path = f"/v1/queues/{queue}/tasks/batch"
    for authorization in (f"Bearer {'0' * 32}.{'1' * 64}", "Bearer x.y", None):
        answer = _answer_to_partial_upload(orbit.server.port, path, authorization)
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 401"), (authorization, answer[:200])
        assert b"UNAUTHENTICATED" in answer
    # Every body route, too (admin ones included).
    for route in ("/v1/queues", "/v1/credentials", f"/v1/queues/{queue}/tasks",
                  f"/v1/tasks/{'f' * 32}/cancel", f"/v1/tasks/{'f' * 32}/review"):
        answer = _answer_to_partial_upload(orbit.server.port, route, "Bearer x.y")
        assert answer.startswith(b"HTTP/1.1 401"), (route, answer[:200])
