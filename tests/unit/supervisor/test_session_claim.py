"""Claiming in a request (docs/protocol.md "Claiming in a request"): the slots a finish frees
are claimed in the finish's own request; claimed attempts are already started, so they run
on the answer with a lease counted from the request's send time; unfilled slots become
credit; a claim whose answer was lost goes again with its msg_id after the resume."""

from __future__ import annotations

from msgspec.structs import replace
from supervisor_session_harness import (
    FakeOutcome,
    credits,
    events,
    executes,
    kinds,
    ok_for,
    ready,
    requests,
    reservation,
    run_ends,
    run_one,
    welcome,
)

from orbit_wire.errors import ErrorCode
from orbit_wire.frames import ClaimOp, FinishOp, OpResult, Request, Reservation, Response
from orbit_wire.model import Outcome


def started(lease_ms: int = 3000) -> Reservation:
    """A reservation as a claim answer carries it: already started, with its lease."""
    return replace(reservation(), lease_ms=lease_ms)


def answer(req: Request, claimed: tuple[Reservation, ...], credited: int) -> Response:
    results = list(ok_for(req).results)
    claim = req.ops[-1]
    assert isinstance(claim, ClaimOp)
    results[-1] = OpResult(claim.msg_id, True, claimed=claimed, credited=credited)
    return Response(req.id, tuple(results))


def test_a_finish_claims_the_slot_it_frees_and_the_claimed_attempt_runs_at_once() -> None:
    s, acts = ready(capacity=2)
    assert credits(acts) == 2
    res = run_one(s, 0.0)
    assert s.outstanding_credit == 1
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    assert kinds(req) == ["finish", "claim"]
    claim = req.ops[1]
    assert isinstance(claim, ClaimOp) and claim.count == 1  # 2 free once confirmed, 1 credited
    assert s.free_slots() == 0  # the claimed slot is not offered as credit meanwhile
    nxt = started(lease_ms=1000)
    acts = s.frame_received(answer(req, (nxt,), 0), 0.7)
    assert executes(acts) == [nxt.attempt_id]  # no start request: the server started it
    assert requests(acts) == [] and credits(acts) == 0
    assert s.started == 2 and s.outstanding_credit == 1
    # The lease counts from when the claim was sent (0.5), not from the answer (0.7).
    assert s.attempts[nxt.attempt_id].lease.expires_at == 1.5


def test_unfilled_slots_become_credit_and_are_not_offered_twice() -> None:
    s, _ = ready(capacity=2)
    a, b = run_one(s, 0.0), run_one(s, 0.0)
    assert s.outstanding_credit == 0
    (renew,) = requests(s.handle_timer(1.0))  # a renewal holds the one request slot
    s.execution_finished(a.attempt_id, FakeOutcome(), 1.01)
    s.execution_finished(b.attempt_id, FakeOutcome(), 1.02)
    (req,) = requests(s.frame_received(ok_for(renew), 1.03))
    assert kinds(req) == ["finish", "finish", "claim"]
    claim = req.ops[-1]
    assert isinstance(claim, ClaimOp) and claim.count == 2
    acts = s.frame_received(answer(req, (started(),), 1), 1.04)
    assert len(executes(acts)) == 1 and credits(acts) == 0
    assert s.outstanding_credit == 1 and s.free_slots() == 1


def test_a_claim_after_a_rejected_finish_claims_nothing_and_the_slot_is_offered() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    finish, claim = req.ops
    # The server claims nothing after a finish it did not answer ok (here: not this
    # worker's attempt any more); the report is settled, so the slot is free again.
    answer_ = Response(req.id, (
        OpResult(finish.msg_id, False, ErrorCode.PERMISSION_DENIED, "not yours"),
        OpResult(claim.msg_id, True, claimed=(), credited=0)))
    acts = s.frame_received(answer_, 0.6)
    assert ("report_rejected", "PERMISSION_DENIED") in events(acts)
    assert credits(acts) == 1 and s.outstanding_credit == 1 and not s.attempts


def test_a_claimed_attempt_whose_lease_is_gone_never_runs_and_is_reported() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    gone = started(lease_ms=0)
    acts = s.frame_received(answer(req, (gone,), 0), 0.6)
    assert executes(acts) == [] and ("not_run", "LEASE_LOST") in events(acts)
    (report,) = requests(acts)
    finish = report.ops[0]
    assert isinstance(finish, FinishOp) and finish.attempt_id == gone.attempt_id
    assert (finish.outcome, finish.code) == (Outcome.UNKNOWN, "LEASE_LOST")


def test_a_claim_whose_answer_was_lost_is_resent_and_its_attempts_run() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    finish, claim = req.ops
    s.connection_lost(0.6, "CONNECTION_LOST")
    s.connected(0.8)
    (resume,) = requests(s.frame_received(welcome(), 0.8))
    acts = s.frame_received(ok_for(resume), 0.9)
    assert credits(acts) == 0  # the claim's slot stays taken until its answer is known
    (resent,) = requests(acts)
    assert [op.msg_id for op in resent.ops] == [finish.msg_id, claim.msg_id]
    replayed = started(lease_ms=2000)  # the stored answer, lease re-based by the server
    acts = s.frame_received(answer(resent, (replayed,), 0), 1.0)
    assert executes(acts) == [replayed.attempt_id]
    # Counted from the claim's FIRST send: never later than the server's expiry.
    assert s.attempts[replayed.attempt_id].lease.expires_at == 2.5


def test_no_claims_while_stopping() -> None:
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    acts = s.request_stop(0.1) + s.execution_finished(res.attempt_id, FakeOutcome(), 0.5)
    sent, new = requests(acts), requests(acts)
    for _ in range(10):  # answer until the session has nothing more to send
        if not new:
            break
        acts = s.frame_received(ok_for(new[-1]), 0.6)
        new = requests(acts)
        sent += new
    assert all("claim" not in kinds(r) for r in sent)
    assert sorted(k for r in sent for k in kinds(r)) == ["drain", "finish"]
    assert run_ends(acts) and s.done


def test_a_claim_answered_unavailable_is_resent_with_its_msg_id() -> None:
    # UNAVAILABLE may come from a commit whose answer was lost: the claim may have started
    # tasks, and only the same msg_id (its receipt) tells which.
    s, _ = ready(capacity=1)
    res = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    finish, claim = req.ops
    busy = Response(req.id, tuple(OpResult(op.msg_id, False, ErrorCode.UNAVAILABLE, "later")
                                  for op in req.ops))
    acts = s.frame_received(busy, 0.6)
    assert credits(acts) == 0  # the claim's slot stays taken while its answer is unknown
    (retry,) = requests(acts)
    assert [op.msg_id for op in retry.ops] == [finish.msg_id, claim.msg_id]
    replayed = started(lease_ms=2000)
    acts = s.frame_received(answer(retry, (replayed,), 0), 0.7)
    assert executes(acts) == [replayed.attempt_id]
    assert s.attempts[replayed.attempt_id].lease.expires_at == 2.5  # from the first send
