"""Length-prefixed orjson frames between the supervisor and its child processes.

A frame is a 4-byte big-endian length followed by that many bytes of one JSON object.
``FrameDecoder`` is the sans-I/O core: feed it bytes, take whole frames out. The blocking
helpers (``send_frame``/``recv_frame``) are for the child and the template, which run plain
blocking loops; the parent drives a ``FrameDecoder`` from ``loop.add_reader``.

A frame longer than ``max_bytes`` raises ``FrameError`` before its body is buffered, so a
misbehaving peer can never make the reader hold more than one frame's limit in memory.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import orjson

from orbit_wire.errors import ErrorCode, ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "recv_frame",
    "send_frame",
]

# A result or details value is at most 256 KiB of JSON text; carried as a JSON string it can
# grow up to six times by escaping (\u00XX), plus the payload of a run frame.
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024

_HEADER = struct.Struct(">I")


class FrameError(ProtocolError):
    """The peer sent bytes that are not a frame: too large, not JSON, or not an object."""


def encode_frame(obj: dict[str, Any], *, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Encode one object as header + body. Raises FrameError if the body exceeds max_bytes."""
    body = orjson.dumps(obj)
    if len(body) > max_bytes:
        raise FrameError(
            ErrorCode.FRAME_TOO_LARGE, f"frame is {len(body)} bytes; at most {max_bytes}"
        )
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` returns every frame completed by ``data``.

    After a FrameError the decoder is unusable: the stream has lost its framing, and the
    caller must close the connection.
    """

    __slots__ = ("_broken", "_buf", "_max")

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_bytes
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if self._broken:
            raise FrameError(ErrorCode.BAD_FRAME, "stream framing was already lost")
        # Whole frames are parsed where they lie (usually in ``data`` itself, with nothing
        # held); only an unfinished frame's bytes are kept for the next call.
        buf = self._buf
        if buf:
            buf += data
            held: bytes | bytearray = buf
        else:
            held = data
        frames: list[dict[str, Any]] = []
        pos, total = 0, len(held)
        while total - pos >= _HEADER.size:
            (size,) = _HEADER.unpack_from(held, pos)
            if size > self._max:
                self._broken = True
                raise FrameError(
                    ErrorCode.FRAME_TOO_LARGE, f"frame is {size} bytes; at most {self._max}"
                )
            end = pos + _HEADER.size + size
            if total < end:
                break
            frames.append(self._parse(held[pos + _HEADER.size : end]))
            pos = end
        if held is buf:
            del buf[:pos]
        elif pos < total:
            buf += data[pos:]
        return frames

    def _parse(self, body: bytes | bytearray) -> dict[str, Any]:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self._broken = True
            raise FrameError(ErrorCode.BAD_FRAME, f"frame is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            self._broken = True
            raise FrameError(ErrorCode.BAD_FRAME, "frame must be a JSON object")
        return obj


def send_frame(sock: socket.socket, obj: dict[str, Any], **kw: Any) -> None:
    """Blocking send of one frame (the whole frame, or an OSError)."""
    sock.sendall(encode_frame(obj, **kw))


def recv_frame(sock: socket.socket, decoder: FrameDecoder, pending: list[dict[str, Any]]
               ) -> dict[str, Any] | None:
    """Blocking receive of the next frame; None at end of stream.

    ``pending`` holds frames decoded earlier but not yet consumed (one read may complete
    several); pass the same list on every call.
    """
    while not pending:
        data = sock.recv(256 * 1024)
        if not data:
            if decoder.buffered:
                raise FrameError(ErrorCode.BAD_FRAME, "stream ended inside a frame")
            return None
        pending.extend(decoder.feed(data))
    return pending.pop(0)
