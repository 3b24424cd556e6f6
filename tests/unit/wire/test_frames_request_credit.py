"""The optional ``credit`` of a request (docs/protocol.md): omitted when unset, decoded when
present, bounded like a credit frame, and 0 means none."""

from __future__ import annotations

import orjson
import pytest

from orbit_wire.errors import ProtocolError
from orbit_wire.frames import DrainOp, Request, decode_client_frame, encode
from orbit_wire.limits import MAX_CAPACITY


def test_request_credit_round_trips_and_is_omitted_when_unset() -> None:
    plain = Request(1, (DrainOp("m1"),))
    assert "credit" not in orjson.loads(encode(plain))
    assert decode_client_frame(encode(plain)) == plain
    with_credit = Request(2, (DrainOp("m2"),), 3)
    assert orjson.loads(encode(with_credit))["credit"] == 3
    assert decode_client_frame(encode(with_credit)) == with_credit


def test_request_credit_zero_means_none_and_bounds_are_checked() -> None:
    frame = {"type": "request", "id": 1, "ops": [{"op": "drain", "msg_id": "m"}]}
    zero = decode_client_frame(orjson.dumps({**frame, "credit": 0}))
    assert isinstance(zero, Request) and zero.credit is None
    for bad in (-1, 2 * MAX_CAPACITY + 1, "2", True):
        with pytest.raises(ProtocolError):
            decode_client_frame(orjson.dumps({**frame, "credit": bad}))
