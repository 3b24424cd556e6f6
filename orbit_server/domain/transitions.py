"""The moves of tasks and attempts: reserve, release, start, renew, finish, expire, cancel,
the deadline, review and resume. Each checks first (the state tables, ownership, epoch,
lease) and raises before changing anything, then mutates the records in place; a caller
writes them back. Pure: ``now_ms`` and every random draw are arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.jsonvalue import encode_value
from orbit_wire.model import AttemptState, Outcome, TaskState, UnknownCode, kill_cause

from .bodies import ReviewAction
from .decisions import Decision, Rule, Verdict, decide, lease_holds, lease_ms
from .progress import CheckedProgress, apply_progress
from .records import AttemptRec, TaskRec
from .reports import CheckedReport
from .states import (
    AttemptEvent,
    IllegalTransition,
    TaskEvent,
    next_attempt_state,
    next_task_state,
)

# The event that moves a RUNNING task to the state a verdict names.
_VERDICT_EVENT: Final[Mapping[TaskState, TaskEvent]] = {
    TaskState.SUCCEEDED: TaskEvent.SUCCEED,
    TaskState.FAILED: TaskEvent.FAIL,
    TaskState.PENDING: TaskEvent.RETRY,
    TaskState.NEEDS_REVIEW: TaskEvent.NEED_REVIEW,
}


def reserve(task: TaskRec, attempt_id: str, instance_id: str, now_ms: int) -> AttemptRec:
    """PENDING → RUNNING with a fresh RESERVED attempt at epoch + 1 (no attempt spent)."""
    new_state = next_task_state(task.state, TaskEvent.RESERVE)
    if task.available_at_ms > now_ms:
        raise OrbitError(ErrorCode.CONFLICT, "task is not available yet")
    if task.deadline_at_ms <= now_ms:
        raise OrbitError(ErrorCode.CONFLICT, "task deadline has passed")
    task.state = new_state
    task.epoch += 1
    task.current_attempt_id = attempt_id
    task.updated_at_ms = now_ms
    return AttemptRec(
        id=attempt_id,
        task_id=task.id,
        queue_id=task.queue_id,
        epoch=task.epoch,
        attempt_number=task.attempts_started + 1,
        state=AttemptState.RESERVED,
        instance_id=instance_id,
        reserved_at_ms=now_ms,
    )


def release(task: TaskRec, attempt: AttemptRec, now_ms: int, rule: Rule) -> bool:
    """RESERVED attempt → RELEASED; its task goes back to PENDING, available now, unless
    the task has moved on (cancelled). Returns True when the task became PENDING."""
    new_attempt = next_attempt_state(attempt.state, AttemptEvent.RELEASE)
    back = task.state is TaskState.RUNNING and task.current_attempt_id == attempt.id
    if back:
        task.state = next_task_state(task.state, TaskEvent.RELEASE)
        task.available_at_ms = min(task.available_at_ms, now_ms)
        task.current_attempt_id = None
        task.updated_at_ms = now_ms
    attempt.state = new_attempt
    attempt.finished_at_ms = now_ms
    attempt.decision = Decision.RELEASED
    attempt.decision_rule = rule
    return back


def _check_owner(attempt: AttemptRec, instance_id: str, queue_id: str) -> None:
    if attempt.instance_id != instance_id or attempt.queue_id != queue_id:
        # The same answer as for an attempt that does not exist: nothing about other
        # instances' or queues' attempts is revealed.
        raise OrbitError(ErrorCode.NOT_FOUND, f"attempt {attempt.id} does not exist")


def _check_epoch(attempt: AttemptRec, epoch: int) -> None:
    if epoch != attempt.epoch:
        raise OrbitError(
            ErrorCode.STALE_EPOCH, f"epoch {epoch} is not the attempt's {attempt.epoch}"
        )


def start(task: TaskRec, attempt: AttemptRec, epoch: int, instance_id: str,
          child_pid: int | None, now_ms: int) -> int:
    """RESERVED → RUNNING, one attempt spent; returns the granted lease_ms (> 0).

    A start for an attempt already RUNNING under a valid lease (a duplicate confirmation)
    answers the remaining lease without extending it. Raises NOT authoritative codes:
    NOT_FOUND (another instance's), STALE_EPOCH, LEASE_EXPIRED (released, finished,
    cancelled, no time).
    """
    _check_owner(attempt, instance_id, task.queue_id)
    _check_epoch(attempt, epoch)
    if attempt.state is AttemptState.RUNNING:
        if lease_holds(attempt, now_ms) and task.state is TaskState.RUNNING:
            assert attempt.lease_expires_at_ms is not None
            return attempt.lease_expires_at_ms - now_ms
        raise OrbitError(ErrorCode.LEASE_EXPIRED, "attempt lease is no longer held")
    if attempt.state is not AttemptState.RESERVED:
        raise OrbitError(ErrorCode.LEASE_EXPIRED, f"attempt is {attempt.state.value}")
    if task.state is not TaskState.RUNNING or task.current_attempt_id != attempt.id:
        raise OrbitError(ErrorCode.LEASE_EXPIRED, f"task is {task.state.value}")
    attempt_deadline = now_ms + task.attempt_timeout_ms
    granted = lease_ms(now_ms, task.lease_ttl_ms, attempt_deadline, task.deadline_at_ms)
    if granted <= 0:
        raise OrbitError(ErrorCode.LEASE_EXPIRED, "task deadline has passed")
    attempt.state = next_attempt_state(attempt.state, AttemptEvent.START)
    attempt.started_at_ms = now_ms
    attempt.attempt_deadline_at_ms = attempt_deadline
    attempt.lease_expires_at_ms = now_ms + granted
    attempt.child_pid = child_pid
    task.attempts_started += 1
    task.updated_at_ms = now_ms
    return granted


def grant(task: TaskRec, attempt: AttemptRec, instance_id: str, connection: int,
          now_ms: int) -> int:
    """A lease granted with the dispatch: the RESERVED attempt just made for ``instance_id``
    starts at once (one attempt spent, as ``start``) and stays *unconfirmed* until the
    worker renews, finishes, declines or resumes it; ``connection`` names the connection it
    was granted to. Returns lease_ms; raises as ``start``."""
    granted = start(task, attempt, attempt.epoch, instance_id, None, now_ms)
    attempt.grant_connection = connection
    return granted


def confirm_grant(attempt: AttemptRec) -> None:
    """The worker holding a granted attempt spoke of it: it received the grant."""
    attempt.grant_connection = None


def _confirm_if_running(attempt: AttemptRec) -> None:
    """A grant the worker spoke of is confirmed; a grant released as never received keeps
    that record."""
    if attempt.state is AttemptState.RUNNING:
        attempt.grant_connection = None


def decline(task: TaskRec, attempt: AttemptRec, epoch: int, instance_id: str,
            now_ms: int) -> bool:
    """The worker gives an unconfirmed grant back before its handler started: RUNNING →
    RELEASED, the task back to PENDING (available now) unless it moved on, and the attempt
    not spent. Raises NOT_FOUND, STALE_EPOCH, or CONFLICT for a grant already confirmed (a
    handler that may have run is never undone) or an attempt no longer running. Returns
    True when the task became PENDING."""
    _check_owner(attempt, instance_id, task.queue_id)
    _check_epoch(attempt, epoch)
    if attempt.state is not AttemptState.RUNNING or attempt.grant_connection is None:
        raise OrbitError(ErrorCode.CONFLICT,
                         f"attempt {attempt.id} is not an unconfirmed grant; it cannot be declined")
    back = _give_back(task, attempt, now_ms, Rule.GRANT_DECLINED)
    attempt.grant_connection = None
    return back


def release_unreceived(task: TaskRec, attempt: AttemptRec, now_ms: int) -> bool:
    """An unconfirmed grant whose connection ended and that the worker's resume on a newer
    connection does not list: it never reached the worker. Released as ``decline`` does
    (no attempt spent); ``grant_connection`` stays as the record that it was never
    confirmed. Returns True when the task became PENDING."""
    if attempt.state is not AttemptState.RUNNING or attempt.grant_connection is None:
        raise IllegalTransition("attempt", attempt.state.value, "release_unreceived")
    return _give_back(task, attempt, now_ms, Rule.GRANT_UNRECEIVED)


def _give_back(task: TaskRec, attempt: AttemptRec, now_ms: int, rule: Rule) -> bool:
    new_attempt = next_attempt_state(attempt.state, AttemptEvent.DECLINE)
    back = task.state is TaskState.RUNNING and task.current_attempt_id == attempt.id
    if back:
        task.state = next_task_state(task.state, TaskEvent.RELEASE)
        task.available_at_ms = min(task.available_at_ms, now_ms)
        task.current_attempt_id = None
    task.attempts_started -= 1
    task.updated_at_ms = now_ms
    attempt.state = new_attempt
    attempt.finished_at_ms = now_ms
    attempt.lease_expires_at_ms = None
    attempt.decision = Decision.RELEASED
    attempt.decision_rule = rule
    return back


def renew(task: TaskRec, attempt: AttemptRec, epoch: int, instance_id: str, now_ms: int) -> int:
    """Extend a held lease; returns lease_ms, which may be shorter than the TTL.

    Raises STALE_EPOCH, LEASE_EXPIRED (lease gone, attempt/task deadline reached, or the
    task was cancelled: the worker must stop the child) or NOT_FOUND (another instance's).
    """
    _check_owner(attempt, instance_id, task.queue_id)
    _check_epoch(attempt, epoch)
    _confirm_if_running(attempt)  # the worker has it, whatever the answer
    if not lease_holds(attempt, now_ms):
        raise OrbitError(ErrorCode.LEASE_EXPIRED, "attempt lease is no longer held")
    if task.state is TaskState.CANCELLED:
        raise OrbitError(ErrorCode.LEASE_EXPIRED, "task was cancelled")
    assert attempt.attempt_deadline_at_ms is not None
    granted = lease_ms(now_ms, task.lease_ttl_ms, attempt.attempt_deadline_at_ms,
                       task.deadline_at_ms)
    if granted <= 0:
        raise OrbitError(ErrorCode.LEASE_EXPIRED, "attempt timeout or task deadline reached")
    attempt.lease_expires_at_ms = now_ms + granted
    attempt.renewals += 1
    return granted


class EvidenceReason(StrEnum):
    STALE_EPOCH = "STALE_EPOCH"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    ATTEMPT_FINISHED = "ATTEMPT_FINISHED"
    ATTEMPT_RELEASED = "ATTEMPT_RELEASED"
    NOT_STARTED = "NOT_STARTED"


@dataclass(frozen=True, slots=True)
class FinishResult:
    """``verdict`` set: the report decided the attempt (ACCEPTED). ``evidence`` set: it was
    only stored as evidence. ``cancelled``: accepted on a cancelled task (history kept)."""

    verdict: Verdict | None = None
    evidence: EvidenceReason | None = None
    cancelled: bool = False


def finish(task: TaskRec, attempt: AttemptRec, epoch: int, instance_id: str,
           report: CheckedReport, now_ms: int, draw: float,
           progress: CheckedProgress | None = None) -> FinishResult:
    """Decide an attempt from a worker's report, or classify it as evidence.

    Raises NOT_FOUND for another instance's attempt; every other non-authoritative
    report is returned as evidence and changes nothing (never the task's ``uncertain``).
    ``progress``, the handler's last not yet renewed, is kept on a decided attempt only.
    """
    _check_owner(attempt, instance_id, task.queue_id)
    if epoch != attempt.epoch:
        return FinishResult(evidence=EvidenceReason.STALE_EPOCH)
    _confirm_if_running(attempt)  # the worker has it (a late report: its handler ran)
    if attempt.state is AttemptState.FINISHED:
        return FinishResult(evidence=EvidenceReason.ATTEMPT_FINISHED)
    if attempt.state is AttemptState.RELEASED:
        return FinishResult(evidence=EvidenceReason.ATTEMPT_RELEASED)
    if attempt.state is AttemptState.RESERVED:
        return FinishResult(evidence=EvidenceReason.NOT_STARTED)
    if not lease_holds(attempt, now_ms):
        return FinishResult(evidence=EvidenceReason.LEASE_EXPIRED)
    return _close(task, attempt, report, now_ms, draw, not_before_ms=0, progress=progress)


def expire(task: TaskRec, attempt: AttemptRec, now_ms: int, draw: float,
           kill_grace_ms: int) -> FinishResult:
    """The reaper: a RUNNING attempt whose lease expired ends UNKNOWN/LEASE_EXPIRED; a retry
    is not dispatched before the expiry plus the kill grace (no overlapping attempts)."""
    assert attempt.lease_expires_at_ms is not None
    if attempt.state is not AttemptState.RUNNING or now_ms < attempt.lease_expires_at_ms:
        raise IllegalTransition("attempt", attempt.state.value, "expire")
    checked = CheckedReport(Outcome.UNKNOWN, "LEASE_EXPIRED", False, None, None)
    return _close(task, attempt, checked, now_ms, draw,
                  not_before_ms=attempt.lease_expires_at_ms + kill_grace_ms)


def _close(task: TaskRec, attempt: AttemptRec, report: CheckedReport, now_ms: int, draw: float,
           not_before_ms: int, progress: CheckedProgress | None = None) -> FinishResult:
    new_attempt = next_attempt_state(attempt.state, AttemptEvent.FINISH)
    if task.state is TaskState.CANCELLED:
        attempt.state = new_attempt
        _record(task, attempt, report, now_ms, progress)
        attempt.decision = Decision.CANCELLED
        attempt.decision_rule = Rule.TASK_CANCELLED
        if report.outcome is Outcome.UNKNOWN:
            task.uncertain = True
        if task.current_attempt_id == attempt.id:
            task.current_attempt_id = None  # the cancel has landed whole: no outcome pending
        task.updated_at_ms = now_ms
        return FinishResult(cancelled=True)
    if task.state is not TaskState.RUNNING or task.current_attempt_id != attempt.id:
        raise IllegalTransition("task", task.state.value, "finish")
    verdict = decide(task, report.outcome, report.retryable, now_ms, draw, not_before_ms)
    new_task = next_task_state(task.state, _VERDICT_EVENT[verdict.task_state])
    # Checks are done; from here on the records change.
    if report.outcome is Outcome.UNKNOWN:
        task.uncertain = True
    attempt.state = new_attempt
    _record(task, attempt, report, now_ms, progress)
    attempt.decision = verdict.decision
    attempt.decision_rule = verdict.rule
    task.state = new_task
    task.current_attempt_id = None
    task.updated_at_ms = now_ms
    if verdict.decision is Decision.SUCCEEDED:
        task.result = report.result
    elif verdict.decision is Decision.RETRY:
        assert verdict.available_at_ms is not None
        task.available_at_ms = verdict.available_at_ms
    elif verdict.task_state in (TaskState.FAILED, TaskState.NEEDS_REVIEW):
        # What ended the task or sent it to review, the cause of this attempt (e.g.
        # ATTEMPT_TIMEOUT, or HANDLER_ERROR and the exception's type name): the producer
        # sees it without reading the attempts.
        task.failure_code = _cause(report.code, attempt)
        task.failure_details = report.details if report.details is not None else "{}"
    return FinishResult(verdict=verdict)


def _cause(code: str | None, attempt: AttemptRec) -> str | None:
    """An attempt's cause: its code, except that the reaper's LEASE_EXPIRED gives way to
    the policy's kill a late report of the worker named (``keep_late_facts``): a timeout, a
    cancel, the memory limit, a shutdown. A lease the worker lost stays LEASE_EXPIRED."""
    if code != UnknownCode.LEASE_EXPIRED.value or attempt.kill_reason == UnknownCode.LEASE_LOST:
        return code
    return kill_cause(attempt.kill_reason, code)


def name_late_cause(task: TaskRec, attempt: AttemptRec) -> bool:
    """The task ended FAILED or went to review on ``attempt``, its last, closed
    LEASE_EXPIRED by the reaper; a late report has since named the kill (ATTEMPT_TIMEOUT,
    TASK_CANCELLED, ...): the task's failure names that cause, as if the report had come in
    time. Returns whether the failure changed."""
    if (attempt.code != UnknownCode.LEASE_EXPIRED.value
            or task.failure_code != UnknownCode.LEASE_EXPIRED.value
            or task.state not in (TaskState.FAILED, TaskState.NEEDS_REVIEW)
            or attempt.attempt_number != task.attempts_started):
        return False
    cause = _cause(attempt.code, attempt)
    if cause == task.failure_code:
        return False
    task.failure_code = cause
    return True


def _record(task: TaskRec, attempt: AttemptRec, report: CheckedReport, now_ms: int,
            progress: CheckedProgress | None) -> None:
    attempt.finished_at_ms = now_ms
    attempt.outcome = report.outcome
    attempt.code = report.code
    attempt.retryable = report.retryable
    attempt.details = report.details
    if progress is not None:
        apply_progress(attempt, progress, now_ms)
    if report.outcome is not Outcome.SUCCEEDED and attempt.progress_json is not None:
        # The next attempt (a retry, a review's or an operator's) resumes from here; an
        # attempt that reported no details leaves an earlier attempt's checkpoint.
        task.checkpoint = attempt.progress_json


def cancel(task: TaskRec, attempt: AttemptRec | None, now_ms: int) -> bool:
    """Cancel a task. PENDING/NEEDS_REVIEW end at once; RUNNING ends CANCELLED with
    ``cancel_requested`` and a RESERVED attempt released (a RUNNING one keeps its lease until
    the worker reports). Idempotent on CANCELLED (returns False: nothing changed); raises
    CONFLICT on SUCCEEDED/FAILED. ``attempt`` is the task's current attempt, if any.

    A RUNNING attempt stays the task's ``current_attempt_id`` until its outcome is recorded
    (the worker's report or the reaper), so a reader can tell that the attempt's outcome is
    still pending; a released one is not current any more."""
    if task.state is TaskState.CANCELLED:
        return False
    new_state = next_task_state(task.state, TaskEvent.CANCEL)
    if task.state is TaskState.RUNNING:
        task.cancel_requested = True
        if attempt is not None and attempt.state is AttemptState.RESERVED:
            next_attempt_state(attempt.state, AttemptEvent.RELEASE)
            attempt.state = AttemptState.RELEASED
            attempt.finished_at_ms = now_ms
            attempt.decision = Decision.RELEASED
            attempt.decision_rule = Rule.TASK_CANCELLED
            task.current_attempt_id = None
    task.state = new_state
    task.updated_at_ms = now_ms
    return True


def expire_deadline(task: TaskRec, now_ms: int) -> None:
    """A task still PENDING at its deadline ends FAILED/DEADLINE_EXCEEDED."""
    if now_ms < task.deadline_at_ms:
        raise OrbitError(ErrorCode.CONFLICT, "task deadline has not passed")
    task.state = next_task_state(task.state, TaskEvent.DEADLINE)
    task.failure_code = "DEADLINE_EXCEEDED"
    task.failure_details = encode_value(
        {"uncertain_history": True} if task.uncertain else {}
    ).decode()
    task.updated_at_ms = now_ms


def expire_start_by(task: TaskRec, now_ms: int, schedule_to_start_ms: int,
                    waiting: Mapping[str, Any] | None) -> bool:
    """The policy's schedule_to_start_ms has passed: a task no attempt started yet ends
    FAILED/NOT_STARTED_IN_TIME, the reason in its details (``waiting``: what it waited for,
    if known). Returns False, changing nothing but the cleared start-by instant, when the
    task started or ended meanwhile."""
    if task.start_by_at_ms is None or now_ms < task.start_by_at_ms:
        raise OrbitError(ErrorCode.CONFLICT, "task start-by instant has not passed")
    task.start_by_at_ms = None
    if task.state is not TaskState.PENDING or task.attempts_started > 0:
        return False
    task.state = next_task_state(task.state, TaskEvent.DEADLINE)
    task.failure_code = "NOT_STARTED_IN_TIME"
    if waiting is None:
        reason = f"no attempt started within {schedule_to_start_ms} ms"
    elif waiting.get("reason") == "NO_MATCHING_WORKER":
        reason = (f"no live worker had the labels it requires for {schedule_to_start_ms} ms")
    else:
        reason = f"no live worker offered the capability for {schedule_to_start_ms} ms"
    task.failure_details = encode_value({
        "reason": reason, "schedule_to_start_ms": schedule_to_start_ms,
        "waiting": None if waiting is None else dict(waiting),
    }).decode()
    task.updated_at_ms = now_ms
    return True


def retry_not_before(last_attempt: AttemptRec | None, kill_grace_ms: int) -> int:
    """The earliest instant a new attempt may start after ``last_attempt``: a lease the
    server let expire may still be running on a slow worker until expiry + kill grace."""
    if (last_attempt is None or last_attempt.code != "LEASE_EXPIRED"
            or last_attempt.lease_expires_at_ms is None):
        return 0
    return last_attempt.lease_expires_at_ms + kill_grace_ms


def review(task: TaskRec, action: ReviewAction, result_json: str | None,
           reason_json: str, now_ms: int, not_before_ms: int = 0) -> None:
    """Resolve NEEDS_REVIEW. ``retry``: PENDING at ``not_before_ms`` (see retry_not_before)
    or now, with one more attempt allowed (and time for it); the earlier uncertainty stays
    on record, so a non-idempotent task that fails retryably later comes back to review
    instead of retrying on its own; ``succeed``:
    SUCCEEDED with ``result_json`` (already validated); ``fail``: FAILED/REVIEW_FAILED with
    ``reason_json`` as details. CONFLICT unless the task is NEEDS_REVIEW."""
    if action is ReviewAction.RETRY:
        task.state = next_task_state(task.state, TaskEvent.OPERATOR_RETRY)
        available = max(now_ms, not_before_ms)
        task.max_attempts = max(task.max_attempts, task.attempts_started + 1)
        task.deadline_at_ms = max(task.deadline_at_ms, available + task.attempt_timeout_ms)
        task.available_at_ms = available
        task.failure_code = task.failure_details = None  # the attempts keep the history
    elif action is ReviewAction.SUCCEED:
        if result_json is None:
            raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a result")
        task.state = next_task_state(task.state, TaskEvent.OPERATOR_SUCCEED)
        task.result = result_json
        task.failure_code = task.failure_details = None
    else:
        task.state = next_task_state(task.state, TaskEvent.OPERATOR_FAIL)
        task.failure_code = "REVIEW_FAILED"
        task.failure_details = reason_json
    task.updated_at_ms = now_ms


@dataclass(frozen=True, slots=True)
class RunBudget:
    """What one run of a task may spend: the submitted policy's attempts, and its deadline
    span (deadline less submit instant). A retry of an ended task starts a run with it."""

    max_attempts: int
    deadline_ms: int


def run_budget(max_attempts: int, deadline_at_ms: int, created_at_ms: int,
               run_max_attempts: int | None, run_deadline_ms: int | None) -> RunBudget:
    """The budget of one run: the one kept when a review or retry first raised the task's
    limits (``run_*``), else the task's limits as submitted."""
    return RunBudget(
        max_attempts if run_max_attempts is None else run_max_attempts,
        max(0, deadline_at_ms - created_at_ms) if run_deadline_ms is None else run_deadline_ms)


def rerun(task: TaskRec, run: RunBudget, now_ms: int, not_before_ms: int = 0,
          unreleased: bool = False) -> None:
    """FAILED or CANCELLED → PENDING: a new run at ``not_before_ms`` (see retry_not_before)
    or now, with ``run.max_attempts`` attempts more than were started so far
    (``max_attempts`` counts every attempt of the task's life) and a deadline
    ``run.deadline_ms`` ahead. The attempts, the audit and the ``uncertain`` history stay:
    a NON_IDEMPOTENT task with an uncertain past still goes to review rather than retrying
    on its own. CONFLICT in any other state, and for a cancelled task whose running attempt
    has no outcome yet (two attempts never overlap), or for a workflow node never released
    (``unreleased``: its parents have not all let it run)."""
    new_state = next_task_state(task.state, TaskEvent.RERUN)
    if unreleased:
        # Its parents' results never came: run again, it would run without them.
        raise OrbitError(ErrorCode.CONFLICT,
                         f"task {task.id} is a workflow node that ended before its parents "
                         "let it run (a parent failed, or it was cancelled waiting): it "
                         "cannot run again alone (submit a new workflow)")
    if task.current_attempt_id is not None:
        raise OrbitError(ErrorCode.CONFLICT,
                         f"task {task.id} was cancelled while an attempt ran, and that attempt "
                         "has no outcome yet: retry it once the attempt ended")
    available = max(now_ms, not_before_ms)
    task.state = new_state
    task.max_attempts = task.attempts_started + run.max_attempts
    task.deadline_at_ms = available + max(run.deadline_ms, task.attempt_timeout_ms)
    task.available_at_ms = available
    task.failure_code = task.failure_details = None
    task.cancel_requested = False
    task.finished_at_ms = None
    task.start_by_at_ms = None
    task.updated_at_ms = now_ms


class ResumeStatus(StrEnum):
    RUNNING = "RUNNING"
    LOST = "LOST"


def resume_status(task: TaskRec | None, attempt: AttemptRec | None, epoch: int,
                  instance_id: str, now_ms: int) -> tuple[ResumeStatus, int | None, str | None]:
    """What a reconnecting worker may keep: (RUNNING, remaining lease_ms, None) or
    (LOST, None, reason). Never extends a lease and never revives an expired attempt."""
    if task is None or attempt is None:
        return ResumeStatus.LOST, None, ErrorCode.NOT_FOUND.value
    if attempt.instance_id != instance_id:
        return ResumeStatus.LOST, None, ErrorCode.NOT_FOUND.value
    if epoch != attempt.epoch:
        return ResumeStatus.LOST, None, ErrorCode.STALE_EPOCH.value
    if attempt.state is not AttemptState.RUNNING:
        return ResumeStatus.LOST, None, f"ATTEMPT_{attempt.state.value}"
    if task.state is TaskState.CANCELLED:
        return ResumeStatus.LOST, None, "TASK_CANCELLED"
    if not lease_holds(attempt, now_ms):
        return ResumeStatus.LOST, None, ErrorCode.LEASE_EXPIRED.value
    assert attempt.lease_expires_at_ms is not None
    return ResumeStatus.RUNNING, attempt.lease_expires_at_ms - now_ms, None
