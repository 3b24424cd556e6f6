"""Holding a request of starts and finishes for a short handler's finish (session._hold):
with a fake clock, such a request waits at most BATCH_HOLD_MAX and goes out with that finish
(and one claim for both slots) when it comes first; long handlers, renewals and a lost
connection never hold anything."""

from __future__ import annotations

from supervisor_session_harness import (
    FakeOutcome,
    executes,
    kinds,
    ok_for,
    ready,
    requests,
    reservation,
    run_one,
)

from orbit_supervisor.session import BATCH_HOLD_MAX, Session
from orbit_wire.frames import ClaimOp, Reserve


def _learn_duration(s: Session, now: float, took: float) -> float:
    """Run one attempt that takes ``took`` seconds; returns the time after its report."""
    res = run_one(s, now)
    for req in requests(s.execution_finished(res.attempt_id, FakeOutcome(), now + took)):
        s.frame_received(ok_for(req), now + took)
    return now + took


def _two_running(took: float) -> tuple[Session, str, str, float]:
    """Capacity 2 after learning ``took``; both slots run an attempt started just now."""
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took)
    a, b = reservation(), reservation()
    (start,) = requests(s.frame_received(Reserve((a, b)), now))
    assert executes(s.frame_received(ok_for(start), now)) == [a.attempt_id, b.attempt_id]
    return s, a.attempt_id, b.attempt_id, now


def test_a_finish_waits_for_a_short_handlers_finish_and_one_claim_refills_both() -> None:
    s, a, b, now = _two_running(took=0.0002)
    acts = s.execution_finished(a, FakeOutcome(), now + 0.0001)
    assert requests(acts) == []  # held: b is about to finish
    timer = s.next_timer()
    assert timer is not None and timer <= now + 0.0001 + BATCH_HOLD_MAX
    (req,) = requests(s.execution_finished(b, FakeOutcome(), now + 0.0002))
    assert kinds(req) == ["finish", "finish", "claim"]
    claim = req.ops[-1]
    assert isinstance(claim, ClaimOp) and claim.count == 2


def test_a_held_request_goes_out_when_the_hold_ends() -> None:
    s, a, _b, now = _two_running(took=0.0002)
    s.execution_finished(a, FakeOutcome(), now + 0.0001)
    timer = s.next_timer()
    assert timer is not None
    assert requests(s.handle_timer(timer - 1e-6)) == []
    (req,) = requests(s.handle_timer(timer))
    assert kinds(req) == ["finish", "claim"]


def test_long_handlers_never_hold_a_request() -> None:
    s, a, _b, now = _two_running(took=0.010)
    (req,) = requests(s.execution_finished(a, FakeOutcome(), now + 0.0001))
    assert kinds(req) == ["finish", "claim"]


def test_renewals_are_never_held() -> None:
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took=0.0002)
    a, b = reservation(), reservation()
    (start,) = requests(s.frame_received(Reserve((a, b)), now))
    s.frame_received(ok_for(start, lease_ms=1), now)  # renewals due after a third of 1 ms
    assert requests(s.execution_finished(a.attempt_id, FakeOutcome(), now + 0.0001)) == []
    hold_end = s.next_timer()
    assert hold_end is not None
    due = s.attempts[b.attempt_id].lease.deadline()
    assert due is not None and due < now + 0.0004  # b's renewal falls within the hold
    (req,) = requests(s.handle_timer(due))
    assert sorted(kinds(req)) == ["claim", "finish", "renew"]


def test_a_hold_never_outlives_its_connection() -> None:
    s, a, _b, now = _two_running(took=0.0002)
    s.execution_finished(a, FakeOutcome(), now + 0.0001)
    hold = s.next_timer()
    assert hold is not None and hold <= now + 0.0001 + BATCH_HOLD_MAX
    s.connection_lost(now + 0.00015, "CONNECTION_LOST")
    # Not READY any more: the hold's instant must not keep firing the timer (no busy loop).
    later = s.next_timer()
    assert later is None or later > hold
    s.handle_timer(hold + 0.01)
    later = s.next_timer()
    assert later is None or later > hold + 0.01
