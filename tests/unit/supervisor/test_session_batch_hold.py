"""Holding a request of starts and finishes for a short handler's finish (batching.py,
driven through the session with a fake clock): such a request waits at most one recent round
trip (BATCH_HOLD_MIN when answers come at once, BATCH_HOLD_MAX at most) and goes out with that
finish (and one claim for both slots) when it comes first; long handlers, renewals and a lost
connection never hold anything; with more handlers than CPUs, finishes wait for the next ones
up to BATCH_HOLD_MAX from the oldest."""

from __future__ import annotations

import pytest
from supervisor_session_harness import (
    FakeOutcome,
    executes,
    kinds,
    ok_for,
    ready,
    requests,
    reservation,
)

from orbit_supervisor.batching import BATCH_HOLD_MAX, BATCH_HOLD_MIN
from orbit_supervisor.session import Session
from orbit_wire.frames import ClaimOp, Report, Reserve


def _learn_duration(s: Session, now: float, took: float, rtt: float = 0.0,
                    cpu: float = 1.0) -> float:
    """Run attempts that take ``took`` seconds, using ``cpu`` of it on the CPU, the server
    answering ``rtt`` after each request, until these figures are learnt; returns the time
    after the last answer."""
    done = FakeOutcome(report=Report(child_pid=4242, exit_code=0, cpu_ms=round(took * cpu * 1e3)))
    for _ in range(1 if rtt == 0.0 else 30):
        res = reservation()
        (start,) = requests(s.frame_received(Reserve((res,)), now))
        now += rtt
        assert executes(s.frame_received(ok_for(start), now)) == [res.attempt_id]
        now += took
        for req in requests(s.execution_finished(res.attempt_id, done, now)):
            now += rtt
            s.frame_received(ok_for(req), now)
    return now


def _two_running(took: float, rtt: float = 0.0) -> tuple[Session, str, str, float]:
    """Capacity 2 after learning ``took`` (and ``rtt``); both slots run an attempt started
    just now."""
    s, _ = ready(capacity=2)
    now = _learn_duration(s, 0.0, took, rtt)
    a, b = reservation(), reservation()
    (start,) = requests(s.frame_received(Reserve((a, b)), now))
    assert executes(s.frame_received(ok_for(start), now)) == [a.attempt_id, b.attempt_id]
    return s, a.attempt_id, b.attempt_id, now


def test_a_finish_waits_for_a_short_handlers_finish_and_one_claim_refills_both() -> None:
    s, a, b, now = _two_running(took=0.0002)
    acts = s.execution_finished(a, FakeOutcome(), now + 0.0001)
    assert requests(acts) == []  # held: b is about to finish
    timer = s.next_timer()
    assert timer is not None and timer <= now + 0.0001 + BATCH_HOLD_MIN
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
    s, a, b, now = _two_running(took=0.0002)
    s.execution_finished(a, FakeOutcome(), now + 0.0001)
    hold = s.next_timer()
    assert hold is not None and hold <= now + 0.0001 + BATCH_HOLD_MIN
    s.connection_lost(now + 0.00015, "CONNECTION_LOST")
    # Not READY any more: the hold's instant must not keep firing the timer (no busy loop).
    # What is left to time is b's lease, due well after the hold.
    lease = s.attempts[b].lease.deadline()
    assert lease is not None and lease > hold + 0.01
    assert s.next_timer() == lease
    s.handle_timer(hold + 0.01)
    assert s.next_timer() == lease


def test_after_slow_round_trips_a_longer_handler_is_waited_for_up_to_one_round_trip() -> None:
    # 3 ms handlers are not "short" while answers come at once (window 2 ms) ...
    s, a, _b, now = _two_running(took=0.003)
    (req,) = requests(s.execution_finished(a, FakeOutcome(), now + 0.003))
    assert kinds(req) == ["finish", "claim"]
    # ... but they are when the server takes 8 ms per round trip: sent alone, this finish
    # would keep the other one waiting that long anyway.
    s, a, b, now = _two_running(took=0.003, rtt=0.008)
    assert requests(s.execution_finished(a, FakeOutcome(), now + 0.003)) == []
    hold = s.next_timer()
    assert hold is not None and now + 0.003 < hold <= now + 0.008 + 1e-9
    (req,) = requests(s.execution_finished(b, FakeOutcome(), now + 0.0035))
    assert kinds(req) == ["finish", "finish", "claim"]


def test_the_hold_never_exceeds_its_bound_however_slow_the_server() -> None:
    s, a, _b, now = _two_running(took=0.009, rtt=0.5)
    assert requests(s.execution_finished(a, FakeOutcome(), now + 0.009)) == []
    hold = s.next_timer()
    assert hold is not None and hold <= now + BATCH_HOLD_MAX + 1e-9
    (req,) = requests(s.handle_timer(hold))
    assert kinds(req) == ["finish", "claim"]
    # Handlers longer than half the largest window are never waited for.
    s, a, _b, now = _two_running(took=0.011, rtt=0.5)
    (req,) = requests(s.execution_finished(a, FakeOutcome(), now + 0.011))
    assert kinds(req) == ["finish", "claim"]


def _four_running(cpus: int, took: float) -> tuple[Session, list[str], float]:
    """Capacity 4 on ``cpus`` CPUs after learning ``took``; the four slots run attempts
    started at the returned time."""
    s, _ = ready(capacity=4, cpus=cpus)
    now = _learn_duration(s, 0.0, took)
    res = [reservation() for _ in range(4)]
    (start,) = requests(s.frame_received(Reserve(tuple(res)), now))
    ids = [r.attempt_id for r in res]
    assert executes(s.frame_received(ok_for(start), now)) == ids
    return s, ids, now


def test_with_more_handlers_than_cpus_a_finish_waits_for_the_next_one() -> None:
    s, (a, b, c, _d), t0 = _four_running(cpus=2, took=0.015)
    # a ends a little early; the others are expected at t0 + 15 ms: one more is waited for,
    # for at most BATCH_HOLD_MAX from a's finish.
    assert requests(s.execution_finished(a, FakeOutcome(), t0 + 0.012)) == []
    assert s.next_timer() == pytest.approx(t0 + 0.012 + BATCH_HOLD_MAX)
    (req,) = requests(s.execution_finished(b, FakeOutcome(), t0 + 0.0140))
    assert kinds(req) == ["finish", "finish", "claim"]
    claim = req.ops[-1]
    assert isinstance(claim, ClaimOp) and claim.count == 2
    # Two handlers on two CPUs: the next finish goes out at once.
    s.frame_received(ok_for(req), t0 + 0.016)  # the claim finds no work
    (req,) = requests(s.execution_finished(c, FakeOutcome(), t0 + 0.0165))
    assert kinds(req) == ["finish", "claim"]


def test_no_oversubscription_hold_with_enough_cpus_or_a_far_next_finish() -> None:
    s, (a, *_), t0 = _four_running(cpus=4, took=0.015)
    (req,) = requests(s.execution_finished(a, FakeOutcome(), t0 + 0.012))
    assert kinds(req) == ["finish", "claim"]
    # 2 CPUs, but the next handler is not expected within BATCH_HOLD_MAX.
    s, (a, *_), t0 = _four_running(cpus=2, took=0.100)
    (req,) = requests(s.execution_finished(a, FakeOutcome(), t0 + 0.050))
    assert kinds(req) == ["finish", "claim"]


def test_an_overdue_handler_is_waited_for_and_the_hold_counts_from_the_oldest_finish() -> None:
    s, _ = ready(capacity=8, cpus=2)
    now = _learn_duration(s, 0.0, 0.010)
    res = [reservation() for _ in range(8)]
    (start,) = requests(s.frame_received(Reserve(tuple(res)), now))
    ids = [r.attempt_id for r in res]
    assert executes(s.frame_received(ok_for(start), now)) == ids
    # Eight handlers share two CPUs, so all of them run past the 10 ms they took alone:
    # each finish waits for the next, but the first one no longer than BATCH_HOLD_MAX.
    first = now + 0.030
    for i, attempt in enumerate(ids[:4]):
        assert requests(s.execution_finished(attempt, FakeOutcome(), first + 0.005 * i)) == []
        assert s.next_timer() == pytest.approx(first + BATCH_HOLD_MAX)
    (req,) = requests(s.handle_timer(first + BATCH_HOLD_MAX))
    assert kinds(req) == ["finish"] * 4 + ["claim"]
    # The next finish waits its own BATCH_HOLD_MAX, counted from when it was queued.
    s.frame_received(ok_for(req), first + BATCH_HOLD_MAX + 0.001)
    later = first + BATCH_HOLD_MAX + 0.002
    assert requests(s.execution_finished(ids[4], FakeOutcome(), later)) == []
    assert s.next_timer() == pytest.approx(later + BATCH_HOLD_MAX)


def test_no_oversubscription_hold_for_handlers_that_use_no_cpu() -> None:
    # Four sleeping handlers on two CPUs: the CPUs are idle, so a finish goes out at once.
    s, _ = ready(capacity=4, cpus=2)
    t0 = _learn_duration(s, 0.0, 0.015, cpu=0.0)
    res = [reservation() for _ in range(4)]
    (start,) = requests(s.frame_received(Reserve(tuple(res)), t0))
    assert executes(s.frame_received(ok_for(start), t0)) == [r.attempt_id for r in res]
    (req,) = requests(s.execution_finished(res[0].attempt_id, FakeOutcome(), t0 + 0.012))
    assert kinds(req) == ["finish", "claim"]
