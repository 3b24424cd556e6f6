"""The WebSocket transport under the worker endpoint: uvicorn's sans-I/O implementation,
with two changes:

- a text frame that is not valid UTF-8 gets the protocol's typed answer (a fatal
  ``BAD_FRAME`` error frame, close 4001) and ONE log line, instead of uvicorn's logged
  traceback (a peer must not be able to write tracebacks into the log at will);
- a close the server starts waits ``WS_CLOSE_TIMEOUT_S`` for the peer's answer, then drops
  the connection (abort: nothing buffered for a peer that does not read is kept), where
  uvicorn would hold it 10 s and then wait for its buffer to drain;
- the app may write a text message straight to the transport (``send_text_now``, offered in
  the scope's extensions as ``DIRECT_SEND``; ``ws_writer`` uses it) instead of through an
  ASGI ``websocket.send`` message and uvicorn's send coroutine;
- the app may take each whole text message in the callback that parsed it
  (``receive_directly``, offered as ``DIRECT_RECEIVE``) instead of uvicorn queueing it for
  ``websocket.receive``, pausing the transport's reading until the app asks and waking the
  app's reading task, per message.

The overrides rely on ``WebSocketsSansIOProtocol`` keeping the current message's parts in
``frames``, its kind in ``curr_msg_data_type``, the closing handshake's timer in
``close_timer``, the scope ``handle_connect`` makes, and its ``conn``, ``writable``,
``handshake_complete``, ``close_sent``, ``disconnected``, ``queue`` and ``read_paused``
(uvicorn 0.30 to 0.55, bounded in pyproject.toml); tests/integration/server/
test_security_frames.py, test_security_ws_close.py and test_ws_direct_receive.py check them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from orbit_host.logs import fields
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import ErrorFrame, encode

from .worker_protocol import close_code

log = logging.getLogger("orbit.ws")

# How long a close the server sent waits for the peer's close frame before the connection
# is dropped (docs/security.md): a peer that answers does so within a round trip.
WS_CLOSE_TIMEOUT_S = 1.0

# The scope extensions under which a connection offers ``send_text_now`` and
# ``receive_directly``.
DIRECT_SEND = "orbit.direct_send"
DIRECT_RECEIVE = "orbit.direct_receive"

# Takes one whole text message; False leaves it (and every message after it) to the queue.
Take = Callable[[str], bool]


def direct_send(scope: Mapping[str, Any]) -> Callable[[bytes], bool] | None:
    """The connection's ``send_text_now``, when its transport offers it (uvicorn with
    ``OrbitWebSocketProtocol``; None elsewhere, e.g. under a test client)."""
    return _extensions(scope).get(DIRECT_SEND)


def direct_receive(scope: Mapping[str, Any]) -> Callable[[Take | None], bool] | None:
    """The connection's ``receive_directly``, when its transport offers it."""
    return _extensions(scope).get(DIRECT_RECEIVE)


def _extensions(scope: Mapping[str, Any]) -> Mapping[str, Any]:
    return scope.get("extensions") or {}


class OrbitWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol with a typed close for invalid UTF-8 and a
    bounded closing handshake."""

    _take: Take | None = None

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None and not self.close_sent:  # the app gets this same dict
            scope["extensions"][DIRECT_SEND] = self.send_text_now
            scope["extensions"][DIRECT_RECEIVE] = self.receive_directly

    def receive_directly(self, take: Take | None) -> bool:
        """Hand each whole text message to ``take`` as it is parsed (None: queue them again).
        A message ``take`` leaves, a binary one, or one that is not UTF-8 goes to the queue
        and turns this off for good, so the app reads it and every later one in order.
        Refused (False) while messages wait in the queue: the app reads those first."""
        if take is not None and not self.queue.empty():
            return False
        self._take = take
        return True

    def send_text_now(self, data: bytes) -> bool:
        """Write one text message (UTF-8) now, if the app accepted the connection, nothing
        closed it and the transport is under its high-water mark; False: not written (the
        caller sends it the ASGI way, which waits for the transport)."""
        if (not self.handshake_complete or self.initial_response is not None
                or self.close_sent or self.disconnected or not self.writable.is_set()
                or self.conn.state is not State.OPEN or self.transport.is_closing()):
            return False
        self.conn.send_text(data)
        self.transport.write(b"".join(self.conn.data_to_send()))
        return True

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message.get("type") == "websocket.close" and self.close_timer is not None:
            # uvicorn closes after its own timeout, and only once the peer has read what is
            # buffered: drop the connection at our bound instead.
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(WS_CLOSE_TIMEOUT_S, self._drop)

    def _drop(self) -> None:
        self.close_timer = None
        self.transport.abort()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type != "text" or self.close_sent:
            self._take = None  # a binary message goes to the queue, and every later one
            super().send_receive_event_to_app()
            return
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            self._take = None
            self.frames = []
            peer = self.client
            log.warning("closing a worker connection from %s: a text frame is not valid "
                        "UTF-8 (byte %d)", f"{peer[0]}:{peer[1]}" if peer else "?",
                        exc.start, extra=fields("worker_bad_utf8",
                                                client=peer[0] if peer else None))
            frame = ErrorFrame(ErrorCode.BAD_FRAME, "text frame is not valid UTF-8",
                               retryable=False, fatal=True)
            self.conn.send_text(encode(frame))
            self.conn.send_close(close_code(ErrorCode.BAD_FRAME), ErrorCode.BAD_FRAME.value)
            self.handle_parser_exception()
            return
        take = self._take
        if take is None:
            super().send_receive_event_to_app()
            return
        self.frames = []
        if take(text):
            return
        self._take = None
        self.queue.put_nowait({"type": "websocket.receive", "text": text})
        if not self.read_paused:  # as uvicorn does for a queued message
            self.read_paused = True
            self.transport.pause_reading()
