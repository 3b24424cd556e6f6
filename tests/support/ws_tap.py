"""Watch the worker protocol inside a TcpProxy, and lose one chosen message on purpose.

The supervisor's WebSocket is uncompressed, so a proxy in the middle can read every frame
(client frames are masked: RFC 6455 §5.3). ``FrameSplitter`` cuts one direction's bytes into
the HTTP upgrade and whole frames; ``OpTap`` decides, per JSON message, to forward it or to
drop it and cut the connection:

    tap = OpTap(kind="finish", lose="request", times=1)   # or lose="answer"
    proxy = TcpProxy(server.port, tap=tap).start()

- ``lose="request"``: the first ``times`` requests holding an op of ``kind`` never reach the
  server, and the connection is cut (a cut during the op);
- ``lose="answer"``: those requests reach the server, but the response that answers them is
  dropped and the connection cut (the op applied, its answer lost).

Meanwhile it records every op the server received (``received``: msg_id -> the ops' JSON, once
per delivery) and every answer it saw (``answers``: msg_id -> each result object, delivered or
dropped), so a check can prove a lost op was sent again with its original msg_id and that
every answer to it was the same (applied once).
"""

from __future__ import annotations

import collections
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Direction = Literal["to_server", "to_client"]
Verdict = Literal["forward", "drop_and_cut"]
Lose = Literal["request", "answer"]

_OP_TEXT = 0x1
_HEADER_END = b"\r\n\r\n"
_MAX_HEADER = 64 * 1024


@dataclass
class Frame:
    raw: bytes  # the bytes to forward unchanged
    message: dict[str, Any] | None  # the JSON object of a whole text frame, else None


class FrameSplitter:
    """One direction of one connection: bytes in, whole frames out (the HTTP upgrade
    passes as one opaque frame)."""

    def __init__(self, masked: bool) -> None:
        self._masked = masked
        self._buf = bytearray()
        self._upgraded = False

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        if not self._upgraded:
            end = self._buf.find(_HEADER_END)
            if end < 0:
                if len(self._buf) > _MAX_HEADER:  # not HTTP: pass it through untouched
                    self._upgraded = True
                return out
            out.append(Frame(bytes(self._buf[:end + 4]), None))
            del self._buf[:end + 4]
            self._upgraded = True
        while (frame := self._next()) is not None:
            out.append(frame)
        return out

    def _next(self) -> Frame | None:
        buf = self._buf
        if len(buf) < 2:
            return None
        fin_opcode, mask_len = buf[0], buf[1]
        length, pos = mask_len & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            (length,), pos = struct.unpack_from("!H", buf, 2), 4
        elif length == 127:
            if len(buf) < 10:
                return None
            (length,), pos = struct.unpack_from("!Q", buf, 2), 10
        key = b""
        if mask_len & 0x80:
            if len(buf) < pos + 4:
                return None
            key, pos = bytes(buf[pos:pos + 4]), pos + 4
        if len(buf) < pos + length:
            return None
        raw = bytes(buf[:pos + length])
        payload = buf[pos:pos + length]
        del buf[:pos + length]
        message = None
        if fin_opcode == 0x80 | _OP_TEXT:
            if key:
                payload = bytearray(b ^ key[i % 4] for i, b in enumerate(payload))
            try:
                loaded = orjson.loads(bytes(payload))
            except orjson.JSONDecodeError:
                loaded = None
            message = loaded if isinstance(loaded, dict) else None
        return Frame(raw, message)


@dataclass
class OpTap:
    """Loses the first ``times`` requests (or answers) that hold an op of ``kind``."""

    kind: str
    lose: Lose
    times: int = 1
    lost: list[list[dict[str, Any]]] = field(default_factory=list)  # the ops of each loss
    lost_at: list[float] = field(default_factory=list)  # wall-clock seconds of each loss
    received: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: collections.defaultdict(list))
    answers: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: collections.defaultdict(list))
    _armed: dict[str, dict[str, Any]] = field(default_factory=dict)  # answer to be lost
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def splitter(self, direction: Direction) -> FrameSplitter:
        return FrameSplitter(masked=direction == "to_server")

    def decide(self, direction: Direction, message: dict[str, Any]) -> Verdict:
        with self._lock:
            if direction == "to_server":
                return self._request(message)
            return self._response(message)

    def _request(self, message: dict[str, Any]) -> Verdict:
        if message.get("type") != "request":
            return "forward"
        ops = [op for op in message.get("ops", []) if isinstance(op, dict)]
        if len(self.lost) < self.times and not self._armed and any(
                op.get("op") == self.kind for op in ops):
            if self.lose == "request":
                self.lost.append(ops)
                self.lost_at.append(time.time())
                return "drop_and_cut"
            self._armed = {str(op.get("msg_id")): op for op in ops}
        for op in ops:
            self.received[str(op.get("msg_id"))].append(op)
        return "forward"

    def _response(self, message: dict[str, Any]) -> Verdict:
        if message.get("type") != "response":
            return "forward"
        results = [r for r in message.get("results", []) if isinstance(r, dict)]
        ids = [str(r.get("msg_id")) for r in results]
        for result in results:
            self.answers[str(result.get("msg_id"))].append(result)
        if self._armed.keys() & set(ids):
            self.lost.append(list(self._armed.values()))
            self.lost_at.append(time.time())
            self._armed = {}
            return "drop_and_cut"
        return "forward"

    def reset(self) -> None:
        """Forget what was seen and lost: the next ``times`` losses are for a new run."""
        with self._lock:
            self.lost.clear()
            self.lost_at.clear()
            self.received.clear()
            self.answers.clear()
            self._armed = {}

    # ------------------------------------------------------------ facts for the checks

    def ops_of(self, kind: str) -> dict[str, dict[str, Any]]:
        """msg_id -> the op, for every op of ``kind`` the server received."""
        with self._lock:
            return {m: ops[0] for m, ops in self.received.items() if ops[0].get("op") == kind}

    def lost_ops(self) -> list[dict[str, Any]]:
        """The ops of ``kind`` in the lost messages (requests, or requests whose answer was
        lost), as first sent."""
        with self._lock:
            return [op for ops in self.lost for op in ops if op.get("op") == self.kind]
