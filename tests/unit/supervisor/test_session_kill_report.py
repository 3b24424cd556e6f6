"""The kill report leaves with the SIGKILL, the reap's facts follow, the margin is measured
and late lease timers are counted (issue 13 items 1 and 2), on a fake clock."""

from __future__ import annotations

from supervisor_session_harness import (
    FakeOutcome,
    kills,
    ok_for,
    ready,
    requests,
    run_one,
)

from orbit_supervisor.margin import MAX_MARGIN, WINDOW, MarginEstimator
from orbit_supervisor.session import LATE_KILL_BOUND, Phase
from orbit_wire.frames import Cancel, FinishOp, Report, Request
from orbit_wire.model import Outcome

SAMPLED = Report(child_pid=4242, signal=9, cpu_ms=290, peak_rss_bytes=8_000_000)
REAPED = Report(child_pid=4242, signal=9, cpu_ms=300, peak_rss_bytes=9_000_000,
                kill_reason="ATTEMPT_TIMEOUT", reap_ms=40)
KILLED = FakeOutcome(Outcome.UNKNOWN, "LEASE_LOST", result_json=None, report=REAPED)


def _finishes(request: Request) -> list[FinishOp]:
    return [op for op in request.ops if isinstance(op, FinishOp)]


def test_the_kill_report_goes_out_with_the_kill_and_says_how_long_ago() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=300, lease_ttl_ms=3000)
    acts = s.handle_timer(0.3)
    (kill,) = kills(acts)
    assert kill.reason == "ATTEMPT_TIMEOUT"
    acts = s.child_killed(res.attempt_id, SAMPLED, 0.301)
    (req,) = requests(acts)
    (finish,) = _finishes(req)
    assert (finish.outcome, finish.code) == (Outcome.UNKNOWN, "ATTEMPT_TIMEOUT")  # its cause
    assert finish.report == Report(child_pid=4242, signal=9, cpu_ms=290,
                                   peak_rss_bytes=8_000_000, kill_reason="ATTEMPT_TIMEOUT",
                                   renewals=0, kill_age_ms=0)
    # The slot stays taken until the reap: the dying child still holds it.
    assert s.attempts[res.attempt_id].phase is Phase.KILLING
    assert s.executing == 1


def test_a_kill_report_is_never_held_for_a_batch() -> None:
    # Four CPU-bound handlers on one CPU: finishes are held for the next ones (batching.py),
    # but a kill report is not, and the held finishes leave with it.
    s, _ = ready(capacity=4, cpus=1)
    running = [run_one(s, 0.0, lease_ms=3000) for _ in range(4)]
    for i, res in enumerate(running[:2]):
        acts = s.execution_finished(res.attempt_id, FakeOutcome(
            report=Report(child_pid=1, exit_code=0, cpu_ms=200)), 0.2 + i / 100)
        assert requests(acts) == []  # held
    victim = running[2]
    acts = s.frame_received(Cancel(victim.attempt_id, victim.epoch, "TASK_CANCELLED"), 0.215)
    assert [k.reason for k in kills(acts)] == ["TASK_CANCELLED"]
    (req,) = requests(s.child_killed(victim.attempt_id, SAMPLED, 0.215))
    assert [op.attempt_id for op in _finishes(req)] == [
        running[0].attempt_id, running[1].attempt_id, victim.attempt_id]
    assert _finishes(req)[2].report.kill_reason == "TASK_CANCELLED"


def test_a_reap_before_the_send_joins_the_kill_report() -> None:
    s, _ = ready()
    victim = run_one(s, 0.0, lease_ms=3000)
    (renew_req,) = requests(s.handle_timer(1.0))  # a request in flight: the report waits
    s.handle_timer(3.0)
    assert requests(s.child_killed(victim.attempt_id, SAMPLED, 3.0)) == []
    (queued,) = [op for op in s.queued_ops() if isinstance(op, FinishOp)]
    assert queued.report.reap_ms is None
    s.execution_finished(victim.attempt_id, KILLED, 3.04)
    (finish,) = [op for op in s.queued_ops() if isinstance(op, FinishOp)]
    assert finish.msg_id == queued.msg_id
    assert (finish.report.reap_ms, finish.report.cpu_ms, finish.report.peak_rss_bytes) == (
        40, 300, 9_000_000)
    assert s.attempts[victim.attempt_id].phase is Phase.REPORTING
    acts = s.frame_received(ok_for(renew_req), 3.05)
    (req,) = requests(acts)
    (sent,) = _finishes(req)
    assert sent.report.kill_age_ms == 50  # the kill was at 3.0, the send at 3.05
    s.frame_received(ok_for(req), 3.06)
    assert victim.attempt_id not in s.attempts


def test_a_reap_after_the_send_follows_in_a_second_finish() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000)
    s.handle_timer(3.0)
    (req,) = requests(s.child_killed(res.attempt_id, SAMPLED, 3.0))
    acts = s.frame_received(ok_for(req), 3.01)  # confirmed before the reap
    assert requests(acts) == []
    assert s.attempts[res.attempt_id].phase is Phase.KILLING and s.executing == 1
    acts = s.execution_finished(res.attempt_id, KILLED, 3.05)
    assert res.attempt_id not in s.attempts and s.executing == 0
    (follow_req,) = requests(acts)
    (follow,) = _finishes(follow_req)
    assert follow.msg_id != req.ops[0].msg_id and follow.attempt_id == res.attempt_id
    assert (follow.report.reap_ms, follow.report.kill_age_ms) == (40, 50)
    assert follow.report.kill_reason == "LEASE_LOST"
    # Its answer changes nothing; the slot it frees was freed by the reap already.
    before = s.stats()
    s.frame_received(ok_for(follow_req), 3.06)
    assert s.stats().reports_confirmed == before.reports_confirmed


def test_a_late_lease_timer_is_counted_and_said_on_the_kill() -> None:
    s, _ = ready()
    on_time, late = run_one(s, 0.0, lease_ms=1000), run_one(s, 0.0, lease_ms=2000)
    (kill,) = kills(s.handle_timer(1.0 + LATE_KILL_BOUND / 2))
    assert kill.attempt_id == on_time.attempt_id and s.stats().late_kills == 0
    (kill,) = kills(s.handle_timer(2.0 + 3 * LATE_KILL_BOUND))
    assert kill.attempt_id == late.attempt_id
    assert abs(kill.late_by - 3 * LATE_KILL_BOUND) < 1e-9
    assert s.stats().late_kills == 1


def test_the_margin_grows_with_what_is_measured_and_applies_to_new_grants() -> None:
    s, _ = ready(report_margin=0.05)
    assert s.stats().margin_ms == 50
    s.loop_lag(0.030)
    assert s.stats().margin_ms == 50  # 30 ms of lag alone is under the floor
    res = run_one(s, 0.0, lease_ms=3000)  # its round trip is 0 here
    acts = s.handle_timer(2.949)  # sends the renewal
    assert kills(acts) == []
    acts += s.handle_timer(2.95)
    assert kills(acts)
    acts += s.child_killed(res.attempt_id, SAMPLED, 2.95)
    acts += s.execution_finished(res.attempt_id, KILLED, 2.99)  # reaped 40 ms after the kill
    for _ in range(4):  # answer what is in flight (the renewal, the finishes)
        sent = requests(acts)
        if not sent:
            break
        acts = s.frame_received(ok_for(sent[-1]), 2.99)
    assert not s.attempts
    # 30 ms of lag + the 40 ms reap (the renewal's 41 ms round trip is not part of it).
    assert abs(s.stats().margin_ms - 70) < 1e-6
    assert abs(s.stats().loop_lag_ms - 30) < 1e-6 and abs(s.stats().reap_ms - 40) < 1e-6
    nxt = run_one(s, 10.0, lease_ms=3000)
    assert kills(s.handle_timer(12.929)) == []
    (kill,) = kills(s.handle_timer(12.93))
    assert kill.attempt_id == nxt.attempt_id


def test_margin_estimator_bounds_and_window() -> None:
    m = MarginEstimator(0.05)
    assert m.value() == 0.05  # nothing measured: the floor
    m.reap(0.02)
    m.loop_lag(0.01)
    assert m.value() == 0.05  # 30 ms is under the floor
    m.reap(0.06)
    assert abs(m.value() - (0.01 + 0.06)) < 1e-9  # the largest recent of each
    m.loop_lag(0.5)
    assert m.value() == MAX_MARGIN  # a stalled loop cannot take the whole attempt
    for _ in range(WINDOW + 8):  # the stall leaves the window
        m.loop_lag(0.0)
        m.reap(0.01)
    assert m.value() == 0.05
    m.loop_lag(-1.0)  # a clock quirk never lowers a margin below the floor
    assert m.value() == 0.05
    off = MarginEstimator(0.0)  # a floor of 0 turns the margin off
    off.reap(0.2)
    assert off.value() == 0.0
