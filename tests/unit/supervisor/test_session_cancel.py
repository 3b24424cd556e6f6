"""Cooperative cancel in the pure session (fake clock): a cancel push tells the child,
stops renewing, and kills at the end of the cancel grace unless the child ends first; the
lease's expiry still kills first when it comes earlier; the finish says which ended it."""

from __future__ import annotations

from supervisor_session_harness import (
    FakeOutcome,
    events,
    kills,
    ready,
    requests,
    run_one,
    welcome,
)

from orbit_supervisor.actions import Action, CancelChild
from orbit_supervisor.session import Session
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    Cancel,
    FinishOp,
    OpResult,
    RenewOp,
    Report,
    Reservation,
    Response,
    ResumeEntry,
    ResumeOp,
)
from orbit_wire.model import Outcome


def _cancel(s: Session, res: Reservation, now: float) -> list[Action]:
    return s.frame_received(Cancel(res.attempt_id, res.epoch, "TASK_CANCELLED"), now)


def _told(actions: list[Action]) -> list[str]:
    return [a.attempt_id for a in actions if isinstance(a, CancelChild)]


def _finishes(actions: list[Action]) -> list[FinishOp]:
    return [op for r in requests(actions) for op in r.ops if isinstance(op, FinishOp)]


def _advance(s: Session, until: float) -> list[Action]:
    """Run the timer as the driver would, up to ``until`` (bounded)."""
    out: list[Action] = []
    for _ in range(100):
        when = s.next_timer()
        if when is None or when > until:
            break
        out += s.handle_timer(when)
    return out


def test_cancel_tells_the_child_then_kills_after_the_grace() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, cancel_grace_ms=500)
    acts = _cancel(s, res, 1.0)
    assert _told(acts) == [res.attempt_id] and kills(acts) == []
    assert ("cancel_received", "TASK_CANCELLED") in events(acts)
    # A repeated push changes nothing: the grace already runs.
    again = _cancel(s, res, 1.2)
    assert _told(again) == [] and kills(again) == []
    assert kills(_advance(s, 1.499)) == []
    acts = _advance(s, 1.5)
    (kill,) = kills(acts)
    assert kill.reason == "TASK_CANCELLED"
    acts = s.child_killed(res.attempt_id, Report(child_pid=4242, signal=9), 1.5)
    (finish,) = _finishes(acts)
    # The kill's cause is its code: never LEASE_LOST for a cancel.
    assert finish.outcome is Outcome.UNKNOWN and finish.code == "TASK_CANCELLED"
    assert finish.report.kill_reason == "TASK_CANCELLED"
    assert finish.report.ended_by == "KILLED"


def test_a_child_that_ends_within_the_grace_is_not_killed() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, cancel_grace_ms=2000)
    _cancel(s, res, 1.0)
    acts = s.execution_finished(res.attempt_id, FakeOutcome(), 1.3)
    assert kills(acts) == []
    (finish,) = _finishes(acts)
    assert finish.outcome is Outcome.SUCCEEDED  # what the handler returned, as it is
    assert finish.report.kill_reason is None and finish.report.ended_by == "COOPERATIVE"
    # The grace timer went with the attempt: nothing fires at its end.
    assert kills(_advance(s, 5.0)) == []


def test_the_grace_never_outlasts_the_local_lease() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=60_000)
    acts = _cancel(s, res, 1.0)
    assert _told(acts) == [res.attempt_id]
    # No renewal goes out any more (the server refuses them for a cancelled task), so the
    # lease granted at 0.0 ends at 3.0, long before the grace: the lease kill wins.
    later = _advance(s, 2.999)
    assert kills(later) == []
    assert not [op for r in requests(later) for op in r.ops if isinstance(op, RenewOp)]
    (kill,) = kills(_advance(s, 3.0))
    assert kill.reason == "LEASE_LOST"
    (finish,) = _finishes(s.child_killed(res.attempt_id, Report(child_pid=4242, signal=9), 3.0))
    assert finish.report.kill_reason == "LEASE_LOST" and finish.report.ended_by == "KILLED"


def test_a_zero_grace_kills_at_once() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, cancel_grace_ms=0)
    acts = _cancel(s, res, 1.0)
    assert _told(acts) == []
    (kill,) = kills(acts)
    assert kill.reason == "TASK_CANCELLED"
    (finish,) = _finishes(s.child_killed(res.attempt_id, Report(child_pid=4242, signal=9), 1.0))
    assert finish.report.ended_by == "KILLED"


def test_a_refused_renewal_in_flight_at_the_cancel_does_not_kill() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=1500)
    renewal = [r for r in requests(_advance(s, 1.01)) if isinstance(r.ops[0], RenewOp)]
    assert renewal, "a renewal is due at a third of the lease"
    (req,) = renewal
    _cancel(s, res, 1.1)
    refused = Response(req.id, (OpResult(req.ops[0].msg_id, False, ErrorCode.LEASE_EXPIRED,
                                         "task was cancelled"),))
    assert kills(s.frame_received(refused, 1.2)) == []
    (kill,) = kills(_advance(s, 2.6))
    assert kill.reason == "TASK_CANCELLED"


def test_a_resume_that_says_cancelled_leaves_the_grace_running() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=1000)
    _cancel(s, res, 0.5)
    s.connection_lost(0.6, "CUT")
    s.connected(0.8)
    (req,) = requests(s.frame_received(welcome(), 0.8))
    assert isinstance(req.ops[0], ResumeOp)
    lost = Response(req.id, (OpResult(req.ops[0].msg_id, True, attempts=(
        ResumeEntry(res.attempt_id, "LOST", reason="TASK_CANCELLED"),)),))
    assert kills(s.frame_received(lost, 0.9)) == []
    (kill,) = kills(_advance(s, 1.5))
    assert kill.reason == "TASK_CANCELLED"


def test_only_the_cancelled_attempt_stops_renewing() -> None:
    s, _ = ready(capacity=2)
    cancelled = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=5000)
    other = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=5000)
    _cancel(s, cancelled, 0.1)
    renewed = [op.attempt_id for r in requests(_advance(s, 1.1)) for op in r.ops
               if isinstance(op, RenewOp)]
    assert renewed == [other.attempt_id]


def test_a_cancel_learnt_from_a_resume_is_cooperative_too() -> None:
    # The push was lost with the connection: the resume's LOST / TASK_CANCELLED starts the
    # grace as the push would have.
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000, cancel_grace_ms=1000)
    s.connection_lost(0.5, "CUT")
    s.connected(0.6)
    (req,) = requests(s.frame_received(welcome(), 0.6))
    lost = Response(req.id, (OpResult(req.ops[0].msg_id, True, attempts=(
        ResumeEntry(res.attempt_id, "LOST", reason="TASK_CANCELLED"),)),))
    acts = s.frame_received(lost, 0.7)
    assert _told(acts) == [res.attempt_id] and kills(acts) == []
    (kill,) = kills(_advance(s, 1.7))
    assert kill.reason == "TASK_CANCELLED"
