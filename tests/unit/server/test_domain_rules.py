"""The pure rules with a fake clock: tables, retry decision, backoff, leases, fencing."""

from __future__ import annotations

import copy

import pytest

from orbit_server import domain
from orbit_server.domain import (
    ATTEMPT_TRANSITIONS,
    TASK_TRANSITIONS,
    AttemptEvent,
    Backoff,
    CheckedReport,
    Decision,
    EvidenceReason,
    Rule,
    TaskEvent,
    TaskRec,
)
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.frames import Report
from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

NOW = 1_000_000
OK = CheckedReport(Outcome.SUCCEEDED, None, False, '{"a":1}', None)


def task(**kw: object) -> TaskRec:
    base: dict[str, object] = dict(
        id="t" * 32, queue_id="q" * 32, state=TaskState.PENDING,
        idempotency=Idempotency.NON_IDEMPOTENT, max_attempts=3,
        backoff=Backoff(1000, 60000, 2.0, 0.0), attempt_timeout_ms=10_000, lease_ttl_ms=3_000,
        deadline_at_ms=NOW + 100_000, available_at_ms=NOW,
    )
    base.update(kw)
    return TaskRec(**base)  # type: ignore[arg-type]


def running(t: TaskRec | None = None, now: int = NOW) -> tuple[TaskRec, domain.AttemptRec]:
    t = t or task()
    a = domain.reserve(t, "a" * 32, "i" * 32, now)
    domain.start(t, a, a.epoch, "i" * 32, 99, now)
    return t, a


# ------------------------------------------------------------------------ tables


def test_every_pair_not_in_the_table_is_illegal_and_changes_nothing() -> None:
    for state in TaskState:
        for event in TaskEvent:
            if (state, event) in TASK_TRANSITIONS:
                assert domain.next_task_state(state, event) is TASK_TRANSITIONS[(state, event)]
            else:
                with pytest.raises(domain.IllegalTransition) as exc:
                    domain.next_task_state(state, event)
                assert exc.value.code is ErrorCode.CONFLICT
    for a_state in AttemptState:
        for a_event in AttemptEvent:
            if (a_state, a_event) not in ATTEMPT_TRANSITIONS:
                with pytest.raises(domain.IllegalTransition):
                    domain.next_attempt_state(a_state, a_event)


def test_terminal_states_have_no_way_out_but_an_operators_rerun() -> None:
    # Nothing a worker, the reaper or a producer's cancel does moves an ended task; only an
    # operator's retry (RERUN) runs a FAILED or CANCELLED one again. SUCCEEDED stays.
    assert not [e for (s, e) in TASK_TRANSITIONS if s is TaskState.SUCCEEDED]
    for state in (TaskState.FAILED, TaskState.CANCELLED):
        assert [e for (s, e) in TASK_TRANSITIONS if s is state] == [TaskEvent.RERUN]
        assert TASK_TRANSITIONS[(state, TaskEvent.RERUN)] is TaskState.PENDING


def test_illegal_reserve_leaves_the_task_unchanged() -> None:
    t = task(state=TaskState.SUCCEEDED)
    before = copy.deepcopy(t)
    with pytest.raises(OrbitError):
        domain.reserve(t, "a" * 32, "i" * 32, NOW)
    assert t == before
    t = task(available_at_ms=NOW + 1)
    before = copy.deepcopy(t)
    with pytest.raises(OrbitError):
        domain.reserve(t, "a" * 32, "i" * 32, NOW)
    assert t == before


# ------------------------------------------------------------------------ decisions


@pytest.mark.parametrize(
    ("outcome", "retryable", "idem", "uncertain", "started", "decision", "rule"),
    [
        (Outcome.SUCCEEDED, False, "NON_IDEMPOTENT", True, 3, Decision.SUCCEEDED,
         Rule.HANDLER_SUCCEEDED),
        (Outcome.FAILED, False, "IDEMPOTENT", False, 1, Decision.FAILED, Rule.EXPLICIT_FAILURE),
        (Outcome.FAILED, True, "NON_IDEMPOTENT", False, 1, Decision.RETRY,
         Rule.RETRYABLE_FAILURE_RETRY),
        (Outcome.FAILED, True, "NON_IDEMPOTENT", True, 1, Decision.NEEDS_REVIEW,
         Rule.UNCERTAIN_HISTORY),
        (Outcome.FAILED, True, "IDEMPOTENT", True, 1, Decision.RETRY,
         Rule.RETRYABLE_FAILURE_RETRY),
        (Outcome.FAILED, True, "NON_IDEMPOTENT", False, 3, Decision.FAILED,
         Rule.RETRY_BUDGET_EXHAUSTED),
        (Outcome.FAILED, True, "NON_IDEMPOTENT", True, 3, Decision.FAILED,
         Rule.RETRY_BUDGET_EXHAUSTED),
        (Outcome.UNKNOWN, False, "IDEMPOTENT", True, 1, Decision.RETRY,
         Rule.UNKNOWN_OUTCOME_IDEMPOTENT_RETRY),
        (Outcome.UNKNOWN, False, "NON_IDEMPOTENT", True, 1, Decision.NEEDS_REVIEW,
         Rule.UNKNOWN_OUTCOME_NON_IDEMPOTENT),
        (Outcome.UNKNOWN, True, "IDEMPOTENT", True, 3, Decision.NEEDS_REVIEW,
         Rule.RETRY_BUDGET_EXHAUSTED),
    ],
)
def test_decide_matrix(outcome: Outcome, retryable: bool, idem: str, uncertain: bool,
                       started: int, decision: Decision, rule: Rule) -> None:
    t = task(idempotency=Idempotency(idem), uncertain=uncertain, attempts_started=started)
    v = domain.decide(t, outcome, retryable, NOW, 0.5)
    assert (v.decision, v.rule) == (decision, rule)
    if decision is Decision.RETRY:
        assert v.available_at_ms == NOW + Backoff(1000, 60000, 2.0, 0.0).delay_ms(started, 0.5)
        assert v.task_state is TaskState.PENDING
    else:
        assert v.available_at_ms is None


def test_decide_deadline_exhaustion_and_not_before() -> None:
    t = task(deadline_at_ms=NOW + 999, attempts_started=1)
    v = domain.decide(t, Outcome.FAILED, True, NOW, 0.5)
    assert (v.decision, v.rule) == (Decision.FAILED, Rule.DEADLINE_EXHAUSTED)
    t = task(deadline_at_ms=NOW + 999, attempts_started=1, uncertain=True,
             idempotency=Idempotency.IDEMPOTENT)
    v = domain.decide(t, Outcome.UNKNOWN, False, NOW, 0.5)
    assert (v.decision, v.rule) == (Decision.NEEDS_REVIEW, Rule.DEADLINE_EXHAUSTED)
    t = task(attempts_started=1, idempotency=Idempotency.IDEMPOTENT, uncertain=True)
    v = domain.decide(t, Outcome.UNKNOWN, False, NOW, 0.5, not_before_ms=NOW + 50_000)
    assert v.available_at_ms == NOW + 50_000


# ------------------------------------------------------------------------ backoff


def test_backoff_growth_cap_and_jitter_bounds() -> None:
    b = Backoff(1000, 60000, 2.0, 0.0)
    assert [b.delay_ms(n, 0.3) for n in range(1, 9)] == [
        1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]
    assert b.delay_ms(10_000, 0.3) == 60000  # no float overflow
    j = Backoff(1000, 60000, 2.0, 0.2)
    assert j.delay_ms(1, 0.0) == 800 and j.delay_ms(1, 0.5) == 1000
    assert 1000 <= j.delay_ms(1, 0.999999) <= 1200
    assert j.delay_ms(20, 0.999) == 60000  # jitter never exceeds the cap
    assert Backoff(0, 0, 1.0, 1.0).delay_ms(5, 0.9) == 0


# ------------------------------------------------------------------------ leases


def test_start_lease_is_the_smallest_bound() -> None:
    t = task(lease_ttl_ms=3000, attempt_timeout_ms=2000)
    a = domain.reserve(t, "a" * 32, "i" * 32, NOW)
    assert domain.start(t, a, 1, "i" * 32, None, NOW) == 2000
    assert a.lease_expires_at_ms == NOW + 2000 and a.attempt_deadline_at_ms == NOW + 2000
    assert t.attempts_started == 1 and a.state is AttemptState.RUNNING
    t = task(deadline_at_ms=NOW + 500)
    a = domain.reserve(t, "a" * 32, "i" * 32, NOW)
    assert domain.start(t, a, 1, "i" * 32, None, NOW) == 500


def test_start_fencing_changes_nothing_on_error() -> None:
    t = task()
    a = domain.reserve(t, "a" * 32, "i" * 32, NOW)
    for epoch, instance, code in ((2, "i" * 32, ErrorCode.STALE_EPOCH),
                                  (1, "j" * 32, ErrorCode.NOT_FOUND)):
        before = (copy.deepcopy(t), copy.deepcopy(a))
        with pytest.raises(OrbitError) as exc:
            domain.start(t, a, epoch, instance, None, NOW)
        assert exc.value.code is code and (t, a) == before
    t2 = task(deadline_at_ms=NOW + 10)
    a2 = domain.reserve(t2, "a" * 32, "i" * 32, NOW)
    with pytest.raises(OrbitError) as exc:
        domain.start(t2, a2, 1, "i" * 32, None, NOW + 10)
    assert exc.value.code is ErrorCode.LEASE_EXPIRED and a2.state is AttemptState.RESERVED


def test_renew_until_the_attempt_timeout() -> None:
    t, a = running(task(lease_ttl_ms=3000, attempt_timeout_ms=5000))
    assert domain.renew(t, a, 1, "i" * 32, NOW + 1000) == 3000
    assert domain.renew(t, a, 1, "i" * 32, NOW + 3500) == 1500
    with pytest.raises(OrbitError) as exc:
        domain.renew(t, a, 1, "i" * 32, NOW + 5000)
    assert exc.value.code is ErrorCode.LEASE_EXPIRED
    assert a.renewals == 2


def test_renew_after_expiry_never_revives() -> None:
    t, a = running()
    with pytest.raises(OrbitError) as exc:
        domain.renew(t, a, 1, "i" * 32, NOW + 3000)
    assert exc.value.code is ErrorCode.LEASE_EXPIRED
    assert a.lease_expires_at_ms == NOW + 3000


# ------------------------------------------------------------------------ finish and evidence


def test_finish_success_and_evidence_cases() -> None:
    t, a = running()
    r = domain.finish(t, a, 1, "i" * 32, OK, NOW + 10, 0.5)
    assert r.verdict is not None and t.state is TaskState.SUCCEEDED and t.result == '{"a":1}'
    again = domain.finish(t, a, 1, "i" * 32, OK, NOW + 11, 0.5)
    assert again.evidence is EvidenceReason.ATTEMPT_FINISHED
    t, a = running()
    snapshot = (copy.deepcopy(t), copy.deepcopy(a))
    assert domain.finish(t, a, 1, "i" * 32, OK, NOW + 3000, 0.5).evidence is (
        EvidenceReason.LEASE_EXPIRED)
    assert domain.finish(t, a, 7, "i" * 32, OK, NOW, 0.5).evidence is EvidenceReason.STALE_EPOCH
    assert (t, a) == snapshot
    with pytest.raises(OrbitError) as exc:
        domain.finish(t, a, 1, "j" * 32, OK, NOW, 0.5)
    assert exc.value.code is ErrorCode.NOT_FOUND


def test_check_report_value_rules() -> None:
    bad = domain.check_report(domain.FinishReport(Outcome.SUCCEEDED, result_json="[1,"))
    assert (bad.outcome, bad.code) == (Outcome.UNKNOWN, "INVALID_HANDLER_RESULT")
    assert bad.details == '{"reason":"INVALID_JSON"}'
    missing = domain.check_report(domain.FinishReport(Outcome.SUCCEEDED))
    assert missing.outcome is Outcome.UNKNOWN
    # A handler that returned None: a null result is a result.
    null = domain.check_report(domain.FinishReport(Outcome.SUCCEEDED, result_json="null"))
    assert (null.outcome, null.result) == (Outcome.SUCCEEDED, "null")
    exact = domain.check_report(domain.FinishReport(Outcome.SUCCEEDED, result_json="1.50"))
    assert exact.result == "1.50"
    failed = domain.check_report(domain.FinishReport(Outcome.FAILED, code="OBJECT_REJECTED"))
    assert failed.details == "{}" and not failed.retryable
    details = domain.check_report(domain.FinishReport(Outcome.FAILED, code="X", retryable=True,
                                                      details_json='{"k":[1]}'))
    assert details.details == '{"k":[1]}' and details.retryable
    broken = domain.check_report(domain.FinishReport(Outcome.FAILED, code="X", details_json="{"))
    assert broken.outcome is Outcome.FAILED and "invalid_details" in (broken.details or "")
    unknown = domain.check_report(domain.FinishReport(Outcome.UNKNOWN, retryable=True))
    assert unknown.code == "HANDLER_ERROR" and unknown.retryable is False


def test_expire_respects_kill_grace() -> None:
    t, a = running(task(idempotency=Idempotency.IDEMPOTENT, backoff=Backoff(0, 0, 1.0, 0.0)))
    with pytest.raises(domain.IllegalTransition):
        domain.expire(t, a, NOW + 2999, 0.5, 2000)
    r = domain.expire(t, a, NOW + 3500, 0.5, 2000)
    assert r.verdict is not None and r.verdict.decision is Decision.RETRY
    assert t.available_at_ms == NOW + 3000 + 2000 and t.uncertain
    assert (a.outcome, a.code) == (Outcome.UNKNOWN, "LEASE_EXPIRED")


def test_the_failure_names_the_kill_a_late_report_brought() -> None:
    # The reaper closes the last attempt LEASE_EXPIRED; the worker's report of its
    # attempt-timeout kill arrives after: the task's failure then names the timeout.
    t, a = running(task(max_attempts=1))
    domain.expire(t, a, NOW + 3500, 0.5, 2000)
    assert (t.state, t.failure_code) == (TaskState.NEEDS_REVIEW, "LEASE_EXPIRED")
    assert not domain.name_late_cause(t, a)  # no kill known yet
    late = domain.FinishReport(Outcome.UNKNOWN, "ATTEMPT_TIMEOUT",
                               facts=Report(kill_reason="ATTEMPT_TIMEOUT", signal=9))
    assert domain.keep_late_facts(a, late, NOW + 3600)
    assert domain.name_late_cause(t, a) and t.failure_code == "ATTEMPT_TIMEOUT"
    assert a.code == "LEASE_EXPIRED"  # the attempt's outcome stays what the rules decided
    # A kill known before the reaper closes the attempt names the cause at once; a lease
    # the worker itself lost stays the server's LEASE_EXPIRED.
    for reason, failure in (("TASK_CANCELLED", "TASK_CANCELLED"),
                            ("LEASE_LOST", "LEASE_EXPIRED")):
        t, a = running(task(max_attempts=1))
        a.kill_reason = reason
        domain.expire(t, a, NOW + 3500, 0.5, 2000)
        assert t.failure_code == failure
    # An earlier attempt's late report does not rename the failure of a later one.
    t, a = running(task(max_attempts=2, idempotency=Idempotency.IDEMPOTENT,
                        backoff=Backoff(0, 0, 1.0, 0.0)))
    domain.expire(t, a, NOW + 3500, 0.5, 0)
    _, b = running(t, NOW + 4000)
    domain.expire(t, b, NOW + 8000, 0.5, 0)
    assert t.failure_code == "LEASE_EXPIRED"
    assert domain.keep_late_facts(a, late, NOW + 8100)
    assert not domain.name_late_cause(t, a) and t.failure_code == "LEASE_EXPIRED"


# ------------------------------------------------------------------------ cancel, deadline, review


def test_cancel_paths() -> None:
    t = task()
    assert domain.cancel(t, None, NOW) and t.state is TaskState.CANCELLED
    assert not domain.cancel(t, None, NOW)  # idempotent
    t = task()
    a = domain.reserve(t, "a" * 32, "i" * 32, NOW)
    domain.cancel(t, a, NOW)
    assert a.state is AttemptState.RELEASED and t.cancel_requested
    t, a = running()
    domain.cancel(t, a, NOW)
    assert a.state is AttemptState.RUNNING  # runs until the worker reports or the lease ends
    r = domain.finish(t, a, 1, "i" * 32, OK, NOW + 1, 0.5)
    assert r.cancelled and a.decision == Decision.CANCELLED and t.state is TaskState.CANCELLED
    assert t.result is None
    t, a = running()
    domain.finish(t, a, 1, "i" * 32, OK, NOW + 1, 0.5)
    with pytest.raises(domain.IllegalTransition):
        domain.cancel(t, None, NOW)


def test_deadline_only_for_pending_past_deadline() -> None:
    t = task(deadline_at_ms=NOW + 5)
    with pytest.raises(OrbitError):
        domain.expire_deadline(t, NOW + 4)
    domain.expire_deadline(t, NOW + 5)
    assert t.state is TaskState.FAILED and t.failure_code == "DEADLINE_EXCEEDED"
    assert t.failure_details == "{}"


def test_review_actions() -> None:
    base = dict(state=TaskState.NEEDS_REVIEW, attempts_started=3, max_attempts=3,
                uncertain=True, deadline_at_ms=NOW - 1)
    t = task(**base)
    domain.review(t, domain.ReviewAction.RETRY, None, "{}", NOW)
    assert t.state is TaskState.PENDING and t.max_attempts == 4 and t.uncertain
    assert t.deadline_at_ms == NOW + t.attempt_timeout_ms and t.available_at_ms == NOW
    t = task(**base)
    domain.review(t, domain.ReviewAction.SUCCEED, "7", "{}", NOW)
    assert t.state is TaskState.SUCCEEDED and t.result == "7"
    t = task(**base)
    domain.review(t, domain.ReviewAction.FAIL, None, '{"reason":"no"}', NOW)
    assert (t.failure_code, t.failure_details) == ("REVIEW_FAILED", '{"reason":"no"}')
    t = task()
    with pytest.raises(domain.IllegalTransition):
        domain.review(t, domain.ReviewAction.RETRY, None, "{}", NOW)
    assert t.state is TaskState.PENDING


def test_resume_status() -> None:
    t, a = running()
    assert domain.resume_status(t, a, 1, "i" * 32, NOW + 1000) == (
        domain.ResumeStatus.RUNNING, 2000, None)
    assert domain.resume_status(t, a, 2, "i" * 32, NOW)[2] == "STALE_EPOCH"
    assert domain.resume_status(t, a, 1, "j" * 32, NOW)[2] == "NOT_FOUND"
    assert domain.resume_status(t, a, 1, "i" * 32, NOW + 3000)[2] == "LEASE_EXPIRED"
    assert domain.resume_status(None, None, 1, "i" * 32, NOW)[2] == "NOT_FOUND"
    domain.cancel(t, a, NOW)
    assert domain.resume_status(t, a, 1, "i" * 32, NOW)[2] == "TASK_CANCELLED"
