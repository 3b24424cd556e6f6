"""A refusal from msgspec said as the field and its rule, read from the Meta beside the field."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson
import pytest
from msgspec import Meta, Struct

from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.explain import Refusal, explain, path_of
from orbit_wire.frames import decode_client_frame

A = "a" * 32


class Inner(Struct, forbid_unknown_fields=True):
    ratio: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.5


class Outer(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1, max_length=8)]
    tags: Annotated[list[Annotated[str, Meta(max_length=2)]], Meta(max_length=2)] = []
    inner: Inner = msgspec.field(default_factory=Inner)
    code: Annotated[str, Meta(pattern="^[A-Z]+$", extra={"message": "must be upper case"})] = "A"
    count: Annotated[int, Meta(ge=1, le=3)] | None = None


def _said(value: Any) -> tuple[Refusal, str]:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert(value, Outer)
    said = explain(info.value, Outer, value, "body")
    return said.refusal, said.message


@pytest.mark.parametrize(("value", "message"), [
    ({}, "body: name is required"),
    ({"name": None}, "body: name may not be null (leave it out for the default)"),
    ({"name": ""}, "body: name must be a string of 1-8 characters"),
    ({"name": "n", "count": 4}, "body: count must be an integer in [1, 3]"),
    ({"name": "n", "code": "lower"}, "body: code must be upper case"),
    ({"name": "n", "inner": {"ratio": 2}}, "body.inner: ratio must be a number in [0.0, 1.0]"),
    ({"name": "n", "inner": [1]}, "body.inner: must be a JSON object"),
    ({"name": "n", "inner": {"b": 1, "a": 2}}, "body.inner: has unknown field(s): a, b"),
    ({"name": "n", "tags": ["abc"]}, "body: tags[0] must be a string of 0-2 characters"),
    ({"name": "n", "tags": [None]}, "body: tags[0] may not be null"),
    ([1], "body: must be a JSON object"),
])
def test_a_refusal_names_the_field_and_its_rule(value: Any, message: str) -> None:
    assert _said(value) == (Refusal.VALUE, message)


def test_a_list_over_its_bound_is_too_many() -> None:
    assert _said({"name": "n", "tags": ["a", "b", "c"]}) == (
        Refusal.TOO_MANY, "body: tags must be a list of 0-2 items")


def test_frames_name_the_op_and_the_field() -> None:
    def message(frame: dict[str, Any]) -> tuple[ErrorCode, str]:
        with pytest.raises(ProtocolError) as info:
            decode_client_frame(orjson.dumps(frame))
        return info.value.code, info.value.message

    renew = {"op": "renew", "msg_id": "m", "attempt_id": A, "epoch": 0}
    assert message({"type": "request", "id": 1, "ops": [renew]}) == (
        ErrorCode.BAD_FRAME, "frame.ops[0]: epoch must be an integer in [1, 9223372036854775807]")
    assert message({"type": "request", "id": 1, "ops": [{"op": "fly", "msg_id": "m"}]}) == (
        ErrorCode.UNKNOWN_FRAME_TYPE, "frame.ops[0]: op 'fly' is not known")
    assert message({"type": "teleport"}) == (ErrorCode.UNKNOWN_FRAME_TYPE,
                                             "frame: type 'teleport' is not known")
    assert message({"type": "credit", "credits": 0}) == (
        ErrorCode.BAD_FRAME, "frame: credits must be an integer in [1, 512]")


def test_the_path_of_a_refusal() -> None:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert({"name": "n", "tags": ["a", "abc"]}, Outer)
    assert path_of(info.value) == ["tags", 1]
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.convert({}, Outer)
    assert path_of(info.value) == []
