"""The worker protocol on the wire, pinned byte for byte (docs/protocol.md "Frames").

Every frame type of both directions encodes to exactly the bytes below and decodes back to
its frame; representative bad input is refused with its stable code (a ProtocolError); and
what the decoders accept beyond the encoder's own output (unknown fields, null or absent
optional fields, duplicate keys, values of any depth within the limits) decodes as pinned
here. The codec underneath may change; these bytes and these answers may not.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
import pytest

from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.frames import (
    AttemptRef,
    Cancel,
    ClaimOp,
    ClientFrame,
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
    ServerFrame,
    StartOp,
    Welcome,
    decode_client_frame,
    decode_server_frame,
    encode,
)
from orbit_wire.limits import MAX_FRAME_BYTES
from orbit_wire.model import Capability, Disposition, Idempotency, Outcome, TaskState

# A payload the server sends as stored JSON text, embedded without re-encoding.
PRE = msgspec.Raw

A = "a" * 32
B = "b" * 32
C = "0123456789abcdef" * 2
CAP = Capability("text.normalize", "v1", "v1")
CAP2 = Capability("img/resize:x", "2.0-beta", "p_1")
# Escapes and characters an encoder may write differently: quotes, backslashes, control
# characters, DEL, non-ASCII, U+2028 and a closing script tag.
ODD = 'tab\there "q" back\\slash é ☃ \u2028 \x00 \x1f \x7f </script>'
FULL_REPORT = Report(child_pid=4242, exit_code=-9, signal=9, cpu_ms=280, peak_rss_bytes=4096,
                     kill_reason="LEASE_LOST", renewals=3, kill_age_ms=12, reap_ms=4,
                     ended_by="KILLED")
RESULT = '{"n": 1.10, "big": 12345678901234567890, "s": "é\\u00e9"}'

CLIENT_FRAMES: dict[str, ClientFrame] = {
    "hello": Hello(A, "s3cr3t", B, "inst-secret", C, (CAP, CAP2), 4,
                   agent="orbit-supervise/0.1.0"),
    "hello_minimal": Hello(A, "s", B, "t", C, (CAP,), 1),
    "credit": Credit(3),
    "heartbeat": Heartbeat(),
    "request": Request(7, (
        ResumeOp("m1", (AttemptRef(A, 2), AttemptRef(B, 1))),
        ResumeOp("m1b", ()),
        StartOp("m2", A, 2),
        StartOp("m2b", A, 2, child_pid=42),
        RenewOp("m3", A, 2),
        FinishOp("m4", A, 2, Outcome.SUCCEEDED, result_json=RESULT,
                 report=Report(child_pid=42, cpu_ms=3, renewals=1)),
        FinishOp("m5", B, 1, Outcome.FAILED, code="OBJECT_REJECTED", retryable=True,
                 details_json='{"why":"x"}'),
        FinishOp("m6", B, 1, Outcome.UNKNOWN, code="LEASE_LOST", report=FULL_REPORT),
        FinishOp("m6b", B, 1, Outcome.SUCCEEDED, result_json='"tab\\t"',
                 report=Report(ended_by="COOPERATIVE")),
        DrainOp("m7"),
        ClaimOp("m8", 2),
    )),
}

SERVER_FRAMES: dict[str, ServerFrame] = {
    "welcome": Welcome(C, 15000, 5000, 2000, 1_700_000_000_000),
    "welcome_batch": Welcome(C, 15000, 5000, 2000, 1_700_000_000_000, max_batch_ops=64),
    "reserve": Reserve((
        Reservation(A, B, 1, 1, CAP, PRE(b'{"n":1.10,"big":12345678901234567890}'),
                    Idempotency.IDEMPOTENT, 30000, 1000, 5),
        Reservation(B, A, 3, 2, CAP2, PRE(b'"\\u00e9"'), Idempotency.NON_IDEMPOTENT, 30000,
                    300000, 1_800_000_000_000, cancel_grace_ms=2000),
    )),
    "response": Response(7, (
        OpResult("m1", True, attempts=(ResumeEntry(A, "RUNNING", lease_ms=900),
                                       ResumeEntry(B, "LOST", reason="TASK_CANCELLED"))),
        OpResult("m2", True, lease_ms=1000),
        OpResult("m4", True, disposition=Disposition.ACCEPTED, task_state=TaskState.SUCCEEDED),
        OpResult("m4b", True, disposition=Disposition.EVIDENCE_ONLY,
                 task_state=TaskState.NEEDS_REVIEW),
        OpResult("m5", False, error_code=ErrorCode.STALE_EPOCH, error_message=ODD),
        OpResult("m7", True),
        OpResult("m8", True, credited=1, claimed=(
            Reservation(A, B, 4, 2, CAP, PRE(b"[1,2]"), Idempotency.IDEMPOTENT, 30000, 1000,
                        5, lease_ms=29000, cancel_grace_ms=0),)),
    )),
    "cancel": Cancel(A, 1, "TASK_CANCELLED"),
    "heartbeat_ack": HeartbeatAck(),
    "error": ErrorFrame(ErrorCode.OUT_OF_ORDER, "hello first"),
    "error_retryable": ErrorFrame(ErrorCode.UNAVAILABLE, ODD, retryable=True, fatal=False),
}

WIRE: dict[str, bytes] = {
    "hello": (
        b'{"credential_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","credential_secret":"s3cr3t",'
        b'"instance_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","instance_secret":"inst-secret",'
        b'"queue_id":"0123456789abcdef0123456789abcdef",'
        b'"capabilities":[{"handler":"text.normalize","handler_version":"v1",'
        b'"payload_version":"v1"},{"handler":"img/resize:x","handler_version":"2.0-beta",'
        b'"payload_version":"p_1"}],"capacity":4,"protocol":1,"agent":"orbit-supervise/0.1.0",'
        b'"type":"hello"}'),
    "hello_minimal": (
        b'{"credential_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","credential_secret":"s",'
        b'"instance_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","instance_secret":"t",'
        b'"queue_id":"0123456789abcdef0123456789abcdef",'
        b'"capabilities":[{"handler":"text.normalize","handler_version":"v1",'
        b'"payload_version":"v1"}],"capacity":1,"protocol":1,"type":"hello"}'),
    "credit": (
        b'{"credits":3,"type":"credit"}'),
    "heartbeat": (
        b'{"type":"heartbeat"}'),
    "request": (
        b'{"id":7,"ops":[{"msg_id":"m1",'
        b'"attempts":[{"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":2},'
        b'{"attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":1}],"op":"resume"},'
        b'{"msg_id":"m1b","attempts":[],"op":"resume"},{"msg_id":"m2",'
        b'"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":2,"op":"start"},'
        b'{"msg_id":"m2b","attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":2,'
        b'"child_pid":42,"op":"start"},{"msg_id":"m3",'
        b'"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":2,"op":"renew"},{"msg_id":"m4",'
        b'"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":2,"outcome":"SUCCEEDED",'
        b'"retryable":false,"result_json":"{\\"n\\": 1.10, \\"big\\": 12345678901234567890,'
        b' \\"s\\": \\"\xc3\xa9\\\\u00e9\\"}","report":{"child_pid":42,"cpu_ms":3,"renewals":1},'
        b'"op":"finish"},{"msg_id":"m5","attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",'
        b'"epoch":1,"outcome":"FAILED","code":"OBJECT_REJECTED","retryable":true,'
        b'"details_json":"{\\"why\\":\\"x\\"}","report":{},"op":"finish"},{"msg_id":"m6",'
        b'"attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":1,"outcome":"UNKNOWN",'
        b'"code":"LEASE_LOST","retryable":false,"report":{"child_pid":4242,"exit_code":-9,'
        b'"signal":9,"cpu_ms":280,"peak_rss_bytes":4096,"kill_reason":"LEASE_LOST","renewals":3,'
        b'"kill_age_ms":12,"reap_ms":4,"ended_by":"KILLED"},"op":"finish"},{"msg_id":"m6b",'
        b'"attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":1,"outcome":"SUCCEEDED",'
        b'"retryable":false,"result_json":"\\"tab\\\\t\\"","report":{"ended_by":"COOPERATIVE"},'
        b'"op":"finish"},{"msg_id":"m7","op":"drain"},{"msg_id":"m8","count":2,"op":"claim"}],'
        b'"type":"request"}'),
    "welcome": (
        b'{"session_id":"0123456789abcdef0123456789abcdef","session_ttl_ms":15000,'
        b'"heartbeat_ms":5000,"kill_grace_ms":2000,"server_time_ms":1700000000000,'
        b'"max_batch_ops":256,"type":"welcome"}'),
    "welcome_batch": (
        b'{"session_id":"0123456789abcdef0123456789abcdef","session_ttl_ms":15000,'
        b'"heartbeat_ms":5000,"kill_grace_ms":2000,"server_time_ms":1700000000000,'
        b'"max_batch_ops":64,"type":"welcome"}'),
    "reserve": (
        b'{"reservations":[{"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
        b'"task_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":1,"attempt_number":1,'
        b'"capability":{"handler":"text.normalize","handler_version":"v1",'
        b'"payload_version":"v1"},"payload":{"n":1.10,"big":12345678901234567890},'
        b'"idempotency":"IDEMPOTENT","lease_ttl_ms":30000,"attempt_timeout_ms":1000,'
        b'"deadline_at_ms":5,"cancel_grace_ms":0},'
        b'{"attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",'
        b'"task_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":3,"attempt_number":2,'
        b'"capability":{"handler":"img/resize:x","handler_version":"2.0-beta",'
        b'"payload_version":"p_1"},"payload":"\\u00e9","idempotency":"NON_IDEMPOTENT",'
        b'"lease_ttl_ms":30000,"attempt_timeout_ms":300000,"deadline_at_ms":1800000000000,'
        b'"cancel_grace_ms":2000}],"type":"reserve"}'),
    "response": (
        b'{"id":7,"results":[{"msg_id":"m1","ok":true,'
        b'"attempts":[{"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","status":"RUNNING",'
        b'"lease_ms":900},{"attempt_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","status":"LOST",'
        b'"reason":"TASK_CANCELLED"}]},{"msg_id":"m2","ok":true,"lease_ms":1000},{"msg_id":"m4",'
        b'"ok":true,"disposition":"ACCEPTED","task_state":"SUCCEEDED"},{"msg_id":"m4b","ok":true,'
        b'"disposition":"EVIDENCE_ONLY","task_state":"NEEDS_REVIEW"},{"msg_id":"m5","ok":false,'
        b'"error_code":"STALE_EPOCH",'
        b'"error_message":"tab\\there \\"q\\" back\\\\slash \xc3\xa9 \xe2\x98\x83 \xe2\x80\xa8 '
        b'\\u0000 \\u001f \x7f </script>"},{"msg_id":"m7","ok":true},{"msg_id":"m8","ok":true,'
        b'"claimed":[{"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
        b'"task_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":4,"attempt_number":2,'
        b'"capability":{"handler":"text.normalize","handler_version":"v1",'
        b'"payload_version":"v1"},"payload":[1,2],"idempotency":"IDEMPOTENT",'
        b'"lease_ttl_ms":30000,"attempt_timeout_ms":1000,"deadline_at_ms":5,"lease_ms":29000,'
        b'"cancel_grace_ms":0}],"credited":1}],"type":"response"}'),
    "cancel": (
        b'{"attempt_id":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","epoch":1,"reason":"TASK_CANCELLED",'
        b'"type":"cancel"}'),
    "heartbeat_ack": (
        b'{"type":"heartbeat_ack"}'),
    "error": (
        b'{"code":"OUT_OF_ORDER","message":"hello first","retryable":false,"fatal":true,'
        b'"type":"error"}'),
    "error_retryable": (
        b'{"code":"UNAVAILABLE",'
        b'"message":"tab\\there \\"q\\" back\\\\slash \xc3\xa9 \xe2\x98\x83 \xe2\x80\xa8 \\u0000'
        b' \\u001f \x7f </script>","retryable":true,"fatal":false,"type":"error"}'),
}


def _decoded(name: str, frame: ClientFrame | ServerFrame) -> object:
    """The frame a decoder gives back: pre-encoded payloads come back as JSON values."""
    if name == "reserve":
        first, second = frame.reservations  # type: ignore[union-attr]
        return Reserve((_with_payload(first, {"n": 1.1, "big": 12345678901234567890}),
                        _with_payload(second, "é")))
    if name == "response":
        *rest, claim = frame.results  # type: ignore[union-attr]
        (claimed,) = claim.claimed
        return Response(7, (*rest, OpResult("m8", True, credited=1,
                                            claimed=(_with_payload(claimed, [1, 2]),))))
    return frame


def _with_payload(res: Reservation, payload: object) -> Reservation:
    return Reservation(res.attempt_id, res.task_id, res.epoch, res.attempt_number,
                       res.capability, payload, res.idempotency, res.lease_ttl_ms,
                       res.attempt_timeout_ms, res.deadline_at_ms, res.lease_ms,
                       res.cancel_grace_ms)


def test_every_frame_type_is_pinned() -> None:
    kinds = {type(frame) for frame in (*CLIENT_FRAMES.values(), *SERVER_FRAMES.values())}
    assert kinds == {Hello, Credit, Heartbeat, Request, Welcome, Reserve, Response, Cancel,
                     HeartbeatAck, ErrorFrame}
    (request,) = [f for f in CLIENT_FRAMES.values() if isinstance(f, Request)]
    assert {type(op) for op in request.ops} == {ResumeOp, StartOp, RenewOp, FinishOp, DrainOp,
                                               ClaimOp}
    assert set(WIRE) == set(CLIENT_FRAMES) | set(SERVER_FRAMES)


@pytest.mark.parametrize("name", sorted(CLIENT_FRAMES))
def test_client_frame_encodes_to_its_bytes_and_back(name: str) -> None:
    assert encode(CLIENT_FRAMES[name]) == WIRE[name]
    assert decode_client_frame(WIRE[name]) == CLIENT_FRAMES[name]
    assert decode_client_frame(WIRE[name].decode()) == CLIENT_FRAMES[name]


@pytest.mark.parametrize("name", sorted(SERVER_FRAMES))
def test_server_frame_encodes_to_its_bytes_and_back(name: str) -> None:
    frame = SERVER_FRAMES[name]
    assert encode(frame) == WIRE[name]
    assert decode_server_frame(WIRE[name]) == _decoded(name, frame)
    assert decode_server_frame(WIRE[name].decode()) == _decoded(name, frame)


def test_result_text_travels_as_written() -> None:
    request = decode_client_frame(WIRE["request"])
    assert isinstance(request, Request)
    finish = request.ops[5]
    assert isinstance(finish, FinishOp) and finish.result_json == RESULT


# --------------------------------------------------------------------------- refused input

_HELLO: dict[str, Any] = {
    "type": "hello", "credential_id": A, "credential_secret": "s", "instance_id": B,
    "instance_secret": "t", "queue_id": C, "capacity": 1, "protocol": 1,
    "capabilities": [{"handler": "h", "handler_version": "1", "payload_version": "1"}],
}
_RESERVATION: dict[str, Any] = {
    "attempt_id": A, "task_id": B, "epoch": 1, "attempt_number": 1,
    "capability": {"handler": "h", "handler_version": "1", "payload_version": "1"},
    "payload": {"x": 1}, "idempotency": "IDEMPOTENT", "lease_ttl_ms": 1,
    "attempt_timeout_ms": 1, "deadline_at_ms": 0,
}
_WELCOME: dict[str, Any] = {"type": "welcome", "session_id": C, "session_ttl_ms": 1,
                            "heartbeat_ms": 1, "kill_grace_ms": 0, "server_time_ms": 0}


def _hello(**changed: object) -> bytes:
    return orjson.dumps({**_HELLO, **changed})


def _request(*ops: object, **changed: object) -> bytes:
    return orjson.dumps({"type": "request", "id": 1, "ops": list(ops), **changed})


def _finish(**changed: object) -> dict[str, object]:
    return {"op": "finish", "msg_id": "m", "attempt_id": A, "epoch": 1, "outcome": "SUCCEEDED",
            **changed}


def _reserve(**changed: object) -> bytes:
    return orjson.dumps({"type": "reserve", "reservations": [{**_RESERVATION, **changed}]})


def _response(**changed: object) -> bytes:
    return orjson.dumps({"type": "response", "id": 1,
                         "results": [{"msg_id": "m", "ok": True, **changed}]})


def _welcome(**changed: object) -> bytes:
    return orjson.dumps({**_WELCOME, **changed})


_DEEP = b"[" * 2000 + b"]" * 2000
BAD = ErrorCode.BAD_FRAME
UNKNOWN = ErrorCode.UNKNOWN_FRAME_TYPE
LIMIT = ErrorCode.LIMIT_EXCEEDED

BAD_CLIENT_INPUT: list[tuple[bytes, ErrorCode]] = [
    # Not a JSON object, or no known type.
    (b"", BAD), (b"not json", BAD), (b"[]", BAD), (b'"hello"', BAD), (b"{}", BAD),
    (b'\xef\xbb\xbf{"type": "heartbeat"}', BAD),  # a byte order mark
    (b'{"type": 5}', BAD), (b'{"type": "teleport"}', UNKNOWN),
    (b'{"type": "welcome"}', UNKNOWN),  # a server frame
    # Numbers: range, type, NaN, infinity, beyond 64 bits, a duplicate key's last value.
    (b'{"type": "credit"}', BAD), (b'{"type": "credit", "credits": null}', BAD),
    (b'{"type": "credit", "credits": 0}', BAD), (b'{"type": "credit", "credits": 513}', BAD),
    (b'{"type": "credit", "credits": true}', BAD), (b'{"type": "credit", "credits": "3"}', BAD),
    (b'{"type": "credit", "credits": 1.0}', BAD), (b'{"type": "credit", "credits": 1e400}', BAD),
    (b'{"type": "credit", "credits": NaN}', BAD),
    (b'{"type": "credit", "credits": 99999999999999999999999}', BAD),
    (b'{"type": "credit", "credits": 2, "credits": 1000}', BAD),
    # Every occurrence of a duplicate key is checked, the first too.
    (b'{"type": "credit", "credits": 1000, "credits": 2}', BAD),
    # Requests and their operations.
    (b'{"type": "request", "id": 1, "ops": []}', BAD),
    (_request({"op": "drain", "msg_id": "m"}, id=-1), BAD),
    (_request({"op": "drain", "msg_id": "m"}, id=2**63), BAD),
    (b'{"type": "request", "id": 1, "ops": {}}', BAD),
    (b'{"type": "request", "id": 1, "ops": [7]}', BAD),
    (_request(*[{"op": "drain", "msg_id": f"m{i}"} for i in range(257)]), LIMIT),
    (_request({"op": "fly", "msg_id": "m"}), UNKNOWN),
    (_request({"msg_id": "m"}), BAD),
    (_request({"op": "drain"}), BAD),
    (_request({"op": "drain", "msg_id": "bad id!"}), BAD),
    (_request({"op": "drain", "msg_id": "m" * 65}), BAD),
    (_request({"op": "renew", "msg_id": "m", "attempt_id": "XYZ", "epoch": 1}), BAD),
    (_request({"op": "renew", "msg_id": "m", "attempt_id": A.upper(), "epoch": 1}), BAD),
    (_request({"op": "renew", "msg_id": "m", "attempt_id": A + "\n", "epoch": 1}), BAD),
    (_request({"op": "renew", "msg_id": "m", "attempt_id": A, "epoch": 0}), BAD),
    (_request({"op": "start", "msg_id": "m", "attempt_id": A, "epoch": 1, "child_pid": -1}), BAD),
    (_request({"op": "start", "msg_id": "m", "attempt_id": A, "epoch": 1,
               "child_pid": 2**31 + 1}), BAD),
    (_request({"op": "claim", "msg_id": "m", "count": 0}), BAD),
    (_request({"op": "claim", "msg_id": "m", "count": 257}), BAD),
    (_request({"op": "resume", "msg_id": "m", "attempts": [{"attempt_id": A, "epoch": 0}]}), BAD),
    (_request({"op": "resume", "msg_id": "m", "attempts": [{"attempt_id": A, "epoch": 1}] * 513}),
     LIMIT),
    (_request({"op": "resume", "msg_id": "m"}), BAD),
    (_request(_finish(outcome="WON")), BAD),
    (_request(_finish(outcome="succeeded")), BAD),
    (_request(_finish(code="lower")), BAD),
    (_request(_finish(code="LOST\n")), BAD),
    (_request(_finish(code="X" * 65)), BAD),
    (_request(_finish(retryable="yes")), BAD),
    (_request(_finish(retryable=1)), BAD),
    (_request(_finish(result_json={"a": 1})), BAD),
    (_request(_finish(details_json=5)), BAD),
    (_request(_finish(report=[])), BAD),
    (_request(_finish(report={"signal": 129})), BAD),
    (_request(_finish(report={"exit_code": -(2**31) - 1})), BAD),
    (_request(_finish(report={"cpu_ms": -1})), BAD),
    (_request(_finish(report={"kill_reason": "bad"})), BAD),
    (_request(_finish(report={"kill_age_ms": 3})), BAD),
    (_request(_finish(report={"ended_by": "KILLED"})), BAD),
    (_request(_finish(report={"ended_by": "COOPERATIVE", "kill_reason": "TASK_CANCELLED"})),
     BAD),
    (_request(_finish(report={"ended_by": "BOTH", "kill_reason": "X"})), BAD),
    (_request(_finish(report={"ended_by": "cooperative"})), BAD),
    (_request(_finish(report={"kill_reason": "LEASE_LOST", "kill_age_ms": 86_400_001})), BAD),
    (_request(_finish(report={"kill_reason": "LEASE_LOST", "reap_ms": 1.5})), BAD),
    (_request(_finish(report={"kill_reason": "LEASE_LOST", "reap_ms": True})), BAD),
    (_request(_finish(report={"reap_ms": 3, "signal": 9})), BAD),
    # Hellos.
    (_hello(capabilities=[]), BAD),
    (_hello(capabilities=_HELLO["capabilities"] * 33), LIMIT),
    (_hello(capabilities=[{"handler": "h"}]), BAD),
    (_hello(capabilities=[{"handler": "bad name", "handler_version": "1",
                           "payload_version": "1"}]), BAD),
    (_hello(capabilities=[{"handler": "h\n", "handler_version": "1", "payload_version": "1"}]),
     BAD),
    (_hello(capabilities=[{"handler": "h" * 129, "handler_version": "1",
                           "payload_version": "1"}]), BAD),
    (_hello(capabilities=["h/1/1"]), BAD),
    (_hello(capacity=0), BAD), (_hello(capacity=257), BAD), (_hello(protocol=0), BAD),
    (_hello(credential_id="x"), BAD), (_hello(credential_secret="s" * 257), BAD),
    (_hello(agent="has space"), BAD), (_hello(queue_id=None), BAD),
    # Nesting beyond any decoder's depth, invalid UTF-8 and a lone surrogate in a string.
    (b'{"type": "heartbeat", "x": ' + _DEEP + b"}", BAD),
    (b'{"type": "hello", "credential_secret": "\xff"}', BAD),
    (b'{"type": "hello", "credential_secret": "\\ud800"}', BAD),
    (b" " * (MAX_FRAME_BYTES + 1), ErrorCode.FRAME_TOO_LARGE),
]

BAD_SERVER_INPUT: list[tuple[bytes, ErrorCode]] = [
    (b"not json", BAD), (b'{"type": "hello"}', UNKNOWN), (b'{"type": "nope"}', UNKNOWN),
    (_reserve(idempotency="MAYBE"), BAD), (_reserve(cancel_grace_ms=60001), BAD),
    (_reserve(epoch=0), BAD), (_reserve(lease_ttl_ms=0), BAD), (_reserve(task_id="x"), BAD),
    (_reserve(capability=None), BAD), (_reserve(capability={"handler": "h"}), BAD),
    (_reserve(deadline_at_ms=2**63), BAD),
    (orjson.dumps({"type": "reserve", "reservations": [_RESERVATION] * 257}), LIMIT),
    (b'{"type": "reserve"}', BAD),
    (_response(error_code="NOPE"), BAD), (_response(disposition="MAYBE"), BAD),
    (_response(task_state="DONE"), BAD), (_response(error_message="x" * 4097), BAD),
    (_response(lease_ms=-1), BAD), (_response(credited=513), BAD),
    (_response(attempts=[{"attempt_id": "x", "status": "S" * 17}]), BAD),
    (_response(attempts=[{"status": "RUNNING"}]), BAD),
    (_response(claimed=[_RESERVATION] * 257), LIMIT), (_response(ok="yes"), BAD),
    (orjson.dumps({"type": "response", "id": 1, "results": [{"msg_id": "m"}] * 257}), LIMIT),
    (orjson.dumps({"type": "response", "id": 1, "results": [{"ok": True}]}), BAD),
    (_welcome(heartbeat_ms=0), BAD), (_welcome(max_batch_ops=0), BAD),
    (_welcome(session_id="x"), BAD), (_welcome(server_time_ms=-1), BAD),
    (orjson.dumps({"type": "cancel", "attempt_id": A, "epoch": 1, "reason": "R" * 65}), BAD),
    (b'{"type": "error", "code": "NOPE", "message": "m"}', BAD),
    (b'{"type": "error", "code": "BAD_FRAME"}', BAD),
    (b'{"type": "error", "code": "BAD_FRAME", "message": "m", "fatal": "no"}', BAD),
    (b'{"type": "heartbeat_ack", "x": ' + _DEEP + b"}", BAD),
    (b" " * (MAX_FRAME_BYTES + 1), ErrorCode.FRAME_TOO_LARGE),
]


REFUSED = [(decode_client_frame, data, code) for data, code in BAD_CLIENT_INPUT] + [
    (decode_server_frame, data, code) for data, code in BAD_SERVER_INPUT]


@pytest.mark.parametrize(("decode", "data", "code"), REFUSED,
                         ids=[f"{d.__name__[7]}{i}" for i, (d, _, _) in enumerate(REFUSED)])
def test_bad_input_is_refused_with_its_code(decode: Any, data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(data)
    assert info.value.code is code, info.value


# --------------------------------------------------------------------------- accepted input

_CAP_H = Capability("h", "1", "1")
_MINIMAL_HELLO = Hello(A, "s", B, "t", C, (_CAP_H,), 1)
_MINIMAL_RESERVATION = Reservation(A, B, 1, 1, _CAP_H, {"x": 1}, Idempotency.IDEMPOTENT, 1, 1,
                                   0)

ACCEPTED_CLIENT_INPUT: list[tuple[bytes, ClientFrame]] = [
    # Unknown fields are ignored (a newer worker may say more); so is their depth.
    (_hello(extra={"x": [1, 2]}, more=[[[[[[[[[[1]]]]]]]]]]), _MINIMAL_HELLO),
    (_hello(agent=None), _MINIMAL_HELLO),
    (_hello(agent="orbit-supervise/0.2"), Hello(A, "s", B, "t", C, (_CAP_H,), 1,
                                                agent="orbit-supervise/0.2")),
    (b'{"credits": 1, "type": "credit"}', Credit(1)),
    (b'{"type": "credit", "credits": 1, "credits": 2}', Credit(2)),
    (b' \n{"type": "heartbeat"}\t ', Heartbeat()),
    (_request({"op": "start", "msg_id": "m", "attempt_id": A, "epoch": 1, "child_pid": None}),
     Request(1, (StartOp("m", A, 1),))),
    (_request({"op": "start", "msg_id": "m", "attempt_id": A, "epoch": 2**63 - 1,
               "child_pid": 2**31}), Request(1, (StartOp("m", A, 2**63 - 1, child_pid=2**31),))),
    (_request(_finish()), Request(1, (FinishOp("m", A, 1, Outcome.SUCCEEDED),))),
    (_request(_finish(report={}, code=None, result_json=None, details_json=None)),
     Request(1, (FinishOp("m", A, 1, Outcome.SUCCEEDED),))),
    (_request(_finish(report={"kill_reason": "LEASE_LOST", "kill_age_ms": 0,
                              "reap_ms": 86_400_000, "exit_code": -(2**31)})),
     Request(1, (FinishOp("m", A, 1, Outcome.SUCCEEDED, report=Report(
         exit_code=-(2**31), kill_reason="LEASE_LOST", kill_age_ms=0, reap_ms=86_400_000)),))),
    (_request({"op": "resume", "msg_id": "m", "attempts": []}),
     Request(1, (ResumeOp("m", ()),))),
]

ACCEPTED_SERVER_INPUT: list[tuple[bytes, ServerFrame]] = [
    (_welcome(extra=1), Welcome(C, 1, 1, 0, 0)),
    (_reserve(lease_ms=None), Reserve((_MINIMAL_RESERVATION,))),
    # A big integer or an exact decimal in a payload is the server's to judge, not the frame's.
    (_reserve(payload=[2**64 - 1, 1.5, "x", None, True, {"a": [[[[]]]]}]),
     Reserve((_with_payload(_MINIMAL_RESERVATION, [2**64 - 1, 1.5, "x", None, True,
                                                   {"a": [[[[]]]]}]),))),
    (_response(), Response(1, (OpResult("m", True),))),
    (orjson.dumps({"type": "response", "id": 1, "results": [{"msg_id": "m"}]}),
     Response(1, (OpResult("m", False),))),
    (_response(attempts=[{"attempt_id": "x", "status": "LOST", "reason": None}]),
     Response(1, (OpResult("m", True, attempts=(ResumeEntry("x", "LOST"),)),))),
    (b'{"type": "error", "code": "BAD_FRAME", "message": "m"}',
     ErrorFrame(ErrorCode.BAD_FRAME, "m")),
    (orjson.dumps({"type": "reserve", "reservations": []}), Reserve(())),
]


ACCEPTED = [(decode_client_frame, data, frame) for data, frame in ACCEPTED_CLIENT_INPUT] + [
    (decode_server_frame, data, frame) for data, frame in ACCEPTED_SERVER_INPUT]


@pytest.mark.parametrize(("decode", "data", "frame"), ACCEPTED,
                         ids=[f"{d.__name__[7]}{i}" for i, (d, _, _) in enumerate(ACCEPTED)])
def test_accepted_input_decodes_as_pinned(decode: Any, data: bytes, frame: object) -> None:
    assert decode(data) == frame


def test_absent_defaults_decode_to_the_defaults() -> None:
    """An older server's reserve has no cancel_grace_ms (its cancels kill at once) and its
    welcome no max_batch_ops; an error frame may leave retryable and fatal out."""
    (res,) = decode_server_frame(_reserve()).reservations  # type: ignore[union-attr]
    assert res.cancel_grace_ms == 0 and res.lease_ms is None
    welcome = decode_server_frame(_welcome())
    assert isinstance(welcome, Welcome) and welcome.max_batch_ops == 256
    error = decode_server_frame(b'{"type": "error", "code": "BAD_FRAME", "message": "m"}')
    assert isinstance(error, ErrorFrame) and (error.retryable, error.fatal) == (False, True)
