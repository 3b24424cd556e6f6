"""A handler's progress and the checkpoint, in the pure rules with a fake clock: the value
rules on the details, the attempt's latest progress, and which endings leave a checkpoint
on the task (a failure, an unknown outcome, the reaper's expiry, a cancel; never a success)."""

from __future__ import annotations

import pytest

from orbit_server import domain
from orbit_server.domain import Backoff, CheckedProgress, CheckedReport, TaskRec
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import Progress
from orbit_wire.limits import MAX_PROGRESS_BYTES
from orbit_wire.model import Idempotency, Outcome, TaskState

NOW = 1_000_000
OK = CheckedReport(Outcome.SUCCEEDED, None, False, '{"a":1}', None)
FAILED = CheckedReport(Outcome.FAILED, "FLAKY", True, None, "{}")
CRASHED = CheckedReport(Outcome.UNKNOWN, "HANDLER_CRASHED", False, None, None)


def task(idempotency: Idempotency = Idempotency.NON_IDEMPOTENT) -> TaskRec:
    return TaskRec(id="t" * 32, queue_id="q" * 32, state=TaskState.PENDING,
                   idempotency=idempotency, max_attempts=3,
                   backoff=Backoff(1000, 60000, 2.0, 0.0), attempt_timeout_ms=10_000,
                   lease_ttl_ms=3_000, deadline_at_ms=NOW + 100_000, available_at_ms=NOW)


def running(t: TaskRec | None = None) -> tuple[TaskRec, domain.AttemptRec]:
    t = t or task()
    a = domain.reserve(t, "a" * 32, "i" * 32, NOW)
    domain.start(t, a, a.epoch, "i" * 32, 99, NOW)
    return t, a


@pytest.mark.parametrize(("details", "code"), [
    ('{"a": ', ErrorCode.INVALID_JSON),
    ("null", None),  # null is refused as a payload is; the code is the value rules' own
    ('{"n": 99999999999999999999}', ErrorCode.NUMBER_OUT_OF_RANGE),
    ('"' + "x" * MAX_PROGRESS_BYTES + '"', ErrorCode.PAYLOAD_TOO_LARGE),
    ("[" * 40 + "]" * 40, ErrorCode.NESTING_TOO_DEEP),
])
def test_details_that_break_a_value_rule_are_refused_alone(details: str,
                                                           code: ErrorCode | None) -> None:
    checked = domain.check_progress(Progress(0.5, details))
    assert checked.details is None and checked.fraction == 0.5
    assert checked.refused is not None
    if code is not None:
        assert checked.refused is code


def test_good_details_are_kept_as_sent() -> None:
    text = '{"row": 12, "cursor": "k-12", "ratio": 1.50}'
    assert domain.check_progress(Progress(None, text)) == CheckedProgress(None, text)
    assert domain.check_progress(Progress(0.0)) == CheckedProgress(0.0, None)


def test_a_field_left_out_keeps_the_stored_one() -> None:
    _t, a = running()
    domain.apply_progress(a, CheckedProgress(0.25, '{"i": 1}'), NOW + 1)
    domain.apply_progress(a, CheckedProgress(None, '{"i": 2}'), NOW + 2)
    assert (a.progress_fraction, a.progress_json, a.progress_at_ms) == (0.25, '{"i": 2}', NOW + 2)
    domain.apply_progress(a, CheckedProgress(0.5, None, ErrorCode.INVALID_JSON), NOW + 3)
    assert (a.progress_fraction, a.progress_json, a.progress_at_ms) == (0.5, '{"i": 2}', NOW + 3)


def test_a_failed_attempts_last_details_become_the_checkpoint() -> None:
    t, a = running(task(idempotency=Idempotency.IDEMPOTENT))
    domain.apply_progress(a, CheckedProgress(0.3, '{"i": 3}'), NOW + 1)
    assert t.checkpoint is None
    result = domain.finish(t, a, a.epoch, "i" * 32, FAILED, NOW + 2, 0.5,
                           CheckedProgress(0.4, '{"i": 4}'))
    assert result.verdict is not None and t.state is TaskState.PENDING
    assert a.progress_json == '{"i": 4}' and t.checkpoint == '{"i": 4}'


def test_an_attempt_without_details_leaves_the_checkpoint_as_it_is() -> None:
    t, a = running()
    domain.finish(t, a, a.epoch, "i" * 32, FAILED, NOW + 1, 0.5, CheckedProgress(0.9, None))
    assert a.progress_fraction == 0.9 and t.checkpoint is None


def test_a_success_leaves_no_checkpoint() -> None:
    t, a = running()
    domain.apply_progress(a, CheckedProgress(0.9, '{"i": 9}'), NOW + 1)
    domain.finish(t, a, a.epoch, "i" * 32, OK, NOW + 2, 0.5, CheckedProgress(1.0, '{"i": 10}'))
    assert t.state is TaskState.SUCCEEDED and t.checkpoint is None
    assert a.progress_json == '{"i": 10}'


def test_an_unknown_outcome_and_the_reapers_expiry_leave_a_checkpoint() -> None:
    t, a = running()
    domain.apply_progress(a, CheckedProgress(0.5, '{"i": 5}'), NOW + 1)
    domain.finish(t, a, a.epoch, "i" * 32, CRASHED, NOW + 2, 0.5)
    assert t.state is TaskState.NEEDS_REVIEW and t.checkpoint == '{"i": 5}'

    t2, a2 = running(task(idempotency=Idempotency.IDEMPOTENT))
    domain.apply_progress(a2, CheckedProgress(0.7, '{"i": 7}'), NOW + 1)
    assert a2.lease_expires_at_ms is not None
    domain.expire(t2, a2, a2.lease_expires_at_ms, 0.5, kill_grace_ms=0)
    assert t2.state is TaskState.PENDING and t2.checkpoint == '{"i": 7}'


def test_a_cancelled_attempts_details_are_the_checkpoint_of_a_later_rerun() -> None:
    t, a = running()
    domain.apply_progress(a, CheckedProgress(0.2, '{"i": 2}'), NOW + 1)
    domain.cancel(t, a, NOW + 2)
    domain.finish(t, a, a.epoch, "i" * 32, CheckedReport(
        Outcome.UNKNOWN, "TASK_CANCELLED", False, None, None), NOW + 3, 0.5)
    assert t.state is TaskState.CANCELLED and t.checkpoint == '{"i": 2}'


def test_a_late_finish_kept_as_evidence_keeps_no_progress() -> None:
    t, a = running()
    assert a.lease_expires_at_ms is not None
    late = a.lease_expires_at_ms + 1
    result = domain.finish(t, a, a.epoch, "i" * 32, FAILED, late, 0.5,
                           CheckedProgress(0.9, '{"i": 9}'))
    assert result.evidence is not None
    assert a.progress_json is None and t.checkpoint is None
