"""A request's results are bounded in bytes (MAX_OUTPUT_BYTES_PER_REQUEST), so its frame stays
below the server's limit however large the handlers' results: with a fake clock, large
finishes go out over several requests, in order, and one op always fits."""

from __future__ import annotations

from supervisor_session_harness import FakeOutcome, executes, ok_for, ready, requests, reservation

from orbit_wire.frames import FinishOp, Reserve
from orbit_wire.limits import MAX_FRAME_BYTES, MAX_OUTPUT_BYTES_PER_REQUEST, MAX_VALUE_BYTES


def test_large_results_are_spread_over_requests_within_the_byte_budget() -> None:
    s, _ = ready(capacity=6)
    res = [reservation() for _ in range(6)]
    (start,) = requests(s.frame_received(Reserve(tuple(res)), 0.0))
    ids = [r.attempt_id for r in res]
    assert executes(s.frame_received(ok_for(start), 0.0)) == ids
    # 200 KiB results (400 KiB once escaped, at most): two per request.
    big = FakeOutcome(result_json='"' + "x" * (200 * 1024) + '"')
    (first,) = requests(s.execution_finished(ids[0], big, 0.01))  # nothing in flight: alone
    for attempt_id in ids[1:]:
        assert requests(s.execution_finished(attempt_id, big, 0.02)) == []  # one in flight
    sent = [first]
    now = 0.03
    for _ in range(10):  # bounded: six finishes need a handful of requests
        (nxt,) = requests(s.frame_received(ok_for(sent[-1]), now)) or (None,)
        if nxt is None:
            break
        sent.append(nxt)
        now += 0.01
    finished = [op.attempt_id for req in sent for op in req.ops if isinstance(op, FinishOp)]
    assert finished == ids  # every one, once, in order
    for req in sent:
        size = sum(2 * len((op.result_json or "").encode()) for op in req.ops
                   if isinstance(op, FinishOp))
        assert size <= MAX_OUTPUT_BYTES_PER_REQUEST
    assert max(sum(isinstance(op, FinishOp) for op in req.ops) for req in sent) == 2


def test_one_finish_always_fits() -> None:
    # The largest result a handler may return still goes out (alone).
    assert 2 * MAX_VALUE_BYTES <= MAX_OUTPUT_BYTES_PER_REQUEST < MAX_FRAME_BYTES
    s, _ = ready(capacity=1)
    res = reservation()
    (start,) = requests(s.frame_received(Reserve((res,)), 0.0))
    assert executes(s.frame_received(ok_for(start), 0.0)) == [res.attempt_id]
    huge = FakeOutcome(result_json='"' + "y" * (MAX_VALUE_BYTES - 2) + '"')
    (req,) = requests(s.execution_finished(res.attempt_id, huge, 0.01))
    assert req.ops[0].op == "finish"
