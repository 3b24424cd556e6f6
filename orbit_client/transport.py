"""The blocking client's HTTP/1.1 transport: keep-alive connections of the standard library's
``http.client``, at most ``max_connections`` of them, each serving one request at a time.

Why not httpx here: a request through ``httpx.Client`` costs the caller several times the CPU
of one through ``http.client`` (docs/benchmarks.md, "The client's CPU per request"), and a
producer submitting one task per call pays that on every submit and every long poll.
``AsyncOrbitClient`` keeps httpx.

No request is ever retried: an error after the request was sent may mean it was applied.
An idle connection the server has closed (its keep-alive timeout) is noticed before it is
reused, by polling it for readability: nothing may arrive on an idle HTTP/1.1 connection
but its end.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlencode, urlsplit

from orbit_host.tls import refused_verification

from .errors import CertificateError, ServerUnreachable

__all__ = ["Answer", "BlockingTransport", "CertificateRefused", "NoAnswer", "refused_certificate",
           "ssl_context_for"]


class Answer(NamedTuple):
    status: int
    body: bytes


class NoAnswer(ServerUnreachable):
    """The request got no answer (connect failure, reset, timeout, a broken response); it may
    still have been applied. ``kind`` names what went wrong (an exception class name); the
    client says it again with the server's URL."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class CertificateRefused(CertificateError):
    """The server's TLS certificate was refused during the handshake (the message says
    why); nothing was sent. The client says it again with the server's URL."""


def refused_certificate(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, when that is what ended a request."""
    refused = refused_verification(exc)
    if refused is None:
        return None
    return str(refused.verify_message or refused.reason or "certificate verify failed")


def ssl_context_for(verify: bool | str | ssl.SSLContext) -> ssl.SSLContext:
    """The TLS context for ``verify``: True verifies against the system's trust store, a str
    is a CA bundle file, False checks nothing (tests and trusted networks only)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return ssl.create_default_context()


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection has been closed by the server (or is unusable)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class BlockingTransport:
    """Keep-alive connections to one server; safe to share between threads (a request waits
    for a free connection, never for a timeout of its own)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], max_connections: int,
                 connect_timeout: float, verify: bool | str | ssl.SSLContext = True) -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers)
        self._connect_timeout = connect_timeout
        self._context = ssl_context_for(verify) if self._https else None
        self._slots = threading.BoundedSemaphore(max_connections)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, path: str, params: Mapping[str, str] | None,
                body: bytes | None, read_timeout: float) -> Answer:
        target = self._prefix + path + ("?" + urlencode(params) if params else "")
        with self._slots:
            conn = self._take()
            try:
                if conn.sock is None:
                    conn.connect()
                assert conn.sock is not None
                conn.sock.settimeout(read_timeout)
                conn.request(method, target, body=body, headers=self._headers)
                response = conn.getresponse()
                answer = Answer(response.status, response.read())
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                refused = refused_certificate(exc)
                if refused is not None:
                    raise CertificateRefused(refused) from None
                raise NoAnswer(type(exc).__name__) from None
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            else:
                self._give_back(conn)
            return answer

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn
                conn.close()
        if self._context is not None:
            return http.client.HTTPSConnection(self._host, self._port,
                                               timeout=self._connect_timeout,
                                               context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()
