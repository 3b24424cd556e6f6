"""The pure session core (session.py) driven by hand on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest
from supervisor_session_harness import (
    CAP,
    FakeOutcome,
    credits,
    events,
    executes,
    frames,
    kills,
    kinds,
    make_session,
    ok_for,
    ready,
    requests,
    reservation,
    run_ends,
    run_one,
    welcome,
)

from orbit_supervisor.actions import CloseConnection, Connect
from orbit_supervisor.core import FINAL_REPORTS_WINDOW
from orbit_supervisor.errors import FatalSessionError, ShutdownTimeoutError
from orbit_supervisor.session import Phase, Session
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    Cancel,
    ClaimOp,
    ErrorFrame,
    FinishOp,
    Heartbeat,
    Hello,
    OpResult,
    RenewOp,
    Report,
    Reserve,
    Response,
    ResumeEntry,
    ResumeOp,
    StartOp,
)
from orbit_wire.model import Capability, Disposition, Outcome, TaskState


def test_hello_then_credit_only_after_welcome() -> None:
    s = make_session(capacity=3)
    assert s.start(0.0) == [Connect(0.0)]
    acts = s.connected(0.0)
    (hello,) = frames(acts)
    assert isinstance(hello, Hello) and hello.capacity == 3 and hello.capabilities == (CAP,)
    assert credits(acts) == 0
    acts = s.frame_received(welcome(), 0.1)
    assert credits(acts) == 3
    assert s.outstanding_credit == 3


def test_hello_carries_the_labels_only_when_there_are_some() -> None:
    s = make_session()
    s.start(0.0)
    (hello,) = frames(s.connected(0.0))
    assert isinstance(hello, Hello) and hello.labels is None
    s = Session(replace(s.config, labels=(("gpu", "a100"),)), lambda: 0.5)
    s.start(0.0)
    (hello,) = frames(s.connected(0.0))
    assert isinstance(hello, Hello) and hello.labels == {"gpu": "a100"}


def test_secrets_are_not_in_the_config_repr() -> None:
    s = make_session()
    assert "secret" not in repr(s.config).replace("_secret", "")


def test_handler_runs_only_after_the_start_is_confirmed() -> None:
    s, _ = ready()
    res = reservation()
    acts = s.frame_received(Reserve((res,)), 1.0)
    assert executes(acts) == []
    (req,) = requests(acts)
    (start,) = req.ops
    assert isinstance(start, StartOp) and start.attempt_id == res.attempt_id
    acts = s.frame_received(ok_for(req), 1.2)
    assert executes(acts) == [res.attempt_id]
    assert s.attempts[res.attempt_id].lease.expires_at == pytest.approx(4.0)  # sent 1.0 + 3 s


def test_rejected_start_never_runs_and_frees_the_slot() -> None:
    s, _ = ready(capacity=1)
    res = reservation()
    (req,) = requests(s.frame_received(Reserve((res,)), 1.0))
    answer = Response(req.id, (OpResult(req.ops[0].msg_id, False, ErrorCode.STALE_EPOCH),))
    acts = s.frame_received(answer, 1.1)
    assert executes(acts) == []
    assert res.attempt_id not in s.attempts
    assert ("start_rejected", "STALE_EPOCH") in events(acts)
    assert credits(acts) == 1  # the slot is offered again


def test_duplicate_reservation_and_duplicate_confirmation_only_reconcile() -> None:
    s, _ = ready()
    res = reservation()
    (req,) = requests(s.frame_received(Reserve((res,)), 1.0))
    acts = s.frame_received(Reserve((res,)), 1.0)  # delivered twice
    assert ("reservation_dropped", "DUPLICATE") in events(acts)
    assert executes(s.frame_received(ok_for(req), 1.1)) == [res.attempt_id]
    # The reservation delivered again after the start never runs it a second time.
    assert executes(s.frame_received(Reserve((res,)), 1.2)) == []
    assert s.attempts[res.attempt_id].phase is Phase.RUNNING


def test_one_request_in_flight_and_queued_ops_go_in_one_batch() -> None:
    s, _ = ready(capacity=4)
    r1, r2, r3 = reservation(), reservation(), reservation()
    (req1,) = requests(s.frame_received(Reserve((r1,)), 1.0))
    acts = s.frame_received(Reserve((r2, r3)), 1.01)
    assert requests(acts) == []  # one in flight: the others wait
    acts = s.frame_received(ok_for(req1), 1.02)
    (req2,) = requests(acts)
    assert [op.attempt_id for op in req2.ops if isinstance(op, StartOp)] == [
        r2.attempt_id, r3.attempt_id]


def test_batch_respects_max_batch_ops() -> None:
    s = make_session(capacity=5)
    s.start(0.0)
    s.connected(0.0)
    s.frame_received(welcome(max_batch_ops=2), 0.0)
    rs = tuple(reservation() for _ in range(5))
    (req1,) = requests(s.frame_received(Reserve(rs), 1.0))
    assert len(req1.ops) == 2
    (req2,) = requests(s.frame_received(ok_for(req1), 1.0))
    assert len(req2.ops) == 2


def test_renewal_at_a_third_of_the_remaining_lease_and_shorter_lease_adopted() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000)
    att = s.attempts[res.attempt_id]
    assert s.next_timer() == pytest.approx(1.0)
    acts = s.handle_timer(1.0)
    (req,) = requests(acts)
    (renew,) = req.ops
    assert isinstance(renew, RenewOp)
    # The server answers a shorter lease: adopted at once, from the renewal's send time.
    acts = s.frame_received(ok_for(req, lease_ms=600), 1.1)
    assert att.lease.expires_at == pytest.approx(1.6)
    assert att.lease.renewals == 1 and s.renewals_confirmed == 1
    assert kills(s.handle_timer(1.59)) == []


def test_only_one_renewal_per_attempt_is_ever_queued() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000)
    (req,) = requests(s.handle_timer(1.0))  # renewal in flight, never answered
    for t in (1.5, 2.0, 2.5):
        assert requests(s.handle_timer(t)) == []
    queued = [op for op in s.queued_ops() if isinstance(op, RenewOp)]
    assert queued == []
    assert s.attempts[res.attempt_id].lease.renewing
    del req


def test_stuck_request_never_extends_execution() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000)
    (req,) = requests(s.handle_timer(1.0))  # renewal sent, the answer is stuck
    acts = s.handle_timer(3.0)
    (kill,) = kills(acts)
    assert kill.attempt_id == res.attempt_id and kill.reason == "LEASE_LOST"
    # The late answer (a full fresh lease) does not revive it.
    acts = s.frame_received(ok_for(req, lease_ms=3000), 3.1)
    assert executes(acts) == [] and kills(acts) == []
    att = s.attempts[res.attempt_id]
    assert att.phase is Phase.KILLING and att.lease.lost


def test_local_expiry_kills_and_reports_unknown_lease_lost() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=3000)
    acts = s.handle_timer(3.0)
    assert [(k.attempt_id, k.reason, k.code) for k in kills(acts)] == [
        (res.attempt_id, "LEASE_LOST", "LEASE_LOST")]
    killed = FakeOutcome(Outcome.UNKNOWN, "LEASE_LOST", result_json=None)
    acts = s.execution_finished(res.attempt_id, killed, 3.05)
    finish = next(op for r in requests(acts) for op in r.ops if isinstance(op, FinishOp))
    assert finish.outcome is Outcome.UNKNOWN and finish.code == "LEASE_LOST"
    assert finish.report.kill_reason == "LEASE_LOST" and finish.result_json is None


def test_report_margin_kills_before_the_granted_expiry() -> None:
    # The supervisor kills 50 ms early, so its LEASE_LOST report lands while the lease holds.
    s, _ = ready(report_margin=0.05)
    res = run_one(s, 0.0, lease_ms=3000)
    assert kills(s.handle_timer(2.94)) == []
    (kill,) = kills(s.handle_timer(2.95))
    assert kill.attempt_id == res.attempt_id and kill.reason == "LEASE_LOST"


def test_capped_lease_expiry_is_an_attempt_timeout() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=500, lease_ttl_ms=3000)
    (kill,) = kills(s.handle_timer(0.5))
    assert kill.attempt_id == res.attempt_id and kill.reason == "ATTEMPT_TIMEOUT"
    # Its cause is its code, not LEASE_LOST.
    assert kill.code == "ATTEMPT_TIMEOUT"
    acts = s.child_killed(res.attempt_id, Report(child_pid=4242, signal=9), 0.5)
    finish = next(op for r in requests(acts) for op in r.ops if isinstance(op, FinishOp))
    assert (finish.code, finish.report.kill_reason) == ("ATTEMPT_TIMEOUT", "ATTEMPT_TIMEOUT")


def test_stale_renewal_answer_kills_at_once() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    (req,) = requests(s.handle_timer(1.0))
    answer = Response(req.id, (OpResult(req.ops[0].msg_id, False, ErrorCode.LEASE_EXPIRED),))
    (kill,) = kills(s.frame_received(answer, 1.1))
    assert kill.attempt_id == res.attempt_id and kill.reason == "LEASE_LOST"


def test_transient_renewal_error_keeps_the_lease_and_retries() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    (req,) = requests(s.handle_timer(1.0))
    answer = Response(req.id, (OpResult(req.ops[0].msg_id, False, ErrorCode.UNAVAILABLE),))
    assert kills(s.frame_received(answer, 1.1)) == []
    (req2,) = requests(s.handle_timer(1.2))
    assert isinstance(req2.ops[0], RenewOp) and req2.ops[0].attempt_id == res.attempt_id


def test_cancel_push_kills_with_task_cancelled() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    acts = s.frame_received(Cancel(res.attempt_id, res.epoch + 1, "TASK_CANCELLED"), 0.5)
    assert kills(acts) == []  # another epoch: not ours
    (kill,) = kills(s.frame_received(Cancel(res.attempt_id, res.epoch, "TASK_CANCELLED"), 0.5))
    assert kill.reason == "TASK_CANCELLED"


def test_cancel_during_start_means_the_handler_never_runs() -> None:
    s, _ = ready()
    res = reservation()
    (req,) = requests(s.frame_received(Reserve((res,)), 0.0))
    s.frame_received(Cancel(res.attempt_id, res.epoch, "TASK_CANCELLED"), 0.1)
    acts = s.frame_received(ok_for(req), 0.2)
    assert executes(acts) == []
    finish = next(op for r in requests(acts) for op in r.ops if isinstance(op, FinishOp))
    assert finish.outcome is Outcome.UNKNOWN and finish.report.kill_reason == "TASK_CANCELLED"
    assert finish.code == "TASK_CANCELLED"


def test_late_start_confirmation_never_runs_the_handler() -> None:
    s, _ = ready()
    res = reservation(lease_ttl_ms=1000)
    (req,) = requests(s.frame_received(Reserve((res,)), 0.0))
    acts = s.frame_received(ok_for(req, lease_ms=1000), 1.5)
    assert executes(acts) == []
    assert ("not_run", "LEASE_LOST") in events(acts)


def test_finish_carries_the_outcome_and_the_report() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    failed = FakeOutcome(Outcome.FAILED, "OBJECT_REJECTED", result_json='{"x":1}',
                         details_json='{"why":"no"}')
    acts = s.execution_finished(res.attempt_id, failed, 0.5)
    (req,) = requests(acts)
    assert kinds(req) == ["finish", "claim"]  # the freed slot is claimed in the same request
    finish = req.ops[0]
    assert isinstance(finish, FinishOp)
    assert (finish.outcome, finish.code, finish.details_json, finish.result_json) == (
        Outcome.FAILED, "OBJECT_REJECTED", '{"why":"no"}', None)
    assert finish.report.child_pid == 4242 and finish.report.renewals == 0
    acts = s.frame_received(ok_for(req), 0.6)
    assert ("report_confirmed", "ACCEPTED") in events(acts)
    assert s.reports_confirmed == 1 and not s.attempts


def test_evidence_only_counts_as_confirmed() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.5))
    answer = Response(req.id, (OpResult(req.ops[0].msg_id, True,
                                        disposition=Disposition.EVIDENCE_ONLY,
                                        task_state=TaskState.FAILED),
                               *ok_for(req).results[1:]))
    s.frame_received(answer, 0.6)
    assert s.evidence_confirmed == 1 and s.reports_confirmed == 0 and not s.attempts


def test_credit_is_free_slots_minus_outstanding_credit() -> None:
    s, acts = ready(capacity=3)
    assert credits(acts) == 3
    res = run_one(s, 0.0)  # one reservation spent one credit
    assert s.outstanding_credit == 2
    # Replacing a child takes the slot: not offered, not even in the finish's request.
    assert credits(s.slots_being_replaced(1, 0.45)) == 0
    # Result unconfirmed: the slot is not offered while its report is unconfirmed.
    acts = s.execution_finished(res.attempt_id, FakeOutcome(), 0.5)
    assert credits(acts) == 0
    (req,) = requests(acts)
    assert kinds(req) == ["finish"]  # nothing to claim: the slot is being replaced
    assert credits(s.frame_received(ok_for(req), 0.6)) == 0
    acts = s.slots_being_replaced(0, 0.7)
    assert credits(acts) == 1
    assert s.outstanding_credit == 3


def test_reservations_beyond_twice_capacity_are_dropped() -> None:
    s, _ = ready(capacity=1)
    rs = tuple(reservation() for _ in range(3))
    acts = s.frame_received(Reserve(rs), 0.0)
    assert len(s.attempts) == 2
    assert ("reservation_dropped", "OVER_BOUND") in events(acts)
    assert s.dropped_reservations == 1


def test_start_waits_for_a_free_child_slot() -> None:
    s, _ = ready(capacity=1)
    r1, r2 = reservation(), reservation()
    (req,) = requests(s.frame_received(Reserve((r1, r2)), 0.0))
    assert [op.attempt_id for op in req.ops if isinstance(op, StartOp)] == [r1.attempt_id]
    s.frame_received(ok_for(req), 0.1)
    (req2,) = requests(s.execution_finished(r1.attempt_id, FakeOutcome(), 0.2))
    assert sorted(kinds(req2)) == ["finish", "start"]  # the freed slot goes to r2: no claim


def test_unknown_capability_is_dropped() -> None:
    s, _ = ready()
    res = reservation(capability=Capability("other", "v1", "v1"))
    acts = s.frame_received(Reserve((res,)), 0.0)
    assert ("reservation_dropped", "UNKNOWN_CAPABILITY") in events(acts)
    assert not s.attempts


def test_reconnect_resumes_before_credit_and_resends_with_original_msg_ids() -> None:
    s, _ = ready(capacity=2)
    running = run_one(s, 0.0)
    done = run_one(s, 0.0)
    (req,) = requests(s.execution_finished(done.attempt_id, FakeOutcome(), 0.5))
    finish, claim = req.ops
    assert isinstance(claim, ClaimOp) and claim.count == 1
    waiting = reservation()
    s.frame_received(Reserve((waiting,)), 0.6)  # held back: no free slot
    acts = s.connection_lost(0.7, "CONNECTION_LOST")
    (connect,) = [a for a in acts if isinstance(a, Connect)]
    assert connect.delay >= 0.2
    assert waiting.attempt_id not in s.attempts  # the server releases unstarted reservations
    s.connected(1.0)
    acts = s.frame_received(welcome(), 1.1)
    assert credits(acts) == 0
    (resume_req,) = requests(acts)
    (resume,) = resume_req.ops
    assert isinstance(resume, ResumeOp)
    assert {r.attempt_id for r in resume.attempts} == {running.attempt_id, done.attempt_id}
    answer = Response(resume_req.id, (OpResult(resume.msg_id, True, attempts=(
        ResumeEntry(running.attempt_id, "RUNNING", 3000),
        ResumeEntry(done.attempt_id, "RUNNING", 3000))),))
    acts = s.frame_received(answer, 1.2)
    (resent,) = requests(acts)
    # The finish and the claim whose answers were lost go again with their msg_ids.
    assert [op.msg_id for op in resent.ops] == [finish.msg_id, claim.msg_id]
    assert s.reconnects == 1
    assert executes(acts) == []
    # Both slots are taken (one running, one unconfirmed, the claim's answer unknown).
    assert credits(acts) == 0
    assert credits(s.frame_received(ok_for(resent), 1.3)) == 0
    assert s.outstanding_credit == 1  # the claim found no work: its slot is credit


def test_resume_lost_attempt_is_killed() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    s.connection_lost(0.1, "CONNECTION_LOST")
    s.connected(0.5)
    (resume_req,) = requests(s.frame_received(welcome(), 0.5))
    answer = Response(resume_req.id, (OpResult(resume_req.ops[0].msg_id, True, attempts=(
        ResumeEntry(res.attempt_id, "LOST", reason="LEASE_EXPIRED"),)),))
    (kill,) = kills(s.frame_received(answer, 0.6))
    assert kill.attempt_id == res.attempt_id and kill.reason == "LEASE_LOST"


def test_resent_start_after_reconnect_keeps_its_msg_id_and_send_time() -> None:
    s, _ = ready()
    res = reservation()
    (req,) = requests(s.frame_received(Reserve((res,)), 0.0))
    (start,) = req.ops
    s.connection_lost(0.1, "CONNECTION_LOST")
    s.connected(0.3)
    (again,) = requests(s.frame_received(welcome(), 0.3))  # no resume: nothing started
    assert [op.msg_id for op in again.ops] == [start.msg_id]
    assert executes(s.frame_received(ok_for(again, lease_ms=3000), 0.4)) == [res.attempt_id]
    assert s.attempts[res.attempt_id].lease.expires_at == pytest.approx(3.0)  # first send 0.0


def test_network_outage_still_kills_at_local_expiry() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=2000)
    s.connection_lost(0.1, "CONNECTION_LOST")
    when = s.next_timer()
    assert when is not None and when <= 2.0
    (kill,) = kills(s.handle_timer(2.0))
    assert kill.attempt_id == res.attempt_id


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    s = make_session(rng=1.0)
    s.start(0.0)
    delays = []
    for i in range(10):
        (c,) = [a for a in s.connect_failed(float(i), "REFUSED") if isinstance(a, Connect)]
        delays.append(c.delay)
    assert delays[0] == pytest.approx(0.2)
    assert delays[1] == pytest.approx(0.4)
    assert delays[-1] == pytest.approx(5.0)
    low = make_session(rng=0.0)
    low.start(0.0)
    (c,) = [a for a in low.connect_failed(0.0, "REFUSED") if isinstance(a, Connect)]
    assert c.delay == pytest.approx(0.2)  # never below the minimum


@pytest.mark.parametrize("code", sorted(ErrorCode.__members__.values()))
def test_fatal_codes_end_run_and_others_reconnect(code: ErrorCode) -> None:
    from orbit_wire.errors import FATAL_CODES

    s, _ = ready()
    acts = s.frame_received(ErrorFrame(code, "no", retryable=False, fatal=True), 0.5)
    if code in FATAL_CODES:
        (fin,) = run_ends(acts)
        assert isinstance(fin.error, FatalSessionError) and fin.error.code == code
    else:
        assert run_ends(acts) == [] and acts == [CloseConnection(str(code))]


def test_out_of_order_response_is_a_protocol_error() -> None:
    s, _ = ready()
    (fin,) = run_ends(s.frame_received(Response(99, ()), 0.1))
    assert isinstance(fin.error, FatalSessionError) and fin.error.code == "OUT_OF_ORDER"


def test_heartbeat_and_silent_server() -> None:
    s, _ = ready()  # heartbeat 1 s, session TTL 3 s
    assert s.next_timer() == pytest.approx(1.0)
    acts = s.handle_timer(1.0)
    assert [f for f in frames(acts) if isinstance(f, Heartbeat)]
    s.handle_timer(2.0)
    acts = s.handle_timer(3.0)
    assert CloseConnection("SERVER_SILENT") in acts


def test_drain_runs_what_was_reserved_before_the_drain_answer() -> None:
    s, _ = ready(capacity=2)
    r1 = run_one(s, 0.0)
    acts = s.request_stop(0.5)
    (req,) = requests(acts)
    assert [op.op for op in req.ops] == ["drain"]
    assert credits(acts) == 0
    r2 = reservation()
    s.frame_received(Reserve((r2,)), 0.6)  # in transit before the drain answer: ours to run
    (req2,) = requests(s.frame_received(ok_for(req), 0.7))
    assert [op.op for op in req2.ops] == ["start"]
    assert executes(s.frame_received(ok_for(req2), 0.8)) == [r2.attempt_id]
    late = reservation()
    acts = s.frame_received(Reserve((late,)), 0.9)
    assert ("reservation_dropped", "AFTER_DRAIN") in events(acts)
    (req3,) = requests(s.execution_finished(r1.attempt_id, FakeOutcome(), 1.0))
    assert run_ends(s.frame_received(ok_for(req3), 1.1)) == []
    (req4,) = requests(s.execution_finished(r2.attempt_id, FakeOutcome(), 1.2))
    (fin,) = run_ends(s.frame_received(ok_for(req4), 1.3))
    assert fin.error is None


def test_shutdown_timeout_kills_and_reports_counts() -> None:
    s, _ = ready(capacity=2, shutdown_timeout=2.0)
    r1 = run_one(s, 0.0, lease_ms=30000, lease_ttl_ms=30000)
    r2 = run_one(s, 0.0, lease_ms=30000, lease_ttl_ms=30000)
    (fin_req,) = requests(s.execution_finished(r2.attempt_id, FakeOutcome(), 0.2))
    s.request_stop(1.0)
    acts = s.handle_timer(3.0)
    assert [(k.attempt_id, k.reason) for k in kills(acts)] == [(r1.attempt_id, "SHUTDOWN")]
    assert run_ends(acts) == []  # the kill's report goes out first
    # The driver signals the child and says what it knew: the report waits only for the
    # request in flight (r2's finish), then goes with its facts.
    assert requests(s.child_killed(r1.attempt_id, Report(child_pid=77, signal=9, cpu_ms=12),
                                   3.0)) == []
    (report_req,) = requests(s.frame_received(ok_for(fin_req), 3.05))
    (finish,) = report_req.ops
    assert isinstance(finish, FinishOp) and finish.attempt_id == r1.attempt_id
    assert (finish.report.kill_reason, finish.report.child_pid, finish.report.cpu_ms) == (
        "SHUTDOWN", 77, 12)
    (fin,) = run_ends(s.frame_received(ok_for(report_req), 3.1))
    assert isinstance(fin.error, ShutdownTimeoutError)
    assert (fin.error.running, fin.error.unconfirmed) == (1, 2)
    assert s.next_timer() is None


def test_shutdown_kill_reports_get_a_bounded_window() -> None:
    s, _ = ready(capacity=1, shutdown_timeout=2.0)
    r1 = run_one(s, 0.0, lease_ms=30000, lease_ttl_ms=30000)
    s.request_stop(1.0)  # its drain request is never answered
    (kill,) = kills(s.handle_timer(3.0))
    assert kill.attempt_id == r1.attempt_id
    s.child_killed(r1.attempt_id, Report(child_pid=77, signal=9), 3.0)
    assert s.final_until == 3.0 + FINAL_REPORTS_WINDOW
    timer = s.next_timer()
    assert timer is not None and timer <= s.final_until
    assert run_ends(s.handle_timer(3.1)) == []
    (fin,) = run_ends(s.handle_timer(3.0 + FINAL_REPORTS_WINDOW))
    assert isinstance(fin.error, ShutdownTimeoutError) and fin.error.running == 1


def test_a_start_answered_while_the_run_ends_never_runs() -> None:
    s, _ = ready(capacity=1, shutdown_timeout=2.0)
    res = reservation()
    (start_req,) = requests(s.frame_received(Reserve((res,)), 0.0))
    s.request_stop(0.5, force=True)  # nothing ran: nothing to kill, the start is in flight
    acts = s.frame_received(ok_for(start_req), 0.6)
    assert executes(acts) == []
    assert ("not_run", "SHUTDOWN") in events(acts)
    (report_req,) = requests(acts)
    (fin,) = run_ends(s.frame_received(ok_for(report_req), 0.7))
    assert isinstance(fin.error, ShutdownTimeoutError)


def test_forced_stop_takes_the_timeout_path_at_once() -> None:
    s, _ = ready()
    r1 = run_one(s, 0.0)
    s.request_stop(0.1)
    acts = s.request_stop(0.2, force=True)
    assert [k.reason for k in kills(acts)] == ["SHUTDOWN"]
    assert run_ends(acts) == []
    s.connection_lost(0.25, "CUT")  # no connection left to report on: the run ends
    assert s.done and s.attempts[r1.attempt_id].phase is Phase.KILLING


def test_stop_while_disconnected_with_nothing_known_ends_at_once() -> None:
    s = make_session()
    s.start(0.0)
    s.connect_failed(0.0, "REFUSED")
    (fin,) = run_ends(s.request_stop(0.1))
    assert fin.error is None


def test_connection_lost_during_drain_completes_the_drain() -> None:
    s, _ = ready()
    res = run_one(s, 0.0)
    s.request_stop(0.2)
    s.connection_lost(0.3, "CONNECTION_LOST")
    assert s.drain_acked
    s.connected(0.5)
    (resume_req,) = requests(s.frame_received(welcome(), 0.5))
    acts = s.frame_received(ok_for(resume_req), 0.6)
    assert credits(acts) == 0
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.7))
    assert [op.op for op in req.ops] == ["finish"]
    (fin,) = run_ends(s.frame_received(ok_for(req), 0.8))
    assert fin.error is None


def test_a_result_that_beat_the_kill_is_reported_as_it_is() -> None:
    s, _ = ready()
    res = run_one(s, 0.0, lease_ms=1000)
    assert kills(s.handle_timer(1.0))  # kill ordered, but the child had already answered
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 1.001))
    finish = req.ops[0]
    assert isinstance(finish, FinishOp)
    assert finish.outcome is Outcome.SUCCEEDED and finish.report.kill_reason is None


def test_renewals_go_first_when_more_is_queued_than_a_batch_holds() -> None:
    s = make_session(capacity=3)
    s.start(0.0)
    s.connected(0.0)
    s.frame_received(welcome(max_batch_ops=1), 0.0)
    res = run_one(s, 0.0, lease_ms=3000)
    others = (reservation(), reservation())
    (req,) = requests(s.frame_received(Reserve(others[:1]), 0.9))  # start in flight
    s.frame_received(Reserve(others[1:]), 0.95)  # a second start queued behind it
    s.handle_timer(1.0)  # the renewal is due and queued after that start
    (nxt,) = requests(s.frame_received(ok_for(req), 1.05))
    assert isinstance(nxt.ops[0], RenewOp) and nxt.ops[0].attempt_id == res.attempt_id


def test_heartbeat_is_at_most_five_seconds_apart() -> None:
    s = make_session()
    s.start(0.0)
    s.connected(0.0)
    s.frame_received(welcome(heartbeat_ms=20000, ttl_ms=60000), 0.0)
    assert s.next_timer() == pytest.approx(5.0)
