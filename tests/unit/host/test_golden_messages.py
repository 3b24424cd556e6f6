"""The messages between the supervisor, its template process and its children, pinned byte
for byte (orbit_host/messages.py): each encodes to exactly these bytes on its channel and
decodes back; malformed objects raise MalformedMessage; what a child sends is kept as sent.
The codec underneath may change; these bytes and these answers may not.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from orbit_host.framing import FrameDecoder, encode_frame
from orbit_host.messages import (
    CancelTask,
    ChildForked,
    ChildReady,
    ChildReaped,
    ForkChild,
    HandlersLoaded,
    HandlersRejected,
    LeaveChild,
    MalformedMessage,
    RunTask,
    StopTemplate,
    TaskDone,
    decode_for_child,
    decode_for_template,
    decode_from_child,
    decode_from_template,
)
from orbit_wire.model import Capability

A = "a" * 32
B = "b" * 32
CAP = Capability("text.normalize", "v1", "v1")
CAP2 = Capability("img/resize:x", "2.0-beta", "p_1")
PAYLOAD = {"text": 'é "q"\n', "n": 1.5, "big": 9007199254740993, "list": [None, True, {}]}

# To a child and from it, over its stream socket (framing.py: length prefix + JSON).
CHILD_MESSAGES: dict[str, Any] = {
    "run": RunTask(3, A, B, 2, 1, CAP, PAYLOAD, 1_800_000_000_000, "IDEMPOTENT"),
    "cancel": CancelTask(3, A),
    "exit_child": LeaveChild(3),
    "ready": ChildReady(3, 4242),
    "done_minimal": TaskDone(3, A, "SUCCEEDED"),
    "done": TaskDone(3, A, "FAILED", code="OBJECT_REJECTED", retryable=False,
                     result_json=None, details_json='{"why": "x"}', cpu_ms=12,
                     peak_rss_bytes=1 << 20),
}
# Between the supervisor and its template process, one JSON object per packet.
CONTROL_MESSAGES: dict[str, Any] = {
    "caps": HandlersLoaded((CAP, CAP2)),
    "spec_error": HandlersRejected("app.tasks:handlers is not importable"),
    "forked": ChildForked(3, 4242),
    "reaped_exit": ChildReaped(3, 4242, exit_code=0, cpu_ms=15, peak_rss_bytes=2048),
    "reaped_signal": ChildReaped(3, 4242, signal=9),
    "fork": ForkChild(4),
    "exit_template": StopTemplate(),
}

WIRE: dict[str, bytes] = {
    "run": (
        b'\x00\x00\x01;{"t":"run","g":3,"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
        b'"task_id":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","epoch":2,"attempt_number":1,'
        b'"capability":["text.normalize","v1","v1"],"payload":{"text":"\xc3\xa9 \\"q\\"\\n",'
        b'"n":1.5,"big":9007199254740993,"list":[null,true,{}]},"deadline_at_ms":1800000000000,'
        b'"idempotency":"IDEMPOTENT"}'),
    "cancel": (
        b'\x00\x00\x00;{"t":"cancel","g":3,"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}'),
    "exit_child": (
        b'\x00\x00\x00\x12{"t":"exit","g":3}'),
    "ready": (
        b'\x00\x00\x00\x1e{"t":"ready","g":3,"pid":4242}'),
    "done_minimal": (
        b'\x00\x00\x00O{"t":"done","g":3,"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
        b'"outcome":"SUCCEEDED"}'),
    "done": (
        b'\x00\x00\x00\xbe{"t":"done","g":3,"a":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
        b'"outcome":"FAILED","code":"OBJECT_REJECTED","retryable":false,'
        b'"details_json":"{\\"why\\": \\"x\\"}","cpu_ms":12,"peak_rss_bytes":1048576}'),
    "caps": (
        b'{"t":"caps","caps":[["text.normalize","v1","v1"],["img/resize:x","2.0-beta","p_1"]]}'),
    "spec_error": (
        b'{"t":"spec_error","message":"app.tasks:handlers is not importable"}'),
    "forked": (
        b'{"t":"forked","g":3,"pid":4242}'),
    "reaped_exit": (
        b'{"t":"reaped","g":3,"pid":4242,"exit_code":0,"cpu_ms":15,"peak_rss_bytes":2048}'),
    "reaped_signal": (
        b'{"t":"reaped","g":3,"pid":4242,"signal":9}'),
    "fork": (
        b'{"t":"fork","g":4}'),
    "exit_template": (
        b'{"t":"exit"}'),
}

DECODERS = {
    "run": decode_for_child, "cancel": decode_for_child, "exit_child": decode_for_child,
    "ready": decode_from_child, "done_minimal": decode_from_child, "done": decode_from_child,
    "caps": decode_from_template, "spec_error": decode_from_template,
    "forked": decode_from_template, "reaped_exit": decode_from_template,
    "reaped_signal": decode_from_template, "fork": decode_for_template,
    "exit_template": decode_for_template,
}


def test_every_message_class_is_pinned() -> None:
    kinds = {type(m) for m in (*CHILD_MESSAGES.values(), *CONTROL_MESSAGES.values())}
    assert kinds == {RunTask, CancelTask, LeaveChild, ChildReady, TaskDone, HandlersLoaded,
                     HandlersRejected, ChildForked, ChildReaped, ForkChild, StopTemplate}
    assert set(WIRE) == set(CHILD_MESSAGES) | set(CONTROL_MESSAGES) == set(DECODERS)


@pytest.mark.parametrize("name", sorted(CHILD_MESSAGES))
def test_child_channel_message_encodes_to_its_bytes_and_back(name: str) -> None:
    message = CHILD_MESSAGES[name]
    assert encode_frame(message.to_wire()) == WIRE[name]
    (obj,) = FrameDecoder().feed(WIRE[name])
    assert DECODERS[name](obj) == message


@pytest.mark.parametrize("name", sorted(CONTROL_MESSAGES))
def test_control_message_encodes_to_its_bytes_and_back(name: str) -> None:
    message = CONTROL_MESSAGES[name]
    assert orjson.dumps(message.to_wire()) == WIRE[name]
    assert DECODERS[name](orjson.loads(WIRE[name])) == message


MALFORMED: list[tuple[Any, Any]] = [
    (decode_for_child, {}),
    (decode_for_child, {"t": "run", "g": "1"}),
    (decode_for_child, {"t": "run", "g": True}),
    (decode_for_child, {"t": "run", "g": 1}),
    (decode_for_child, {"t": "run", "g": 1, "a": A, "task_id": B, "epoch": 1,
                        "attempt_number": 1, "capability": ["h", "1"], "payload": 1,
                        "deadline_at_ms": 0, "idempotency": "IDEMPOTENT"}),
    (decode_for_child, {"t": "run", "g": 1, "a": 5, "task_id": B, "epoch": 1,
                        "attempt_number": 1, "capability": ["h", "1", "1"], "payload": 1,
                        "deadline_at_ms": 0, "idempotency": "IDEMPOTENT"}),
    (decode_for_child, {"t": "ready", "g": 1, "pid": 2}),
    (decode_for_child, {"t": "nope", "g": 1}),
    (decode_from_child, {"t": "done"}),
    (decode_from_child, {"t": "ready", "g": 1}),
    (decode_from_child, {"t": "ready", "g": 1, "pid": "2"}),
    (decode_from_child, {"t": "run", "g": 1}),
    (decode_from_child, {"g": 1}),
    (decode_from_template, []),
    (decode_from_template, "caps"),
    (decode_from_template, {"t": "caps", "caps": "h/1/1"}),
    (decode_from_template, {"t": "caps", "caps": [["h", "1"]]}),
    (decode_from_template, {"t": "caps", "caps": ["h11"]}),
    (decode_from_template, {"t": "forked", "g": 1}),
    (decode_from_template, {"t": "reaped", "g": 1}),
    (decode_from_template, {"t": "reaped", "pid": 1}),
    (decode_from_template, {"t": "fork", "g": 1}),
    (decode_for_template, []),
    (decode_for_template, {"t": "fork"}),
    (decode_for_template, {"t": "fork", "g": None}),
    (decode_for_template, {"t": "caps", "caps": []}),
]


@pytest.mark.parametrize(("decode", "obj"), MALFORMED, ids=[f"m{i}" for i in range(len(MALFORMED))])
def test_malformed_objects_raise(decode: Any, obj: Any) -> None:
    with pytest.raises(MalformedMessage):
        decode(obj)


def test_a_childs_answer_is_kept_as_sent() -> None:
    """A child is untrusted: its answer's fields are the supervisor's to check (outcomes.py),
    so odd values are kept; rusage that is not an integer is dropped; unknown keys ignored."""
    odd = {"t": "done", "g": 1, "a": 5, "outcome": "WAT", "code": 7, "retryable": "x",
           "result_json": {"a": 1}, "details_json": [1], "cpu_ms": "12", "peak_rss_bytes": True,
           "extra": 1}
    assert decode_from_child(odd) == TaskDone(1, 5, "WAT", code=7, retryable="x",
                                              result_json={"a": 1}, details_json=[1])
    assert decode_from_child({"t": "done", "g": 1}) == TaskDone(1, None, None)
    assert decode_from_child({"t": "ready", "g": 2, "pid": 9, "x": 1}) == ChildReady(2, 9)


def test_rusage_the_template_cannot_read_is_left_out() -> None:
    reaped = {"t": "reaped", "g": 1, "pid": 2, "exit_code": None, "signal": "9", "cpu_ms": 1.5,
              "peak_rss_bytes": 7}
    assert decode_from_template(reaped) == ChildReaped(1, 2, peak_rss_bytes=7)
