"""The WebSocket transport under the worker endpoint: uvicorn's sans-I/O implementation,
with one change: a text frame that is not valid UTF-8 gets the protocol's typed answer
(a fatal ``BAD_FRAME`` error frame, close 4001) and ONE log line, instead of uvicorn's
logged traceback (a peer must not be able to write tracebacks into the log at will).

The override relies on ``WebSocketsSansIOProtocol`` keeping the current message's parts
in ``frames`` and its kind in ``curr_msg_data_type`` (uvicorn 0.30 to 0.55, bounded in
pyproject.toml); tests/integration/server/test_security_frames.py checks the behaviour.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from orbit_host.logs import fields
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import ErrorFrame, encode

log = logging.getLogger("orbit.ws")

CLOSE_BAD_FRAME = 4001  # ws_endpoint.CLOSE_CODES[BAD_FRAME]


class OrbitWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol with a typed close for invalid UTF-8."""

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            try:
                data.decode()
            except UnicodeDecodeError as exc:
                self.frames = []
                peer = self.client
                log.warning("closing a worker connection from %s: a text frame is not valid "
                            "UTF-8 (byte %d)", f"{peer[0]}:{peer[1]}" if peer else "?",
                            exc.start, extra=fields("worker_bad_utf8",
                                                    client=peer[0] if peer else None))
                frame = ErrorFrame(ErrorCode.BAD_FRAME, "text frame is not valid UTF-8",
                                   retryable=False, fatal=True)
                self.conn.send_text(encode(frame))
                self.conn.send_close(CLOSE_BAD_FRAME, ErrorCode.BAD_FRAME.value)
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()
