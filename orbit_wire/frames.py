"""Worker protocol frames (docs/protocol.md): frozen msgspec Structs, decoded once at the edge.

Every frame is one JSON object whose ``type`` names it, and every operation inside a request
names itself with ``op``: tagged unions, so ``decode_client_frame`` (what the server calls on
a worker's bytes) and ``decode_server_frame`` (what the worker calls on the server's) each
decode and check a whole frame in one pass with one ``msgspec.json.Decoder``. The limits stand
beside the fields (``Annotated[int, Meta(ge=1, le=...)]``); the rules a field type cannot say
(a kill report's fields that go together) are checked right after, in ``_check``. Both
decoders raise ProtocolError with a stable code and never return a half-checked frame.

``encode`` turns any frame into bytes, written as the protocol always has: fields in order,
``None`` left out, ``type`` and ``op`` last. Results and details travel as JSON *text*
(``result_json``) so number text survives unchanged; a reservation's payload is written as
given, a ``msgspec.Raw`` (the server's stored text, embedded unchanged) or a JSON value, and
decoded as a JSON value.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, TypeVar

import msgspec
from msgspec import Meta, Raw, Struct

from .errors import ErrorCode, ProtocolError
from .explain import Refusal, explain
from .labels import Labels
from .limits import (
    INT64_MAX,
    MAX_BATCH_OPS,
    MAX_CANCEL_GRACE_MS,
    MAX_CAPABILITIES,
    MAX_CAPACITY,
    MAX_FEATURES,
    MAX_FRAME_BYTES,
    MAX_KILL_AGE_MS,
    MAX_PROGRESS_BYTES,
    MAX_RESERVATIONS_PER_FRAME,
    MIN_CANCEL_GRACE_MS,
)
from .model import Capability, Disposition, Idempotency, Outcome, TaskState
from .names import Code, Id, MsgId, Name, whole
from .policy import CapabilityPolicies

T = TypeVar("T")

# report.ended_by: how the child of a cancelled attempt ended (docs/protocol.md).
ENDED_COOPERATIVE = "COOPERATIVE"
ENDED_KILLED = "KILLED"

# Field types: every integer on the wire is a signed 64-bit one, non-negative unless it says.
Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
Positive = Annotated[int, Meta(ge=1, le=INT64_MAX)]
Pid = Annotated[int, Meta(ge=0, le=2**31)]
ExitCode = Annotated[int, Meta(ge=-(2**31), le=2**31)]
Signal = Annotated[int, Meta(ge=0, le=128)]
KillMs = Annotated[int, Meta(ge=0, le=MAX_KILL_AGE_MS)]
Slots = Annotated[int, Meta(ge=1, le=MAX_CAPACITY)]
Grace = Annotated[int, Meta(ge=MIN_CANCEL_GRACE_MS, le=MAX_CANCEL_GRACE_MS)]
Secret = Annotated[str, Meta(max_length=256)]
Reason = Annotated[str, Meta(max_length=64)]
Status = Annotated[str, Meta(max_length=16)]
Message = Annotated[str, Meta(max_length=4096)]
JsonText = Annotated[str, Meta(max_length=1 << 22)]  # JSON text, checked by the value rules
EndedBy = Annotated[str, Meta(pattern=whole(f"{ENDED_COOPERATIVE}|{ENDED_KILLED}"))]
ProgressText = Annotated[str, Meta(max_length=MAX_PROGRESS_BYTES)]  # JSON text, value rules
# Protocol features (``hello`` asks, ``welcome`` grants); a name the server does not know is
# not granted, never refused.
Features = Annotated[tuple[Annotated[str, Meta(max_length=32)], ...],
                     Meta(max_length=MAX_FEATURES)]


def _written(value: Any) -> Any:
    """A default that is still written: msgspec leaves out a field equal to its plain default
    (here, None), never one made by a factory of anything but an empty container."""
    return msgspec.field(default_factory=lambda: value)


class _Part(Struct, frozen=True, omit_defaults=True):
    """A part of a frame: fields in order, None left out."""


class _Frame(_Part, frozen=True, tag_field="type"):
    type: ClassVar[str]  # the tag (set below for each frame)


class _Op(_Part, frozen=True, tag_field="op"):
    op: ClassVar[str]


# --------------------------------------------------------------------------- shared parts


class AttemptRef(_Part, frozen=True):
    attempt_id: Id
    epoch: Positive


class Report(_Part, frozen=True):
    """What the worker observed of the child that ran an attempt (all optional)."""

    child_pid: Pid | None = None
    exit_code: ExitCode | None = None
    signal: Signal | None = None
    cpu_ms: Count | None = None
    peak_rss_bytes: Count | None = None
    kill_reason: Code | None = None
    renewals: Count | None = None
    # A kill's timing, both durations on the worker's monotonic clock (docs/protocol.md):
    # how long before this request was sent the SIGKILL went out, and how long the killed
    # child took to be reaped after it (None until the reap is known).
    kill_age_ms: KillMs | None = None
    reap_ms: KillMs | None = None
    # After a cancel reached the attempt: COOPERATIVE (the child ended by itself within the
    # cancel grace) or KILLED (SIGKILLed: after the grace, or at a lease kill that came first).
    ended_by: EndedBy | None = None
    # OOM kills the kernel counted in the child's memory cgroup while it lived (a cgroup
    # memory limit, --child-memory-max); None where no cgroup holds the limit.
    oom_kills: Count | None = None


class Progress(_Part, frozen=True):
    """A handler's latest progress (``execution.progress``): the fraction done and its
    details, JSON text checked by the value rules. The last details of an attempt that did
    not succeed are the next attempt's checkpoint."""

    fraction: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    details_json: ProgressText | None = None


# --------------------------------------------------------------------------- worker → server


class Hello(_Frame, frozen=True, tag="hello"):
    credential_id: Id
    credential_secret: Secret
    instance_id: Id
    instance_secret: Secret
    queue_id: Id
    capabilities: Annotated[tuple[Capability, ...], Meta(min_length=1,
                                                         max_length=MAX_CAPABILITIES)]
    capacity: Slots
    protocol: Annotated[int, Meta(ge=1, le=1 << 16)] = _written(1)
    # The worker runtime's name and version (e.g. "orbit-supervise/0.1.0"), for operators.
    agent: Name | None = None
    features: Features = ()
    # The policy each capability declares (only those that declare one; docs/protocol.md
    # "Declared policies"): the server registers it for the queue, or refuses a hello whose
    # declaration differs from the one registered (POLICY_CONFLICT).
    policies: CapabilityPolicies | None = None
    # What this worker's host offers; a task that ``requires`` labels is reserved only for a
    # worker whose labels include them.
    labels: Labels | None = None


class Credit(_Frame, frozen=True, tag="credit"):
    """Grants ``credits`` more reservations; each reservation the server sends spends one."""

    credits: Annotated[int, Meta(ge=1, le=2 * MAX_CAPACITY)]


class Heartbeat(_Frame, frozen=True, tag="heartbeat"):
    pass


class ResumeOp(_Op, frozen=True, tag="resume"):
    msg_id: MsgId
    attempts: Annotated[tuple[AttemptRef, ...], Meta(max_length=2 * MAX_CAPACITY)]


class StartOp(_Op, frozen=True, tag="start"):
    msg_id: MsgId
    attempt_id: Id
    epoch: Positive
    child_pid: Pid | None = None


class RenewOp(_Op, frozen=True, tag="renew"):
    msg_id: MsgId
    attempt_id: Id
    epoch: Positive
    # The handler's latest progress since the last renewal that carried one (None: no news).
    progress: Progress | None = None


class FinishOp(_Op, frozen=True, tag="finish"):
    msg_id: MsgId
    attempt_id: Id
    epoch: Positive
    outcome: Outcome
    code: Code | None = None
    retryable: bool = _written(False)
    result_json: JsonText | None = None  # exact JSON text; only with SUCCEEDED
    details_json: JsonText | None = None  # exact JSON text; only with FAILED
    report: Report = msgspec.field(default_factory=Report)
    # The handler's latest progress that no renewal carried yet (None: no news).
    progress: Progress | None = None


class DrainOp(_Op, frozen=True, tag="drain"):
    msg_id: MsgId


class ClaimOp(_Op, frozen=True, tag="claim"):
    """Claim and start up to ``count`` tasks for free slots, in the request's transaction.

    Applied only if every ``finish`` before it in the request was answered ok. The answer's
    ``claimed`` reservations are already started (each carries ``lease_ms``); slots it could
    not fill become connection credit (``credited``), served later by ``reserve`` frames."""

    msg_id: MsgId
    count: Slots


class DeclineOp(_Op, frozen=True, tag="decline"):
    """Give back a granted attempt whose handler never started (feature ``grant``): the
    grant arrived already expired, beyond the worker's bound, for a capability it does not
    serve, or after it began to drain or stop. The attempt is released and no attempt is
    spent; a grant that was confirmed (renewed, finished, resumed) cannot be declined."""

    msg_id: MsgId
    attempt_id: Id
    epoch: Positive
    reason: Reason


Op = ResumeOp | StartOp | RenewOp | FinishOp | DrainOp | ClaimOp | DeclineOp


class Request(_Frame, frozen=True, tag="request"):
    """A control request: a batch of operations, answered by one Response with the same id."""

    id: Count
    ops: Annotated[tuple[Op, ...], Meta(min_length=1, max_length=MAX_BATCH_OPS)]


ClientFrame = Hello | Credit | Heartbeat | Request


# --------------------------------------------------------------------------- server → worker


class Welcome(_Frame, frozen=True, tag="welcome"):
    session_id: Id
    session_ttl_ms: Positive
    heartbeat_ms: Positive
    kill_grace_ms: Count
    server_time_ms: Count
    max_batch_ops: Positive = _written(MAX_BATCH_OPS)
    features: Features = ()


class Reservation(_Part, frozen=True):
    attempt_id: Id
    task_id: Id
    epoch: Positive
    attempt_number: Positive
    capability: Capability
    payload: Any  # a JSON value; to send, msgspec.Raw holding JSON text is written unchanged
    idempotency: Idempotency
    lease_ttl_ms: Positive
    attempt_timeout_ms: Positive
    deadline_at_ms: Count  # the task's total deadline, wall-clock ms
    # Only in a ``claim`` answer: the attempt is already started with this lease (0: the
    # lease is gone, e.g. a replayed answer after expiry; the handler must not run).
    lease_ms: Count | None = None
    # How long a cancel lets the handler stop by itself before the SIGKILL (0: at once).
    # Absent from an older server: its cancels kill at once.
    cancel_grace_ms: Grace = _written(0)
    # The last progress details of the task's latest attempt that did not succeed, handed to
    # the handler as ``execution.checkpoint`` (a JSON value; to send, msgspec.Raw). None: none.
    checkpoint: Any = None
    # An attempt that reports no progress for this long is killed (PROGRESS_TIMEOUT).
    progress_timeout_ms: Positive | None = None
    # A workflow node's parents, in declared order: a JSON array of objects {key, task_id,
    # state, result?, code?, details?} (to send, msgspec.Raw). None: not a workflow node.
    parents: Any = None


class Reserve(_Frame, frozen=True, tag="reserve"):
    """Reservations for the worker's credit. With the ``grant`` feature each is already
    started and carries ``lease_ms``, and ``basis`` is how many of the worker's frames the
    server had read before the granting transaction began: the worker counts the lease from
    the instant it sent frame ``basis`` (docs/protocol.md, "Grants")."""

    reservations: Annotated[tuple[Reservation, ...], Meta(max_length=MAX_RESERVATIONS_PER_FRAME)]
    basis: Count | None = None


class ResumeEntry(_Part, frozen=True):
    attempt_id: str
    status: Status  # "RUNNING" (lease_ms set) or "LOST"
    lease_ms: Count | None = None
    reason: Reason | None = None


class OpResult(_Part, frozen=True):
    """The answer to one operation. ``ok`` false carries ``error_code``; fields by op:
    start/renew → lease_ms; finish → disposition, task_state; resume → attempts;
    claim → claimed (started reservations), credited."""

    msg_id: str
    ok: bool = _written(False)
    error_code: ErrorCode | None = None
    error_message: Message | None = None
    lease_ms: Count | None = None
    disposition: Disposition | None = None
    task_state: TaskState | None = None
    attempts: Annotated[tuple[ResumeEntry, ...], Meta(max_length=2 * MAX_CAPACITY)] | None = None
    claimed: Annotated[tuple[Reservation, ...], Meta(max_length=MAX_CAPACITY)] | None = None
    credited: Annotated[int, Meta(ge=0, le=2 * MAX_CAPACITY)] | None = None


class Response(_Frame, frozen=True, tag="response"):
    id: Count
    results: Annotated[tuple[OpResult, ...], Meta(max_length=MAX_BATCH_OPS)]


class Cancel(_Frame, frozen=True, tag="cancel"):
    attempt_id: Id
    epoch: Positive
    reason: Reason


class HeartbeatAck(_Frame, frozen=True, tag="heartbeat_ack"):
    pass


class ErrorFrame(_Frame, frozen=True, tag="error"):
    """A connection-level error. ``fatal`` means the server closes the connection after it."""

    code: ErrorCode
    message: Message
    retryable: bool = _written(False)
    fatal: bool = _written(True)


ServerFrame = Welcome | Reserve | Response | Cancel | HeartbeatAck | ErrorFrame

# ``frame.type`` and ``op.op`` read as the tag each class is written with.
for _kind in (Hello, Credit, Heartbeat, Request, Welcome, Reserve, Response, Cancel,
              HeartbeatAck, ErrorFrame):
    _kind.type = str(_kind.__struct_config__.tag)
for _op in (ResumeOp, StartOp, RenewOp, FinishOp, DrainOp, ClaimOp, DeclineOp):
    _op.op = str(_op.__struct_config__.tag)


# --------------------------------------------------------------------------- encoding

_ENCODER = msgspec.json.Encoder()


def encode(frame: ClientFrame | ServerFrame) -> bytes:
    """Serialize a frame. A reservation's payload may be ``msgspec.Raw`` (pre-encoded)."""
    if type(frame) is Request:
        ops = [Raw(_tag_last(_ENCODER.encode(op))) for op in frame.ops]
        return _ENCODER.encode({"id": frame.id, "ops": ops, "type": Request.type})
    return _tag_last(_ENCODER.encode(frame))


def _tag_last(data: bytes) -> bytes:
    """msgspec writes a tag first (``{"type":"credit","credits":3}``); the protocol has always
    written it last (``{"credits":3,"type":"credit"}``), and its bytes stay as they were."""
    end = data.index(b'"', data.index(b':"') + 2) + 1  # just after the tag's value
    if end + 1 == len(data):
        return data
    return b"{" + data[end + 1 : -1] + b"," + data[1:end] + b"}"


# --------------------------------------------------------------------------- decoding

_CLIENT: msgspec.json.Decoder[ClientFrame] = msgspec.json.Decoder(ClientFrame)
_SERVER: msgspec.json.Decoder[ServerFrame] = msgspec.json.Decoder(ServerFrame)
_CODE_OF = {Refusal.VALUE: ErrorCode.BAD_FRAME, Refusal.UNKNOWN_TAG: ErrorCode.UNKNOWN_FRAME_TYPE,
            Refusal.TOO_MANY: ErrorCode.LIMIT_EXCEEDED}


def decode_client_frame(data: bytes | str) -> ClientFrame:
    """Decode bytes a worker sent. Raises ProtocolError (stable code) on any violation."""
    frame = decode_checked(_CLIENT, ClientFrame, data)
    if type(frame) is Request:
        for index, op in enumerate(frame.ops):
            if type(op) is FinishOp:
                _check(op.report, f"frame.ops[{index}].report")
    elif type(frame) is Hello and frame.policies:
        _check_policies(frame)
    return frame


def decode_server_frame(data: bytes | str) -> ServerFrame:
    """Decode bytes the server sent. Raises ProtocolError on any violation."""
    return decode_checked(_SERVER, ServerFrame, data)


def decode_checked(decoder: msgspec.json.Decoder[T], kind: Any, data: bytes | str,
                   what: str = "frame", limit: int | None = MAX_FRAME_BYTES) -> T:
    """``decoder.decode(data)`` for a message of the tagged union ``kind``, within ``limit``
    bytes (None: any size); ProtocolError with a stable code and a message naming the field
    otherwise."""
    if limit is not None and len(data) > limit:
        raise ProtocolError(
            ErrorCode.FRAME_TOO_LARGE, f"{what} is {len(data)} bytes; at most {limit}"
        )
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        refused = explain(exc, kind, _parsed(data), what)
        raise ProtocolError(_CODE_OF[refused.refusal], refused.message) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # older msgspec: the latter
        raise _bad(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise _bad(f"{what} is nested too deeply") from None


def _parsed(data: bytes | str) -> Any:
    """The refused frame as plain JSON, for its explanation: the standard library's parser
    takes what msgspec refuses to hold (1e400, NaN); None if even that fails."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _check(report: Report, where: str) -> None:
    """The report's fields that go together: a kill's timing needs the kill, and ``ended_by``
    says KILLED exactly when there is a kill reason."""
    if report.kill_reason is None and (report.kill_age_ms is not None
                                       or report.reap_ms is not None):
        raise _bad(f"{where}: kill_age_ms and reap_ms need a kill_reason")
    if report.ended_by is not None and (report.kill_reason is None) != (
            report.ended_by == ENDED_COOPERATIVE):
        raise _bad(f"{where}: ended_by KILLED needs a kill_reason, COOPERATIVE none")


def _check_policies(hello: Hello) -> None:
    """Each declared policy names one of the hello's capabilities, once."""
    assert hello.policies is not None
    offered = set(hello.capabilities)
    seen: set[Capability] = set()
    for index, declared in enumerate(hello.policies):
        if declared.capability not in offered or declared.capability in seen:
            raise _bad(f"frame.policies[{index}]: capability {declared.capability} is not "
                       "one of the hello's capabilities, or is declared twice")
        seen.add(declared.capability)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FRAME, message)
