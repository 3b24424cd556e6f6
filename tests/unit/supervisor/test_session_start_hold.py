"""Holding a start-only request for a short handler's finish (session._hold_starts): with a
fake clock, the start waits at most START_HOLD_MAX and goes out with the finish when that
comes first; long handlers, renewals and finishes are never held."""

from __future__ import annotations

from supervisor_session_harness import (
    FakeOutcome,
    executes,
    ok_for,
    ready,
    requests,
    reservation,
)

from orbit_supervisor.session import START_HOLD_MAX, Session
from orbit_wire.frames import FinishOp, Request, Reserve, StartOp


def _learn_duration(s: Session, now: float, took: float) -> float:
    """Run one attempt that takes ``took`` seconds; returns the time after its finish."""
    res = reservation()
    (start,) = requests(s.frame_received(Reserve((res,)), now))
    assert executes(s.frame_received(ok_for(start), now)) == [res.attempt_id]
    (fin,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), now + took))
    s.frame_received(ok_for(fin), now + took)
    return now + took


def _two_slots_one_running(took: float) -> tuple[Session, Request, float]:
    """Capacity 2 after learning ``took``; slot 1 running an attempt that just started, and
    a reservation for slot 2 arriving while slot 1's start request is in flight."""
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took)
    first = reservation()
    (start1,) = requests(s.frame_received(Reserve((first,)), now))
    second = reservation()
    assert requests(s.frame_received(Reserve((second,)), now)) == []  # one in flight
    acts = s.frame_received(ok_for(start1), now + 0.0001)
    assert executes(acts) == [first.attempt_id]
    assert requests(acts) == []  # the second start is held for the first one's finish
    return s, start1, now + 0.0001


def test_start_waits_for_a_short_handlers_finish_and_shares_its_request() -> None:
    s, _, now = _two_slots_one_running(took=0.0002)
    # Only a start is queued while the short handler runs: held, with a timer set.
    timer = s.next_timer()
    assert timer is not None and timer <= now + START_HOLD_MAX
    running = next(a for a in s.attempts.values() if a.phase.value == "RUNNING")
    acts = s.execution_finished(running.attempt_id, FakeOutcome(), now + 0.0002)
    (req,) = requests(acts)
    assert sorted(type(op).__name__ for op in req.ops) == ["FinishOp", "StartOp"]


def test_held_start_goes_out_when_the_hold_ends() -> None:
    s, _, now = _two_slots_one_running(took=0.0002)
    timer = s.next_timer()
    assert timer is not None and timer <= now + START_HOLD_MAX
    assert requests(s.handle_timer(timer - 1e-6)) == []
    (req,) = requests(s.handle_timer(timer))
    assert [type(op) for op in req.ops] == [StartOp]


def test_long_handlers_never_hold_a_start() -> None:
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took=0.010)
    first, second = reservation(), reservation()
    (start1,) = requests(s.frame_received(Reserve((first,)), now))
    s.frame_received(Reserve((second,)), now)
    acts = s.frame_received(ok_for(start1), now + 0.0001)
    (req,) = requests(acts)  # the second start goes out at once
    assert [type(op) for op in req.ops] == [StartOp]


def test_a_finish_is_never_held() -> None:
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took=0.0002)
    a, b = reservation(), reservation()
    (start,) = requests(s.frame_received(Reserve((a, b)), now))
    assert len(start.ops) == 2
    s.frame_received(ok_for(start), now)
    (fin,) = requests(s.execution_finished(a.attempt_id, FakeOutcome(), now + 0.0001))
    assert [type(op) for op in fin.ops] == [FinishOp]


def test_a_hold_never_outlives_its_connection() -> None:
    s, _, now = _two_slots_one_running(took=0.0002)
    hold = s.next_timer()
    assert hold is not None and hold <= now + START_HOLD_MAX
    s.connection_lost(now + 0.0001, "CONNECTION_LOST")
    # Not READY any more: the hold's instant must not keep firing the timer (no busy loop).
    later = s.next_timer()
    assert later is None or later > hold
    s.handle_timer(hold + 0.01)
    later = s.next_timer()
    assert later is None or later > hold + 0.01
