"""The HTTP transport: uvicorn's httptools protocol with read timeouts for slow clients,
which uvicorn itself does not have (security finding 4).

* Request headers must be complete within ``header_timeout_s`` of the connection opening or
  of the request's first byte (a new connection that sends nothing is closed too; uvicorn's
  keep-alive timeout only runs between requests).
* A request's body must have arrived whole within ``body_timeout_s`` of its headers.

Past either, the server answers ``408`` with ``Connection: close`` when no response has
started, closes the connection and logs one line. The application sees a disconnect
(``http_plumbing.read_body`` turns it into a quiet typed error).

A response with a ``Content-Length`` leaves in one write: uvicorn writes the status line and
headers, then the body, and each write is a syscall that wakes the client on loopback (the
client then reads twice). ``_OneWriteResponse`` holds the head until the body, the response's
end or the connection's close.

The override relies on ``HttpToolsProtocol``'s parser callbacks (``on_message_begin``,
``on_headers_complete``, ``on_message_complete``), its ``cycle`` and ``transport``, and the
cycle's ``transport``, ``response_started``, ``chunked_encoding`` and ``on_response``
(uvicorn 0.30 to 0.55, bounded in pyproject.toml);
tests/integration/server/test_security_slow_clients.py and test_http_transport.py check the
behaviour with real sockets.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

log = logging.getLogger("orbit.http")

_TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def http_protocol(header_timeout_s: float, body_timeout_s: float) -> type[HttpToolsProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with these timeouts (0: none)."""

    class OrbitHttpProtocol(_TimedHttpProtocol):
        HEADER_TIMEOUT_S = header_timeout_s
        BODY_TIMEOUT_S = body_timeout_s

    return OrbitHttpProtocol


class _TimedHttpProtocol(HttpToolsProtocol):
    HEADER_TIMEOUT_S = 10.0
    BODY_TIMEOUT_S = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        if seconds > 0:
            self._read_timer = self.loop.call_later(seconds, self._timed_out, what, seconds)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self, what: str, seconds: float) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        peer = self.client
        log.info("closing an HTTP connection from %s: %s not complete within %g s",
                 f"{peer[0]}:{peer[1]}" if peer else "?", what, seconds)
        # A 408 only where it answers this request: no earlier response is under way
        # (pipelining) and this one's has not started.
        idle = self.cycle is None or self.cycle.response_complete
        if (idle if what == "headers" else not self.cycle.response_started):
            body = (b'{"error":{"code":"BAD_REQUEST","message":"request %s not complete '
                    b'within %g s","retryable":false}}' % (what.encode(), seconds))
            self.transport.write(_TIMEOUT_408 % (len(body), body))
        self.transport.close()

    # -------------------------------------------------------------- connection and parser

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.HEADER_TIMEOUT_S, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.HEADER_TIMEOUT_S, "headers")

    def on_headers_complete(self) -> None:
        # Armed for every request; a request without a body completes at once and disarms.
        self._arm(self.BODY_TIMEOUT_S, "body")
        super().on_headers_complete()
        if self.pipeline:
            # Queued behind a response under way, with reading paused: its body cannot
            # arrive yet, so its time does not run (what it may buffer is bounded).
            self._disarm()
        cycle = self.cycle
        if cycle is not None and not isinstance(cycle.transport, _OneWriteResponse):
            cycle.transport = _OneWriteResponse(cycle)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the WebSocket protocol has its own (hello_timeout_ms)
        super().handle_websocket_upgrade()


class _OneWriteResponse:
    """A request cycle's transport that sends a response's head together with its body.

    The cycle's first write once its response has started is the head; with a known length
    (``chunked_encoding`` False) it is held and goes out with the next write, at the
    response's end (a HEAD, or a body of zero writes) or before a close. Everything else is
    the connection's transport, unchanged."""

    __slots__ = ("_cycle", "_head_seen", "_held", "_transport")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._transport = cycle.transport
        self._cycle = cycle
        self._head_seen = False
        self._held: bytes | None = None
        completed = cycle.on_response

        def on_response() -> None:
            self.flush()
            completed()

        cycle.on_response = on_response

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif not self._head_seen and self._cycle.response_started:
            self._head_seen = True
            if self._cycle.chunked_encoding is False:
                self._held = data
            else:
                self._transport.write(data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
