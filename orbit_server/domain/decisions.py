"""What the server decides after an attempt: the retry policy (``decide``, docs/handlers.md
"Failures") gives a ``Verdict`` naming its ``Decision`` and the ``Rule`` behind it; and the
lease arithmetic (``lease_ms``, ``lease_holds``). Pure: ``now_ms`` and the random draw are
arguments."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

from .records import AttemptRec, TaskRec


class Decision(StrEnum):
    """What the server did after an attempt (the attempt's ``decision``)."""

    SUCCEEDED = "SUCCEEDED"
    RETRY = "RETRY"
    FAILED = "FAILED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    CANCELLED = "CANCELLED"
    RELEASED = "RELEASED"


class Rule(StrEnum):
    """Why: the rule that made a decision (the attempt's ``decision_rule``)."""

    HANDLER_SUCCEEDED = "handler_succeeded"
    EXPLICIT_FAILURE = "explicit_failure"
    RETRYABLE_FAILURE_RETRY = "retryable_failure_retry"
    UNKNOWN_OUTCOME_IDEMPOTENT_RETRY = "unknown_outcome_idempotent_retry"
    UNKNOWN_OUTCOME_NON_IDEMPOTENT = "unknown_outcome_non_idempotent"
    UNCERTAIN_HISTORY = "uncertain_history"
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    DEADLINE_EXHAUSTED = "deadline_exhausted"
    TASK_CANCELLED = "task_cancelled"
    SESSION_ENDED = "session_ended"
    RESERVATION_EXPIRED = "reservation_expired"
    DEADLINE_PASSED = "deadline_passed"
    GRANT_DECLINED = "grant_declined"  # the worker gave an unconfirmed grant back
    GRANT_UNRECEIVED = "grant_unreceived"  # its connection ended; the resume did not list it


def lease_ms(now_ms: int, lease_ttl_ms: int, attempt_deadline_at_ms: int,
             task_deadline_at_ms: int) -> int:
    """min(lease TTL, attempt deadline - now, task deadline - now); ≤ 0 means no lease."""
    return min(lease_ttl_ms, attempt_deadline_at_ms - now_ms, task_deadline_at_ms - now_ms)


def lease_holds(attempt: AttemptRec, now_ms: int) -> bool:
    """Whether ``attempt`` runs under a lease that has not expired at ``now_ms``."""
    return (
        attempt.state is AttemptState.RUNNING
        and attempt.lease_expires_at_ms is not None
        and now_ms < attempt.lease_expires_at_ms
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """The retry policy's answer for one attempt: what was decided, by which rule, the task's
    next state, and for a RETRY the instant the task becomes dispatchable again."""

    decision: Decision
    rule: Rule
    task_state: TaskState
    available_at_ms: int | None = None  # set for RETRY


def decide(
    task: TaskRec,
    outcome: Outcome,
    retryable: bool,
    now_ms: int,
    draw: float,
    not_before_ms: int = 0,
) -> Verdict:
    """The retry policy (docs/handlers.md "Failures") for an accepted attempt outcome; pure.

    ``task.uncertain`` is the history *before* this attempt and ``task.attempts_started``
    counts this attempt. ``not_before_ms`` is the earliest instant a retry may be
    dispatched (a lost lease's expiry plus the kill grace).
    """
    if outcome is Outcome.SUCCEEDED:
        return Verdict(Decision.SUCCEEDED, Rule.HANDLER_SUCCEEDED, TaskState.SUCCEEDED)
    if outcome is Outcome.FAILED and not retryable:
        return Verdict(Decision.FAILED, Rule.EXPLICIT_FAILURE, TaskState.FAILED)
    # Exhaustion ends FAILED after an explicit failure, NEEDS_REVIEW after an uncertain one.
    exhausted = (Decision.FAILED, TaskState.FAILED) if outcome is Outcome.FAILED else (
        Decision.NEEDS_REVIEW, TaskState.NEEDS_REVIEW)
    if task.attempts_started >= task.max_attempts:
        return Verdict(exhausted[0], Rule.RETRY_BUDGET_EXHAUSTED, exhausted[1])
    available = max(now_ms + task.backoff.delay_ms(task.attempts_started, draw), not_before_ms)
    if available >= task.deadline_at_ms:
        return Verdict(exhausted[0], Rule.DEADLINE_EXHAUSTED, exhausted[1])
    if outcome is Outcome.FAILED:
        if task.idempotency is Idempotency.NON_IDEMPOTENT and task.uncertain:
            return Verdict(Decision.NEEDS_REVIEW, Rule.UNCERTAIN_HISTORY, TaskState.NEEDS_REVIEW)
        return Verdict(Decision.RETRY, Rule.RETRYABLE_FAILURE_RETRY, TaskState.PENDING, available)
    if task.idempotency is Idempotency.IDEMPOTENT:
        return Verdict(
            Decision.RETRY, Rule.UNKNOWN_OUTCOME_IDEMPOTENT_RETRY, TaskState.PENDING, available
        )
    return Verdict(Decision.NEEDS_REVIEW, Rule.UNKNOWN_OUTCOME_NON_IDEMPOTENT,
                   TaskState.NEEDS_REVIEW)
