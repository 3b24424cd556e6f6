"""A handler's progress in the pure session (fake clock): notes kept on the attempt ride the
next renewal at most once and the finish what no confirmed renewal carried, never a request
of their own; a handler silent for its progress timeout is killed PROGRESS_TIMEOUT at that
instant through the session's timer."""

from __future__ import annotations

import msgspec
import pytest
from supervisor_session_harness import (
    FakeOutcome,
    events,
    kills,
    ok_for,
    ready,
    requests,
    reservation,
)

from orbit_supervisor.actions import Action, Execute
from orbit_supervisor.attempts import Attempt, RunEvent
from orbit_supervisor.progress import AttemptProgress, checked_progress
from orbit_supervisor.session import Session
from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import (
    Cancel,
    FinishOp,
    OpResult,
    Progress,
    RenewOp,
    Report,
    Reserve,
    Response,
)
from orbit_wire.limits import MAX_PROGRESS_BYTES
from orbit_wire.model import Outcome


def _start(s: Session, now: float, *, progress_timeout_ms: int | None = None,
           lease_ms: int = 3000, cancel_grace_ms: int = 0) -> Attempt:
    res = msgspec.structs.replace(reservation(cancel_grace_ms=cancel_grace_ms),
                                  progress_timeout_ms=progress_timeout_ms)
    (req,) = requests(s.frame_received(Reserve((res,)), now))
    acts = s.frame_received(ok_for(req, lease_ms), now)
    (execute,) = [a for a in acts if isinstance(a, Execute)]
    return execute.attempt


def _advance(s: Session, until: float) -> tuple[list[Action], list[float]]:
    """Run the timer as the driver would up to ``until`` (bounded); the instants it ran."""
    out: list[Action] = []
    at: list[float] = []
    for _ in range(100):
        when = s.next_timer()
        if when is None or when > until:
            break
        at.append(when)
        out += s.handle_timer(when)
    return out, at


def _ops(actions: list[Action], kind: type) -> list:
    return [op for r in requests(actions) for op in r.ops if isinstance(op, kind)]


def _answer(s: Session, acts: list[Action], now: float) -> list[Action]:
    (req,) = requests(acts)
    return s.frame_received(ok_for(req), now)


def _note(att: Attempt, now: float, fraction: float | None = None,
          details: str | None = None) -> None:
    """What the pool does with a child's checked note."""
    att.progress.note(checked_progress(fraction, details), now)


# ------------------------------------------------------------------ coalescing


def test_notes_ride_the_next_renewal_once_and_never_make_a_request() -> None:
    s, _ = ready()
    att = _start(s, 0.0)
    _note(att, 0.2, 0.1, '{"i":1}')
    _note(att, 0.5, 0.3)  # a fraction only: the details stay
    # The notes are not inputs: the only timer is the lease's renewal (a third of 3 s).
    assert s.next_timer() == pytest.approx(1.0)
    acts, _ = _advance(s, 0.99)
    assert requests(acts) == []
    acts, _ = _advance(s, 1.0)
    (renew,) = _ops(acts, RenewOp)
    assert renew.progress == Progress(fraction=0.3, details_json='{"i":1}')
    _answer(s, acts, 1.01)
    # Nothing new: the next renewal carries nothing, and neither does the finish.
    acts, _ = _advance(s, 2.1)
    (renew,) = _ops(acts, RenewOp)
    assert renew.progress is None
    _answer(s, acts, 2.1)
    acts = s.execution_finished(att.attempt_id, FakeOutcome(), 2.2)
    (finish,) = _ops(acts, FinishOp)
    assert finish.progress is None


def test_the_finish_carries_what_no_renewal_carried() -> None:
    s, _ = ready()
    att = _start(s, 0.0)
    _note(att, 0.1, 0.5, '{"i":5}')
    acts, _ = _advance(s, 1.0)
    _answer(s, acts, 1.0)
    _note(att, 1.2, 0.9)
    acts = s.execution_finished(att.attempt_id, FakeOutcome(
        outcome=Outcome.FAILED, code="BOOM", result_json=None, details_json="{}"), 1.3)
    (finish,) = _ops(acts, FinishOp)
    # The whole latest state goes, the details given earlier included.
    assert finish.progress == Progress(fraction=0.9, details_json='{"i":5}')


def test_a_renewal_that_fails_leaves_its_progress_for_the_next_one() -> None:
    s, _ = ready()
    att = _start(s, 0.0)
    _note(att, 0.1, 0.25)
    acts, _ = _advance(s, 1.0)
    (req,) = requests(acts)
    (renew,) = req.ops
    assert isinstance(renew, RenewOp) and renew.progress is not None
    s.frame_received(Response(req.id, (OpResult(renew.msg_id, False,
                                                error_code=ErrorCode.UNAVAILABLE),)), 1.0)
    acts, _ = _advance(s, 1.1)
    (again,) = _ops(acts, RenewOp)
    assert again.progress == Progress(fraction=0.25)


def test_a_kill_report_carries_the_last_progress() -> None:
    s, _ = ready()
    att = _start(s, 0.0, lease_ms=3000)
    _note(att, 0.1, 0.4, '{"done":[1,2]}')
    acts, _ = _advance(s, 1.0)
    (renew,) = _ops(acts, RenewOp)
    # Killed while that renewal is in flight: the report carries the progress again.
    kill_acts = s.frame_received(msgspec.structs.replace(
        ok_for(requests(acts)[0]), results=(OpResult(renew.msg_id, False,
                                                     error_code=ErrorCode.LEASE_EXPIRED),)),
        1.05)
    assert [k.reason for k in kills(kill_acts)] == ["LEASE_LOST"]
    acts = s.child_killed(att.attempt_id, Report(child_pid=7, signal=9), 1.06)
    (finish,) = _ops(acts, FinishOp)
    assert finish.progress == Progress(fraction=0.4, details_json='{"done":[1,2]}')


# ------------------------------------------------------------------ the progress timeout


def test_a_silent_handler_is_killed_at_its_progress_timeout() -> None:
    s, _ = ready()
    att = _start(s, 0.0, progress_timeout_ms=500)
    assert s.next_timer() == pytest.approx(0.5)
    _note(att, 0.3, 0.1)
    # The timer the driver armed for 0.5 finds nothing due; it is armed again for 0.8.
    assert kills(s.handle_timer(0.5)) == []
    assert s.next_timer() == pytest.approx(0.8)
    assert kills(_advance(s, 0.79)[0]) == []
    acts, _ = _advance(s, 0.8)
    (kill,) = kills(acts)
    assert kill.reason == "PROGRESS_TIMEOUT"
    assert ("killed", "PROGRESS_TIMEOUT") in events(acts)
    acts = s.child_killed(att.attempt_id, Report(child_pid=7, signal=9), 0.8)
    (finish,) = _ops(acts, FinishOp)
    assert finish.outcome is Outcome.UNKNOWN and finish.code == "PROGRESS_TIMEOUT"
    assert finish.report.kill_reason == "PROGRESS_TIMEOUT"
    assert finish.progress == Progress(fraction=0.1)


def test_notes_keep_a_handler_alive_past_its_timeout() -> None:
    s, _ = ready()
    att = _start(s, 0.0, progress_timeout_ms=400)
    for step in range(1, 30):  # a note every 0.3 s, for 8.7 s (renewals keep the lease)
        now = step * 0.3
        acts, _ = _advance(s, now)
        assert kills(acts) == []
        for req in requests(acts):
            s.frame_received(ok_for(req), now)
        _note(att, now)  # a sign of life without news
    acts, _ = _advance(s, 8.7 + 0.4)
    assert [k.reason for k in kills(acts)] == ["PROGRESS_TIMEOUT"]


def test_without_a_progress_timeout_only_the_lease_times_the_attempt() -> None:
    s, _ = ready()
    att = _start(s, 0.0)
    assert att.progress.deadline(att.reservation.progress_timeout_ms) is None
    assert s.next_timer() == pytest.approx(1.0)  # the renewal


def test_a_prefetched_attempt_waiting_for_a_child_is_not_timed() -> None:
    s, _ = ready()
    att = _start(s, 0.0, progress_timeout_ms=200)
    att.move_run(RunEvent.QUEUED)  # the pool has no free child for it yet
    assert s.next_timer() == pytest.approx(1.0)
    att.move_run(RunEvent.GIVEN)
    att.progress.alive(0.9)  # the pool: its handler starts now
    acts, _ = _advance(s, 1.0)
    assert kills(acts) == []
    for req in requests(acts):
        s.frame_received(ok_for(req), 1.0)
    acts, _ = _advance(s, 1.1)
    assert [k.reason for k in kills(acts)] == ["PROGRESS_TIMEOUT"]


def test_a_cancel_grace_is_not_cut_short_by_the_progress_timeout() -> None:
    s, _ = ready()
    att = _start(s, 0.0, progress_timeout_ms=300, cancel_grace_ms=1000)
    s.frame_received(Cancel(att.attempt_id, att.reservation.epoch, "TASK_CANCELLED"), 0.1)
    acts, _ = _advance(s, 1.1)
    assert [k.reason for k in kills(acts)] == ["TASK_CANCELLED"]


# ------------------------------------------------------------------ the notes' rules


@pytest.mark.parametrize(("fraction", "details"), [
    (True, None), ("0.5", None), (float("nan"), None), (1.5, None), (-0.1, None),
    (None, 12), (None, "{"), (None, '{"n": 1e999}'), (None, "null"),
    (None, '"' + "x" * MAX_PROGRESS_BYTES + '"'),
])
def test_a_note_breaking_the_rules_is_refused(fraction: object, details: object) -> None:
    with pytest.raises(ValueRejected):
        checked_progress(fraction, details)


def test_a_valid_note_is_kept_as_given() -> None:
    assert checked_progress(1, '[]') == Progress(fraction=1.0, details_json="[]")
    assert checked_progress(None, None) == Progress()


def test_notes_merge_field_by_field() -> None:
    p = AttemptProgress()
    p.note(Progress(0.1, '{"a":1}'), 1.0)
    p.note(Progress(None, '{"a":2}'), 2.0)
    p.note(Progress(), 3.0)  # a sign of life: nothing new to carry
    assert p.latest == Progress(0.1, '{"a":2}') and p.alive_at == 3.0
    assert p.for_renewal() == Progress(0.1, '{"a":2}')
    assert p.for_renewal() is None  # one in flight carries it already
    p.renewal_answered(True)
    assert p.for_finish() is None
    p.note(Progress(0.2), 4.0)
    assert p.for_finish() == Progress(0.2, '{"a":2}')
    assert p.deadline(500) == pytest.approx(4.5) and p.deadline(None) is None
