"""Credit carried inside a request (docs/protocol.md "Credits and reservations"): the slot a
finish frees is offered in the finish's own request, so the server can reserve in the same
transaction; the credit is counted back if any finish of that request was not confirmed."""

from __future__ import annotations

from supervisor_session_harness import (
    FakeOutcome,
    credits,
    executes,
    ok_for,
    ready,
    requests,
    reservation,
    run_one,
)

from orbit_wire.errors import ErrorCode
from orbit_wire.frames import FinishOp, OpResult, Reserve, Response, StartOp


def test_finish_request_carries_the_freed_slot_as_credit() -> None:
    s, acts = ready(capacity=2)
    assert credits(acts) == 2
    res = run_one(s, 0.0)
    assert s.outstanding_credit == 1
    acts = s.execution_finished(res.attempt_id, FakeOutcome(), 0.5)
    (req,) = requests(acts)
    assert [type(op) for op in req.ops] == [FinishOp] and req.credit == 1
    assert credits(acts) == 0 and s.outstanding_credit == 2  # never above capacity
    # The server's reserve (claimed in the finish's transaction) comes before the answer:
    # the start waits for the one request in flight, then goes out at once.
    nxt = reservation()
    acts = s.frame_received(Reserve((nxt,)), 0.51)
    assert requests(acts) == [] and s.outstanding_credit == 1
    acts = s.frame_received(ok_for(req), 0.52)
    (start_req,) = requests(acts)
    assert [type(op) for op in start_req.ops] == [StartOp]
    assert start_req.credit is None  # a start frees nothing
    assert credits(acts) == 0 and s.outstanding_credit == 1
    assert executes(s.frame_received(ok_for(start_req), 0.53)) == [nxt.attempt_id]


def test_unconfirmed_finish_takes_the_request_credit_back() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    assert s.outstanding_credit == 0
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    assert req.credit == 1 and s.outstanding_credit == 1
    busy = Response(req.id, (OpResult(req.ops[0].msg_id, False, ErrorCode.UNAVAILABLE, "later"),))
    acts = s.frame_received(busy, 0.6)
    # Not granted by the server: the slot is still unconfirmed, nothing is outstanding,
    # and the retried finish carries the credit again.
    assert s.outstanding_credit == 1 and credits(acts) == 0
    (retry,) = requests(acts)
    assert retry.ops[0].msg_id == req.ops[0].msg_id and retry.credit == 1
    acts = s.frame_received(ok_for(retry), 0.7)
    assert credits(acts) == 0 and s.outstanding_credit == 1 and not s.attempts


def test_no_credit_in_requests_while_stopping() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    s.request_stop(0.1)
    acts = s.execution_finished(res.attempt_id, FakeOutcome(), 0.5)
    assert all(r.credit is None for r in requests(acts))
