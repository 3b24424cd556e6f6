"""The server's side of the worker protocol (docs/protocol.md), without I/O: frames in,
decisions and frames out, time passed in as ``now`` (monotonic seconds). Pure.

One ``WorkerProtocol`` per connection. The driver (``ws_endpoint.WorkerConnection``) calls

- ``receive(text, now)`` for every message (``None`` for a binary one),
- ``greeted(...)`` or ``refused(...)`` once it has run the hello a ``Greet`` asked for,
- ``answered(request_id, results)`` once it has applied the request an ``Apply`` asked for,
- ``handle_timer(now)`` at ``next_timer()``, and ``close(...)`` for a close of its own,

and performs the actions each returns, in order: ``Send`` a frame, ``Close`` the socket,
``Greet`` (authenticate the hello and open the session), ``AddCredit`` (the dispatcher may
claim), ``Apply`` (a control request, in one transaction). Every rule of the connection's
order lives here: hello first and once, one request in flight with increasing ids, the
credit bound (``SessionCredit``), the hello and silence timeouts and the credential's end. A rule
broken by the peer is a fatal ``error`` frame and its close code (``CLOSE_CODES``, the one
place they are defined); after a close, nothing more is decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.frames import (
    ClaimOp,
    Credit,
    DrainOp,
    ErrorFrame,
    Heartbeat,
    HeartbeatAck,
    Hello,
    OpResult,
    Request,
    Response,
    ServerFrame,
    Welcome,
    decode_client_frame,
)
from orbit_wire.limits import FEATURE_GRANT, MAX_BATCH_OPS, PROTOCOL_VERSION

# The close code after a fatal ``error`` frame of each code (docs/protocol.md).
CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.BAD_FRAME: 4001,
    ErrorCode.UNKNOWN_FRAME_TYPE: 4001,
    ErrorCode.FRAME_TOO_LARGE: 4002,
    ErrorCode.OUT_OF_ORDER: 4003,
    ErrorCode.CONCURRENT_REQUEST: 4003,
    ErrorCode.LIMIT_EXCEEDED: 4004,
    ErrorCode.UNSUPPORTED_PROTOCOL: 4005,
    ErrorCode.UNAUTHENTICATED: 4006,
    ErrorCode.PERMISSION_DENIED: 4006,
    ErrorCode.INSTANCE_CONFLICT: 4007,
    ErrorCode.POLICY_CONFLICT: 4013,
    ErrorCode.UNAVAILABLE: 4010,
    ErrorCode.INTERNAL: 4011,
    ErrorCode.RATE_LIMITED: 4012,
}
CLOSE_OTHER = 4000  # a fatal code without its own close code
# The protocol features this server serves (docs/protocol.md, "Features").
SERVED_FEATURES = (FEATURE_GRANT,)
# Closes without an ``error`` frame.
CLOSE_SESSION_EXPIRED = 4008  # silent for session_ttl_ms, or no hello within hello_timeout_ms
CLOSE_REPLACED = 4009  # a newer hello of the same instance took over


def granted_features(hello: Hello) -> tuple[str, ...]:
    """The features of ``hello`` this server grants (unknown ones are left out)."""
    return tuple(f for f in SERVED_FEATURES if f in hello.features)


def close_code(code: ErrorCode) -> int:
    """The close code that follows a fatal ``error`` frame of ``code``."""
    return CLOSE_CODES.get(code, CLOSE_OTHER)


class SessionCredit:
    """A session's outstanding credit: added by ``credit`` frames and the credit a request's
    claims leave, spent one per reservation sent; never above 2 x capacity (the protocol's
    bound, LIMIT_EXCEEDED past it). The connection's protocol checks frames against it; the
    dispatcher spends and refunds it."""

    __slots__ = ("capacity", "outstanding")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.outstanding = 0

    @property
    def bound(self) -> int:
        return 2 * self.capacity

    @property
    def room(self) -> int:
        """How much more credit the bound allows."""
        return max(0, self.bound - self.outstanding)

    def add(self, credits: int) -> None:
        """A ``credit`` frame; ProtocolError(LIMIT_EXCEEDED) above the bound (nothing added)."""
        if self.outstanding + credits > self.bound:
            raise ProtocolError(
                ErrorCode.LIMIT_EXCEEDED,
                f"outstanding credit would be {self.outstanding + credits}; "
                f"at most {self.bound} (2 x capacity)",
            )
        self.outstanding += credits

    def check_claims(self, asked: int) -> None:
        """A request's claims may ask for at most the bound a ``credit`` frame obeys."""
        if asked > self.bound:
            raise ProtocolError(
                ErrorCode.LIMIT_EXCEEDED,
                f"claims ask for {asked} slots; at most {self.bound} (2 x capacity)",
            )

    def spend(self, count: int) -> None:
        self.outstanding -= count

    def refund(self, credits: int) -> None:
        """Credit a request's claims left, within the bound."""
        self.outstanding = min(self.outstanding + credits, self.bound)


class Phase(Enum):
    AWAITING_HELLO = "awaiting_hello"
    GREETING = "greeting"  # the hello taken, its authentication under way
    OPEN = "open"  # welcomed: the session's frames are served
    CLOSING = "closing"  # a close was decided: nothing more is


class Step(Enum):
    HELLO = "hello"
    GREETED = "greeted"
    CLOSE = "close"


# Every legal move of a connection; any other is a bug of the driver (it raises).
MOVES: dict[tuple[Phase, Step], Phase] = {
    (Phase.AWAITING_HELLO, Step.HELLO): Phase.GREETING,
    (Phase.GREETING, Step.GREETED): Phase.OPEN,
    (Phase.AWAITING_HELLO, Step.CLOSE): Phase.CLOSING,
    (Phase.GREETING, Step.CLOSE): Phase.CLOSING,
    (Phase.OPEN, Step.CLOSE): Phase.CLOSING,
}


class Why(Enum):
    """Why the server closes a connection on its own (what the driver logs)."""

    FATAL = "fatal"  # a rule broken, or the hello refused: the error frame says which
    SILENT = "worker_silent"  # no frame for session_ttl_ms
    NO_HELLO = "worker_no_hello"  # no hello within hello_timeout_ms
    CREDENTIAL_ENDED = "worker_credential_expired"  # its expiry or rotation grace passed
    OWN = "own"  # the driver's own close (replaced, not reading)


# ------------------------------------------------------------------ actions


@dataclass(frozen=True, slots=True)
class Send:
    frame: ServerFrame


@dataclass(frozen=True, slots=True)
class Close:
    """Close the socket with ``code`` after the frames sent before."""

    code: int
    reason: str
    why: Why


@dataclass(frozen=True, slots=True)
class Greet:
    """Authenticate the hello and open its session, then call ``greeted`` or ``refused``;
    read no frame meanwhile."""

    hello: Hello


@dataclass(frozen=True, slots=True)
class AddCredit:
    """The session's credit grew (already added to its ``SessionCredit``): claim for it."""

    credits: int


@dataclass(frozen=True, slots=True)
class Apply:
    """Apply a control request (its ``claim`` ops through the claim routine; after a
    ``drain`` op no more reservations), then call ``answered``."""

    request: Request
    drain: bool
    claims: bool


Action = Send | Close | Greet | AddCredit | Apply


@dataclass(frozen=True, slots=True)
class Settings:
    """The server's settings a connection follows (docs/protocol.md, docs/security.md)."""

    hello_timeout_ms: int  # the hello must come this soon after the handshake
    session_ttl_ms: int  # a connection silent this long is closed
    heartbeat_ms: int  # announced in ``welcome``
    kill_grace_ms: int  # announced in ``welcome``


class WorkerProtocol:
    """One connection's protocol state: its phase, the hello, its credit, the request in
    flight and the instants its timers fall due."""

    def __init__(self, settings: Settings, now: float) -> None:
        self.settings = settings
        self._ttl_s = settings.session_ttl_ms / 1000
        self._hello_s = settings.hello_timeout_ms / 1000
        self.phase = Phase.AWAITING_HELLO
        self.hello: Hello | None = None
        self.credit = SessionCredit(0)
        self._opened_at = now
        self._last_seen = now
        self._valid_until: float | None = None  # when the hello's credential stops holding
        self._in_flight: int | None = None  # the id of the request being applied
        self._last_request_id: int | None = None
        # Messages read from the peer, counted from 1 (the hello): a grant's ``basis``.
        self.frames_read = 0

    @property
    def closing(self) -> bool:
        return self.phase is Phase.CLOSING

    @property
    def last_seen(self) -> float:
        """When the last message arrived (the handshake's instant before the first)."""
        return self._last_seen

    def _move(self, step: Step) -> None:
        try:
            self.phase = MOVES[(self.phase, step)]
        except KeyError:
            raise RuntimeError(f"no move {step.value} from {self.phase.value}") from None

    # -------------------------------------------------------------- frames in

    def receive(self, text: str | None, now: float) -> list[Action]:
        """A message from the peer (``None``: a binary one)."""
        if self.closing:
            return []
        if self.phase is Phase.GREETING:
            raise RuntimeError("a frame received while a hello is under way")
        self._last_seen = now
        self.frames_read += 1
        if text is None:
            return self.fatal(ErrorCode.BAD_FRAME, "binary frames are not accepted; send text")
        try:
            frame = decode_client_frame(text)
            if self.phase is Phase.AWAITING_HELLO:
                return self._first(frame)
            match frame:
                case Heartbeat():
                    return [Send(HeartbeatAck())]
                case Credit(credits=credits):
                    self.credit.add(credits)
                    return [AddCredit(credits)]
                case Request():
                    return self._request(frame)
                case Hello():
                    raise ProtocolError(ErrorCode.OUT_OF_ORDER, "hello was already received")
        except ProtocolError as exc:
            return self.fatal(exc.code, exc.message)
        raise AssertionError(f"unhandled frame {frame!r}")  # every ClientFrame is matched

    def _first(self, frame: object) -> list[Action]:
        if not isinstance(frame, Hello):
            raise ProtocolError(ErrorCode.OUT_OF_ORDER, "the first frame must be hello")
        if frame.protocol != PROTOCOL_VERSION:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_PROTOCOL,
                f"protocol {frame.protocol} is not supported; use {PROTOCOL_VERSION}",
            )
        self._move(Step.HELLO)
        self.hello = frame
        return [Greet(frame)]

    def _request(self, request: Request) -> list[Action]:
        if self._in_flight is not None:
            raise ProtocolError(ErrorCode.CONCURRENT_REQUEST,
                                "a request is already in flight on this connection")
        if self._last_request_id is not None and request.id <= self._last_request_id:
            raise ProtocolError(ErrorCode.OUT_OF_ORDER,
                                f"request id {request.id} was not greater than the previous "
                                f"({self._last_request_id})")
        self.credit.check_claims(sum(op.count for op in request.ops
                                     if isinstance(op, ClaimOp)))
        self._last_request_id = self._in_flight = request.id
        return [Apply(request, drain=any(isinstance(op, DrainOp) for op in request.ops),
                      claims=any(isinstance(op, ClaimOp) for op in request.ops))]

    # -------------------------------------------------------------- the driver's answers

    def greeted(self, session_id: str, *, now: float, now_ms: int,
                valid_until_ms: int | None) -> list[Action]:
        """The hello opened its session ``session_id`` (at wall-clock ``now_ms``; its
        credential holds until ``valid_until_ms``, None: until revoked): welcome it."""
        if self.closing:
            return []
        assert self.hello is not None
        self._move(Step.GREETED)
        self.credit = SessionCredit(self.hello.capacity)
        if valid_until_ms is not None:
            self._valid_until = now + (valid_until_ms - now_ms) / 1000
        settings = self.settings
        return [Send(Welcome(
            session_id=session_id,
            session_ttl_ms=settings.session_ttl_ms,
            heartbeat_ms=settings.heartbeat_ms,
            kill_grace_ms=settings.kill_grace_ms,
            server_time_ms=now_ms,
            max_batch_ops=MAX_BATCH_OPS,
            features=granted_features(self.hello),
        ))]

    def refused(self, code: ErrorCode, message: str, *, retryable: bool) -> list[Action]:
        """The hello was refused (authentication, limits, the store)."""
        return self.fatal(code, message, retryable=retryable)

    def answered(self, request_id: int, results: Sequence[OpResult]) -> list[Action]:
        """The request ``Apply`` asked for is applied: its response."""
        if self._in_flight != request_id:
            raise RuntimeError(f"request {request_id} is not the one in flight")
        self._in_flight = None
        if self.closing:
            return []
        return [Send(Response(request_id, tuple(results)))]

    # -------------------------------------------------------------- timers and closes

    def next_timer(self) -> float | None:
        """When ``handle_timer`` must run next (None: never again)."""
        if self.closing:
            return None
        due = self._last_seen + self._ttl_s
        if self.phase is not Phase.OPEN:
            due = min(due, self._opened_at + self._hello_s)
        if self._valid_until is not None:
            due = min(due, self._valid_until)
        return due

    def handle_timer(self, now: float) -> list[Action]:
        """Close the connection whose silence, missing hello or credential ran out."""
        if self.closing:
            return []
        if now >= self._last_seen + self._ttl_s:
            return self.close(CLOSE_SESSION_EXPIRED, "session expired", Why.SILENT)
        if self.phase is not Phase.OPEN and now >= self._opened_at + self._hello_s:
            return self.close(CLOSE_SESSION_EXPIRED, "no hello", Why.NO_HELLO)
        if self._valid_until is not None and now >= self._valid_until:
            return self.fatal(ErrorCode.UNAUTHENTICATED, "the worker's credential expired",
                              why=Why.CREDENTIAL_ENDED)
        return []

    def fatal(self, code: ErrorCode, message: str, *, retryable: bool = False,
              why: Why = Why.FATAL) -> list[Action]:
        """A fatal ``error`` frame, then its close code."""
        if self.closing:
            return []
        return [Send(ErrorFrame(code, message, retryable=retryable, fatal=True)),
                *self.close(close_code(code), code.value, why)]

    def close(self, code: int, reason: str, why: Why = Why.OWN) -> list[Action]:
        """Close after the frames already sent (once)."""
        if self.closing:
            return []
        self._move(Step.CLOSE)
        return [Close(code, reason, why)]
