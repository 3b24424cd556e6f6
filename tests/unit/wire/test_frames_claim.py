"""The ``claim`` operation and its answer (docs/protocol.md "Claiming in a request"): the op's
count is bounded; the answer's claimed reservations carry their lease and round-trip; a
reservation in a ``reserve`` frame has no lease."""

from __future__ import annotations

import orjson
import pytest

from orbit_wire.errors import ProtocolError
from orbit_wire.frames import (
    ClaimOp,
    OpResult,
    Request,
    Reservation,
    Reserve,
    Response,
    decode_client_frame,
    decode_server_frame,
    encode,
)
from orbit_wire.ids import new_id
from orbit_wire.limits import MAX_CAPACITY
from orbit_wire.model import Capability, Idempotency


def _reservation(lease_ms: int | None) -> Reservation:
    return Reservation(new_id(1), new_id(2), 3, 2, Capability("h", "1", "1"), {"n": 1},
                       Idempotency.IDEMPOTENT, 30000, 60000, 1_800_000_000_000, lease_ms)


def test_claim_op_round_trips_and_its_count_is_bounded() -> None:
    request = Request(4, (ClaimOp("m1", 2),))
    assert orjson.loads(encode(request))["ops"] == [{"msg_id": "m1", "count": 2, "op": "claim"}]
    assert decode_client_frame(encode(request)) == request
    frame = {"type": "request", "id": 1, "ops": [{"op": "claim", "msg_id": "m"}]}
    for bad in (0, -1, MAX_CAPACITY + 1, "2", True, None):
        with pytest.raises(ProtocolError):
            decode_client_frame(orjson.dumps({**frame, "ops": [{**frame["ops"][0],
                                                                "count": bad}]}))


def test_claim_answer_carries_started_reservations_and_credit() -> None:
    claimed = (_reservation(29_000), _reservation(0))
    response = Response(7, (OpResult("m1", True, claimed=claimed, credited=1),))
    wire = orjson.loads(encode(response))
    assert [c["lease_ms"] for c in wire["results"][0]["claimed"]] == [29_000, 0]
    assert wire["results"][0]["credited"] == 1
    assert decode_server_frame(encode(response)) == response


def test_a_reserved_attempt_has_no_lease_on_the_wire() -> None:
    frame = Reserve((_reservation(None),))
    assert "lease_ms" not in orjson.loads(encode(frame))["reservations"][0]
    assert decode_server_frame(encode(frame)) == frame
