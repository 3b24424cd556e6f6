"""Frames round-trip, and every violation is a ProtocolError with a stable code."""

import orjson
import pytest

from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.frames import (
    AttemptRef,
    Cancel,
    Credit,
    DrainOp,
    ErrorFrame,
    FinishOp,
    Heartbeat,
    HeartbeatAck,
    Hello,
    OpResult,
    RenewOp,
    Report,
    Request,
    Reservation,
    Reserve,
    Response,
    ResumeEntry,
    ResumeOp,
    StartOp,
    Welcome,
    decode_client_frame,
    decode_server_frame,
    encode,
)
from orbit_wire.limits import MAX_BATCH_OPS, MAX_FRAME_BYTES
from orbit_wire.model import Capability, Disposition, Idempotency, Outcome, TaskState

A = "a" * 32
B = "b" * 32
CAP = Capability("text.normalize", "v1", "v1")

CLIENT_FRAMES = [
    Hello(A, "s", B, "t", A, (CAP,), 4),
    Credit(3),
    Heartbeat(),
    Request(
        7,
        (
            ResumeOp("m1", (AttemptRef(A, 2),)),
            StartOp("m2", A, 2, child_pid=42),
            RenewOp("m3", A, 2),
            FinishOp("m4", A, 2, Outcome.SUCCEEDED, result_json='{"n":1.10}',
                     report=Report(child_pid=42, cpu_ms=3, renewals=1)),
            FinishOp("m5", B, 1, Outcome.FAILED, code="OBJECT_REJECTED", details_json="{}"),
            DrainOp("m6"),
            FinishOp("m7", B, 1, Outcome.UNKNOWN, code="LEASE_LOST",
                     report=Report(child_pid=9, signal=9, cpu_ms=280, peak_rss_bytes=4096,
                                   kill_reason="ATTEMPT_TIMEOUT", kill_age_ms=3, reap_ms=12)),
        ),
    ),
]

SERVER_FRAMES = [
    Welcome(A, 15000, 5000, 2000, 1_700_000_000_000),
    Reserve((Reservation(A, B, 1, 1, CAP, {"text": "x"}, Idempotency.IDEMPOTENT, 30000, 1000, 5),)),
    Response(
        7,
        (
            OpResult("m1", True, attempts=(ResumeEntry(A, "RUNNING", lease_ms=900),)),
            OpResult("m2", True, lease_ms=1000),
            OpResult("m4", True, disposition=Disposition.ACCEPTED, task_state=TaskState.SUCCEEDED),
            OpResult("m5", False, error_code=ErrorCode.STALE_EPOCH, error_message="stale"),
        ),
    ),
    Cancel(A, 1, "TASK_CANCELLED"),
    HeartbeatAck(),
    ErrorFrame(ErrorCode.OUT_OF_ORDER, "hello first"),
]


@pytest.mark.parametrize("frame", CLIENT_FRAMES, ids=lambda f: f.type)
def test_client_frames_round_trip(frame: object) -> None:
    assert decode_client_frame(encode(frame)) == frame  # type: ignore[arg-type]


@pytest.mark.parametrize("frame", SERVER_FRAMES, ids=lambda f: f.type)
def test_server_frames_round_trip(frame: object) -> None:
    assert decode_server_frame(encode(frame)) == frame  # type: ignore[arg-type]


def test_result_text_is_carried_exactly() -> None:
    text = '{"big": 1.000000000000000000001, "id": 9007199254740993}'
    frame = Request(1, (FinishOp("m", A, 1, Outcome.SUCCEEDED, result_json=text),))
    decoded = decode_client_frame(encode(frame))
    assert isinstance(decoded, Request)
    op = decoded.ops[0]
    assert isinstance(op, FinishOp) and op.result_json == text


def test_preencoded_payload_is_embedded_unchanged() -> None:
    raw = b'{"n":12345678901234567890}'
    frame = Reserve(
        (Reservation(A, B, 1, 1, CAP, orjson.Fragment(raw), Idempotency.IDEMPOTENT, 1, 1, 1),)
    )
    assert raw in encode(frame)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"not json", ErrorCode.BAD_FRAME),
        (b"[]", ErrorCode.BAD_FRAME),
        (b'{"type": "teleport"}', ErrorCode.UNKNOWN_FRAME_TYPE),
        (b'{"type": "credit", "credits": 0}', ErrorCode.BAD_FRAME),
        (b'{"type": "credit", "credits": true}', ErrorCode.BAD_FRAME),
        (b'{"type": "request", "id": 1, "ops": []}', ErrorCode.BAD_FRAME),
        (b'{"type": "request", "id": 1, "ops": [{"op": "fly", "msg_id": "m"}]}',
         ErrorCode.UNKNOWN_FRAME_TYPE),
        (b'{"type": "request", "id": 1, "ops": [{"op": "renew", "msg_id": "bad id!",'
         b' "attempt_id": "' + A.encode() + b'", "epoch": 1}]}', ErrorCode.BAD_FRAME),
        (b'{"type": "request", "id": 1, "ops": [{"op": "renew", "msg_id": "m",'
         b' "attempt_id": "XYZ", "epoch": 1}]}', ErrorCode.BAD_FRAME),
        (orjson.dumps({"type": "request", "id": 1, "ops": [
            {"op": "drain", "msg_id": f"m{i}"} for i in range(MAX_BATCH_OPS + 1)]}),
         ErrorCode.LIMIT_EXCEEDED),
        (b" " * (MAX_FRAME_BYTES + 1), ErrorCode.FRAME_TOO_LARGE),
    ],
)
def test_bad_client_frames(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_client_frame(data)
    assert info.value.code == code


def test_hello_needs_capabilities() -> None:
    hello = orjson.loads(encode(CLIENT_FRAMES[0]))
    hello["capabilities"] = []
    with pytest.raises(ProtocolError):
        decode_client_frame(orjson.dumps(hello))


def _kill_finish(**report: object) -> bytes:
    return orjson.dumps({"type": "request", "id": 1, "ops": [{
        "op": "finish", "msg_id": "m1", "attempt_id": A, "epoch": 1, "outcome": "UNKNOWN",
        "code": "LEASE_LOST", "report": report}]})


@pytest.mark.parametrize("report", [
    {"kill_reason": "LEASE_LOST", "kill_age_ms": -1},
    {"kill_reason": "LEASE_LOST", "kill_age_ms": 86_400_001},
    {"kill_reason": "LEASE_LOST", "reap_ms": 1.5},
    {"kill_reason": "LEASE_LOST", "reap_ms": True},
    {"kill_age_ms": 3},  # a kill's timing without the kill
    {"reap_ms": 3, "signal": 9},
    {"ended_by": "KILLED"},  # a kill without its reason
    {"ended_by": "COOPERATIVE", "kill_reason": "TASK_CANCELLED"},  # no kill ended it
    {"ended_by": "cooperative"},
])
def test_bad_kill_timing_is_a_bad_frame(report: dict[str, object]) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_client_frame(_kill_finish(**report))
    assert info.value.code == ErrorCode.BAD_FRAME


def test_kill_timing_decodes() -> None:
    request = decode_client_frame(_kill_finish(kill_reason="LEASE_LOST", kill_age_ms=0,
                                               reap_ms=86_400_000))
    assert isinstance(request, Request) and isinstance(request.ops[0], FinishOp)
    assert (request.ops[0].report.kill_age_ms, request.ops[0].report.reap_ms) == (0, 86_400_000)


def test_ended_by_and_cancel_grace_decode() -> None:
    request = decode_client_frame(_kill_finish(kill_reason="TASK_CANCELLED", ended_by="KILLED"))
    assert isinstance(request, Request) and isinstance(request.ops[0], FinishOp)
    assert request.ops[0].report.ended_by == "KILLED"
    request = decode_client_frame(_kill_finish(ended_by="COOPERATIVE"))
    assert isinstance(request, Request) and isinstance(request.ops[0], FinishOp)
    assert request.ops[0].report.ended_by == "COOPERATIVE"
    res = Reservation(A, B, 1, 1, CAP, {}, Idempotency.IDEMPOTENT, 30000, 1000, 5,
                      cancel_grace_ms=60_000)
    (decoded,) = decode_server_frame(encode(Reserve((res,)))).reservations  # type: ignore[union-attr]
    assert decoded.cancel_grace_ms == 60_000
    # An older server says nothing: its cancels kill at once.
    wire = orjson.loads(encode(Reserve((res,))))
    del wire["reservations"][0]["cancel_grace_ms"]
    (older,) = decode_server_frame(orjson.dumps(wire)).reservations  # type: ignore[union-attr]
    assert older.cancel_grace_ms == 0
    wire["reservations"][0]["cancel_grace_ms"] = 60_001
    with pytest.raises(ProtocolError):
        decode_server_frame(orjson.dumps(wire))
