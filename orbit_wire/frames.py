"""Worker protocol frames (docs/protocol.md): frozen dataclasses, decoded once at the edge.

Every frame is one JSON object with a ``type``. ``decode_client_frame`` is what the server
calls on bytes from a worker; ``decode_server_frame`` is what the worker calls on bytes from
the server. Both raise ProtocolError with a stable code and never return a half-checked frame.
``encode`` turns any frame into bytes. Results and details travel as JSON *text* so number
text survives unchanged; the payload travels as a JSON value.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import ErrorCode, ProtocolError
from .ids import is_id
from .limits import (
    MAX_BATCH_OPS,
    MAX_CANCEL_GRACE_MS,
    MAX_CAPABILITIES,
    MAX_CAPACITY,
    MAX_CODE_LEN,
    MAX_FRAME_BYTES,
    MAX_KILL_AGE_MS,
    MAX_RESERVATIONS_PER_FRAME,
    MIN_CANCEL_GRACE_MS,
)
from .model import Capability, Disposition, Idempotency, Outcome, TaskState
from .names import CODE_RE, MSG_ID_RE, NAME_RE

# report.ended_by: how the child of a cancelled attempt ended (docs/protocol.md).
ENDED_COOPERATIVE = "COOPERATIVE"
ENDED_KILLED = "KILLED"
ENDED_BY_RE = re.compile(f"{ENDED_COOPERATIVE}|{ENDED_KILLED}")

# --------------------------------------------------------------------------- shared parts


@dataclass(frozen=True, slots=True)
class AttemptRef:
    attempt_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Report:
    """What the worker observed of the child that ran an attempt (all optional)."""

    child_pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None
    kill_reason: str | None = None
    renewals: int | None = None
    # A kill's timing, both durations on the worker's monotonic clock (docs/protocol.md):
    # how long before this request was sent the SIGKILL went out, and how long the killed
    # child took to be reaped after it (None until the reap is known).
    kill_age_ms: int | None = None
    reap_ms: int | None = None
    # After a cancel reached the attempt: COOPERATIVE (the child ended by itself within the
    # cancel grace) or KILLED (SIGKILLed: after the grace, or at a lease kill that came first).
    ended_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


# --------------------------------------------------------------------------- worker → server


@dataclass(frozen=True, slots=True)
class Hello:
    credential_id: str
    credential_secret: str
    instance_id: str
    instance_secret: str
    queue_id: str
    capabilities: tuple[Capability, ...]
    capacity: int
    protocol: int = 1
    # The worker runtime's name and version (e.g. "orbit-supervise/0.1.0"), for operators.
    agent: str | None = None
    type: str = field(default="hello", init=False)


@dataclass(frozen=True, slots=True)
class Credit:
    """Grants ``credits`` more reservations; each reservation the server sends spends one."""

    credits: int
    type: str = field(default="credit", init=False)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    type: str = field(default="heartbeat", init=False)


@dataclass(frozen=True, slots=True)
class ResumeOp:
    msg_id: str
    attempts: tuple[AttemptRef, ...]
    op: str = field(default="resume", init=False)


@dataclass(frozen=True, slots=True)
class StartOp:
    msg_id: str
    attempt_id: str
    epoch: int
    child_pid: int | None = None
    op: str = field(default="start", init=False)


@dataclass(frozen=True, slots=True)
class RenewOp:
    msg_id: str
    attempt_id: str
    epoch: int
    op: str = field(default="renew", init=False)


@dataclass(frozen=True, slots=True)
class FinishOp:
    msg_id: str
    attempt_id: str
    epoch: int
    outcome: Outcome
    code: str | None = None
    retryable: bool = False
    result_json: str | None = None  # exact JSON text; only with SUCCEEDED
    details_json: str | None = None  # exact JSON text; only with FAILED
    report: Report = field(default_factory=Report)
    op: str = field(default="finish", init=False)


@dataclass(frozen=True, slots=True)
class DrainOp:
    msg_id: str
    op: str = field(default="drain", init=False)


@dataclass(frozen=True, slots=True)
class ClaimOp:
    """Claim and start up to ``count`` tasks for free slots, in the request's transaction.

    Applied only if every ``finish`` before it in the request was answered ok. The answer's
    ``claimed`` reservations are already started (each carries ``lease_ms``); slots it could
    not fill become connection credit (``credited``), served later by ``reserve`` frames."""

    msg_id: str
    count: int
    op: str = field(default="claim", init=False)


Op = ResumeOp | StartOp | RenewOp | FinishOp | DrainOp | ClaimOp


@dataclass(frozen=True, slots=True)
class Request:
    """A control request: a batch of operations, answered by one Response with the same id."""

    id: int
    ops: tuple[Op, ...]
    type: str = field(default="request", init=False)


ClientFrame = Hello | Credit | Heartbeat | Request


# --------------------------------------------------------------------------- server → worker


@dataclass(frozen=True, slots=True)
class Welcome:
    session_id: str
    session_ttl_ms: int
    heartbeat_ms: int
    kill_grace_ms: int
    server_time_ms: int
    max_batch_ops: int = MAX_BATCH_OPS
    type: str = field(default="welcome", init=False)


@dataclass(frozen=True, slots=True)
class Reservation:
    attempt_id: str
    task_id: str
    epoch: int
    attempt_number: int
    capability: Capability
    payload: Any
    idempotency: Idempotency
    lease_ttl_ms: int
    attempt_timeout_ms: int
    deadline_at_ms: int  # the task's total deadline, wall-clock ms
    # Only in a ``claim`` answer: the attempt is already started with this lease (0: the
    # lease is gone, e.g. a replayed answer after expiry; the handler must not run).
    lease_ms: int | None = None
    # How long a cancel lets the handler stop by itself before the SIGKILL (0: at once).
    cancel_grace_ms: int = 0


@dataclass(frozen=True, slots=True)
class Reserve:
    reservations: tuple[Reservation, ...]
    type: str = field(default="reserve", init=False)


@dataclass(frozen=True, slots=True)
class ResumeEntry:
    attempt_id: str
    status: str  # "RUNNING" (lease_ms set) or "LOST"
    lease_ms: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class OpResult:
    """The answer to one operation. ``ok`` false carries ``error_code``; fields by op:
    start/renew → lease_ms; finish → disposition, task_state; resume → attempts;
    claim → claimed (started reservations), credited."""

    msg_id: str
    ok: bool
    error_code: ErrorCode | None = None
    error_message: str | None = None
    lease_ms: int | None = None
    disposition: Disposition | None = None
    task_state: TaskState | None = None
    attempts: tuple[ResumeEntry, ...] | None = None
    claimed: tuple[Reservation, ...] | None = None
    credited: int | None = None


@dataclass(frozen=True, slots=True)
class Response:
    id: int
    results: tuple[OpResult, ...]
    type: str = field(default="response", init=False)


@dataclass(frozen=True, slots=True)
class Cancel:
    attempt_id: str
    epoch: int
    reason: str
    type: str = field(default="cancel", init=False)


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    type: str = field(default="heartbeat_ack", init=False)


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """A connection-level error. ``fatal`` means the server closes the connection after it."""

    code: ErrorCode
    message: str
    retryable: bool = False
    fatal: bool = True
    type: str = field(default="error", init=False)


ServerFrame = Welcome | Reserve | Response | Cancel | HeartbeatAck | ErrorFrame


# --------------------------------------------------------------------------- encoding


def encode(frame: ClientFrame | ServerFrame) -> bytes:
    """Serialize a frame. Reservation payloads may be ``orjson.Fragment`` (pre-encoded)."""
    return orjson.dumps(_to_wire(frame))


# Values orjson writes as they are (enums are written by value too, but go through
# _to_wire: an enum's type is its own class).
_AS_IS = frozenset({str, int, bool, float})
# Per class, found once: its field names and a getter of their values; None for a class
# written as it is.
_FIELDS_OF: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | None] = {}


def _to_wire(obj: Any) -> Any:
    kind = type(obj)
    if kind in _AS_IS:
        return obj
    if kind is tuple:
        return [_to_wire(item) for item in obj]
    if kind is Capability or kind is Report:
        return obj.to_dict()
    try:
        fields = _FIELDS_OF[kind]
    except KeyError:
        fields = _FIELDS_OF[kind] = _fields_of(kind)
    if fields is None:
        return obj
    names, values_of = fields
    return {name: value if name == "payload" or type(value) in _AS_IS else _to_wire(value)
            for name, value in zip(names, values_of(obj), strict=True) if value is not None}


def _fields_of(kind: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | None:
    if not (hasattr(kind, "__slots__") and hasattr(kind, "__dataclass_fields__")):
        return None
    names = tuple(kind.__dataclass_fields__)
    if len(names) == 1:
        only = operator.attrgetter(names[0])
        return names, lambda obj: (only(obj),)
    return names, operator.attrgetter(*names)


# --------------------------------------------------------------------------- decoding


class _Fields:
    """Typed access to one JSON object, raising BAD_FRAME with the field's path."""

    __slots__ = ("_obj", "_where")

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise _bad(f"{where} must be an object")
        self._obj: dict[str, Any] = obj
        self._where = where

    @property
    def where(self) -> str:
        return self._where

    def _get(self, key: str, required: bool) -> Any:
        value = self._obj.get(key)  # absent and null alike
        if value is None and required:
            raise _bad(f"{self._where}.{key} is required")
        return value

    def integer(self, key: str, lo: int = 0, hi: int = 2**63 - 1, required: bool = True) -> Any:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise _bad(f"{self._where}.{key} must be an integer in [{lo}, {hi}]")
        return value

    def text(self, key: str, pattern: re.Pattern[str] | None = None, required: bool = True,
            max_len: int = 1 << 22) -> Any:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > max_len:
            raise _bad(f"{self._where}.{key} must be a string of at most {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise _bad(f"{self._where}.{key} has an invalid form")
        return value

    def id(self, key: str) -> str:
        value = self._get(key, True)
        if not is_id(value):
            raise _bad(f"{self._where}.{key} must be a 32-character lowercase hex ID")
        return str(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise _bad(f"{self._where}.{key} must be a boolean")
        return value

    def array(self, key: str, max_items: int) -> list[Any]:
        value = self._get(key, True)
        if not isinstance(value, list):
            raise _bad(f"{self._where}.{key} must be a list")
        if len(value) > max_items:
            raise ProtocolError(
                ErrorCode.LIMIT_EXCEEDED, f"{self._where}.{key} has more than {max_items} items"
            )
        return value

    def obj(self, key: str, where: str) -> _Fields:
        value = self._get(key, False)
        return _Fields({} if value is None else value, where)

    def raw(self, key: str) -> Any:
        return self._obj.get(key)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FRAME, message)


def _load(data: bytes | str) -> _Fields:
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(
            ErrorCode.FRAME_TOO_LARGE, f"frame is {len(data)} bytes; at most {MAX_FRAME_BYTES}"
        )
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"frame is not valid JSON: {exc.msg}") from None
    return _Fields(obj, "frame")


def _capability(obj: Any, where: str) -> Capability:
    f = _Fields(obj, where)
    return Capability(
        f.text("handler", NAME_RE), f.text("handler_version", NAME_RE),
        f.text("payload_version", NAME_RE),
    )


def _attempt_ref(obj: Any, where: str) -> AttemptRef:
    f = _Fields(obj, where)
    return AttemptRef(f.id("attempt_id"), f.integer("epoch", 1))


def _report(f: _Fields) -> Report:
    report = Report(
        child_pid=f.integer("child_pid", 0, 2**31, required=False),
        exit_code=f.integer("exit_code", -(2**31), 2**31, required=False),
        signal=f.integer("signal", 0, 128, required=False),
        cpu_ms=f.integer("cpu_ms", required=False),
        peak_rss_bytes=f.integer("peak_rss_bytes", required=False),
        kill_reason=f.text("kill_reason", CODE_RE, required=False),
        renewals=f.integer("renewals", required=False),
        kill_age_ms=f.integer("kill_age_ms", 0, MAX_KILL_AGE_MS, required=False),
        reap_ms=f.integer("reap_ms", 0, MAX_KILL_AGE_MS, required=False),
        ended_by=f.text("ended_by", ENDED_BY_RE, required=False),
    )
    if report.kill_reason is None and (report.kill_age_ms is not None
                                       or report.reap_ms is not None):
        raise _bad(f"{f.where}: kill_age_ms and reap_ms need a kill_reason")
    if report.ended_by is not None and (report.kill_reason is None) != (
            report.ended_by == ENDED_COOPERATIVE):
        raise _bad(f"{f.where}: ended_by KILLED needs a kill_reason, COOPERATIVE none")
    return report


def _op(obj: Any, index: int) -> Op:
    where = f"ops[{index}]"
    f = _Fields(obj, where)
    kind = f.text("op", max_len=16)
    msg_id = f.text("msg_id", MSG_ID_RE)
    if kind == "start":
        return StartOp(msg_id, f.id("attempt_id"), f.integer("epoch", 1),
                       f.integer("child_pid", 0, 2**31, required=False))
    if kind == "renew":
        return RenewOp(msg_id, f.id("attempt_id"), f.integer("epoch", 1))
    if kind == "finish":
        outcome_text = f.text("outcome", max_len=16)
        try:
            outcome = Outcome(outcome_text)
        except ValueError:
            raise _bad(f"{where}.outcome must be SUCCEEDED, FAILED or UNKNOWN") from None
        return FinishOp(
            msg_id, f.id("attempt_id"), f.integer("epoch", 1), outcome,
            code=f.text("code", CODE_RE, required=False),
            retryable=f.flag("retryable"),
            result_json=f.text("result_json", required=False),
            details_json=f.text("details_json", required=False),
            report=_report(f.obj("report", f"{where}.report")),
        )
    if kind == "resume":
        refs = f.array("attempts", 2 * MAX_CAPACITY)
        return ResumeOp(msg_id, tuple(_attempt_ref(r, f"{where}.attempts") for r in refs))
    if kind == "drain":
        return DrainOp(msg_id)
    if kind == "claim":
        return ClaimOp(msg_id, f.integer("count", 1, MAX_CAPACITY))
    raise ProtocolError(ErrorCode.UNKNOWN_FRAME_TYPE, f"{where}.op {kind!r} is not an operation")


def decode_client_frame(data: bytes | str) -> ClientFrame:
    """Decode bytes a worker sent. Raises ProtocolError (stable code) on any violation."""
    f = _load(data)
    kind = f.text("type", max_len=32)
    if kind == "request":
        ops = f.array("ops", MAX_BATCH_OPS)
        if not ops:
            raise _bad("frame.ops must not be empty")
        return Request(f.integer("id"), tuple(_op(op, i) for i, op in enumerate(ops)))
    if kind == "credit":
        return Credit(f.integer("credits", 1, 2 * MAX_CAPACITY))
    if kind == "heartbeat":
        return Heartbeat()
    if kind == "hello":
        caps = f.array("capabilities", MAX_CAPABILITIES)
        if not caps:
            raise _bad("frame.capabilities must not be empty")
        return Hello(
            credential_id=f.id("credential_id"),
            credential_secret=f.text("credential_secret", max_len=256),
            instance_id=f.id("instance_id"),
            instance_secret=f.text("instance_secret", max_len=256),
            queue_id=f.id("queue_id"),
            capabilities=tuple(_capability(c, "frame.capabilities") for c in caps),
            capacity=f.integer("capacity", 1, MAX_CAPACITY),
            protocol=f.integer("protocol", 1, 1 << 16),
            agent=f.text("agent", NAME_RE, required=False),
        )
    raise ProtocolError(ErrorCode.UNKNOWN_FRAME_TYPE, f"frame type {kind!r} is not known")


def _op_result(obj: Any) -> OpResult:
    f = _Fields(obj, "results[]")
    attempts = None
    if f.raw("attempts") is not None:
        attempts = tuple(
            ResumeEntry(
                e.text("attempt_id"), e.text("status", max_len=16),
                e.integer("lease_ms", required=False), e.text("reason", required=False, max_len=64),
            )
            for e in (_Fields(a, "attempts[]") for a in f.array("attempts", 2 * MAX_CAPACITY))
        )
    claimed = None
    if f.raw("claimed") is not None:
        claimed = tuple(_reservation(r) for r in f.array("claimed", MAX_CAPACITY))
    code = f.text("error_code", required=False, max_len=MAX_CODE_LEN)
    disposition = f.text("disposition", required=False, max_len=32)
    state = f.text("task_state", required=False, max_len=32)
    return OpResult(
        msg_id=f.text("msg_id"),
        ok=f.flag("ok"),
        error_code=_enum(ErrorCode, code),
        error_message=f.text("error_message", required=False, max_len=4096),
        lease_ms=f.integer("lease_ms", required=False),
        disposition=_enum(Disposition, disposition),
        task_state=_enum(TaskState, state),
        attempts=attempts,
        claimed=claimed,
        credited=f.integer("credited", 0, 2 * MAX_CAPACITY, required=False),
    )


def _enum(kind: Any, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise _bad(f"{value!r} is not a known {kind.__name__}") from None


def _reservation(obj: Any) -> Reservation:
    f = _Fields(obj, "reservations[]")
    return Reservation(
        attempt_id=f.id("attempt_id"),
        task_id=f.id("task_id"),
        epoch=f.integer("epoch", 1),
        attempt_number=f.integer("attempt_number", 1),
        capability=_capability(f.raw("capability"), "reservations[].capability"),
        payload=f.raw("payload"),
        idempotency=_enum(Idempotency, f.text("idempotency", max_len=32)),
        lease_ttl_ms=f.integer("lease_ttl_ms", 1),
        attempt_timeout_ms=f.integer("attempt_timeout_ms", 1),
        deadline_at_ms=f.integer("deadline_at_ms"),
        # Absent from an older server: its cancels kill at once.
        cancel_grace_ms=f.integer("cancel_grace_ms", MIN_CANCEL_GRACE_MS, MAX_CANCEL_GRACE_MS,
                                  required=False) or 0,
        lease_ms=f.integer("lease_ms", required=False),
    )


def decode_server_frame(data: bytes | str) -> ServerFrame:
    """Decode bytes the server sent. Raises ProtocolError on any violation."""
    f = _load(data)
    kind = f.text("type", max_len=32)
    if kind == "response":
        results = f.array("results", MAX_BATCH_OPS)
        return Response(f.integer("id"), tuple(_op_result(r) for r in results))
    if kind == "reserve":
        items = f.array("reservations", MAX_RESERVATIONS_PER_FRAME)
        return Reserve(tuple(_reservation(r) for r in items))
    if kind == "cancel":
        return Cancel(f.id("attempt_id"), f.integer("epoch", 1), f.text("reason", max_len=64))
    if kind == "heartbeat_ack":
        return HeartbeatAck()
    if kind == "welcome":
        return Welcome(
            session_id=f.id("session_id"),
            session_ttl_ms=f.integer("session_ttl_ms", 1),
            heartbeat_ms=f.integer("heartbeat_ms", 1),
            kill_grace_ms=f.integer("kill_grace_ms"),
            server_time_ms=f.integer("server_time_ms"),
            max_batch_ops=f.integer("max_batch_ops", 1, required=False) or MAX_BATCH_OPS,
        )
    if kind == "error":
        return ErrorFrame(
            _enum(ErrorCode, f.text("code", max_len=MAX_CODE_LEN)),
            f.text("message", max_len=4096), f.flag("retryable"), f.flag("fatal", True),
        )
    raise ProtocolError(ErrorCode.UNKNOWN_FRAME_TYPE, f"frame type {kind!r} is not known")
