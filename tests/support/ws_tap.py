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

Its ``rules`` act on other frames by type (``FrameRule``), e.g. the server's ``reserve``:

    tap = OpTap(rules=[FrameRule("reserve", "drop_and_cut")])     # the grant never arrives
    tap.arm(FrameRule("reserve", Hold(2.0, then="deliver")))     # arrives 2 s late
    tap.arm(FrameRule("heartbeat", Hold(1.0), direction="to_server"))

A ``Hold`` keeps the frame, and every later frame of its direction (a one-way blackhole),
for its seconds or until ``release()``, then delivers it or cuts the connection. Every frame
but heartbeats is kept in ``frames`` with what was done to it.
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
Lose = Literal["request", "answer"]


@dataclass(frozen=True)
class Hold:
    """Keep a frame back (and every later frame of its direction) for ``seconds``, or until
    the tap's ``release()``; then deliver it, or cut the connection."""

    seconds: float
    then: Literal["deliver", "cut"] = "deliver"


Verdict = Literal["forward", "drop_and_cut"] | Hold
# Frames too frequent to keep, and those the op loss acts on (rules leave them alone).
_UNKEPT = ("heartbeat", "heartbeat_ack")
_OP_FRAMES = ("request", "response")

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


@dataclass(frozen=True)
class Seen:
    """A frame the tap saw: when (wall-clock seconds), which way, and what it did with it."""

    at: float
    direction: Direction
    message: dict[str, Any]
    verdict: Literal["forward", "drop_and_cut", "hold"]


@dataclass
class FrameRule:
    """The first ``times`` frames of ``frame_type`` going ``direction`` get ``action``
    (never a request or a response: the op loss acts on those)."""

    frame_type: str
    action: Literal["drop_and_cut"] | Hold
    direction: Direction = "to_client"
    times: int = 1
    hits: list[dict[str, Any]] = field(default_factory=list)  # the frames it acted on

    def __post_init__(self) -> None:
        assert self.frame_type not in _OP_FRAMES, "an op's loss is the tap's kind and lose"


@dataclass
class OpTap:
    """Loses the first ``times`` requests (or answers) that hold an op of ``kind`` (None:
    none), and acts on other frames as its ``rules`` say."""

    kind: str | None = None
    lose: Lose = "request"
    times: int = 1
    rules: list[FrameRule] = field(default_factory=list)
    frames: list[Seen] = field(default_factory=list)  # every frame but heartbeats
    held: list[tuple[float, dict[str, Any], bool]] = field(default_factory=list)  # (ended
    # at, frame, delivered) of each hold
    releases: int = 0  # ``release()`` calls: a hold under way ends when this changes
    last_at: dict[str, float] = field(default_factory=dict)  # direction -> its last frame
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
            self.last_at[direction] = time.time()
            verdict = (self._request(message) if direction == "to_server"
                       else self._response(message))
            if verdict == "forward":
                verdict = self._by_rule(direction, message)
            if message.get("type") not in _UNKEPT:
                self.frames.append(Seen(time.time(), direction, message,
                                        "hold" if isinstance(verdict, Hold) else verdict))
            return verdict

    def _by_rule(self, direction: Direction, message: dict[str, Any]) -> Verdict:
        for rule in self.rules:
            if (rule.direction == direction and rule.frame_type == message.get("type")
                    and len(rule.hits) < rule.times):
                rule.hits.append(message)
                return rule.action
        return "forward"

    def arm(self, rule: FrameRule) -> FrameRule:
        """Add a rule now (e.g. once the worker is connected and idle)."""
        with self._lock:
            self.rules.append(rule)
        return rule

    def release(self) -> None:
        """End every hold under way now (each then delivers or cuts, as it says)."""
        with self._lock:
            self.releases += 1

    def hold_ended(self, message: dict[str, Any], delivered: bool) -> None:
        """The proxy's word that a held frame was delivered, or its connection cut."""
        with self._lock:
            self.held.append((time.time(), message, delivered))

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

    # ------------------------------------------------------------ facts for the checks

    def ops_of(self, kind: str) -> dict[str, dict[str, Any]]:
        """msg_id -> the op, for every op of ``kind`` the server received."""
        with self._lock:
            return {m: ops[0] for m, ops in self.received.items() if ops[0].get("op") == kind}

    def seen(self, frame_type: str, direction: Direction = "to_client") -> list[Seen]:
        """Every frame of ``frame_type`` that went (or was meant to go) ``direction``."""
        with self._lock:
            return [s for s in self.frames
                    if s.direction == direction and s.message.get("type") == frame_type]

    def spoken_of(self) -> set[str]:
        """The attempts the server heard the worker speak of (a renew, finish or decline of
        it, or an entry of a resume): what confirms a grant (docs/protocol.md, "Grants")."""
        out: set[str] = set()
        with self._lock:
            for ops in self.received.values():
                op = ops[0]
                if op.get("op") == "resume":
                    out.update(str(e.get("attempt_id")) for e in op.get("attempts", ())
                               if isinstance(e, dict))
                elif op.get("op") in ("renew", "finish", "decline"):
                    out.add(str(op.get("attempt_id")))
        return out

    def lost_ops(self) -> list[dict[str, Any]]:
        """The ops of ``kind`` in the lost messages (requests, or requests whose answer was
        lost), as first sent."""
        with self._lock:
            return [op for ops in self.lost for op in ops if op.get("op") == self.kind]
