"""The pure rules of Orbit's server: task specs, the frozen policy, the task and attempt state
machines, the retry decision, backoff and lease arithmetic.

Everything that decides a state lives here (h11 style). The tables ``TASK_TRANSITIONS`` and
``ATTEMPT_TRANSITIONS`` list every legal move; a function that would make an illegal one
raises ``IllegalTransition`` (code CONFLICT) *before* changing anything, so a record is never
left half-updated. Time is always an argument (``now_ms``, wall-clock milliseconds) and every
random draw is passed in (``draw`` in [0, 1)). No I/O, no clock, no database.

The service loads rows into ``TaskRec``/``AttemptRec``, calls these functions (which mutate
the records in place after checking) and writes the records back with compare-and-set.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from orbit_wire.errors import ErrorCode, OrbitError, ValueRejected
from orbit_wire.jsonvalue import check_text, encode_value
from orbit_wire.limits import MAX_NAME_LEN
from orbit_wire.model import AttemptState, Capability, Idempotency, Outcome, TaskState
from orbit_wire.names import is_name

# --------------------------------------------------------------------------- spec and policy

DAY_MS: Final = 86_400_000
DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_BACKOFF_INITIAL_MS: Final = 1_000
DEFAULT_BACKOFF_MAX_MS: Final = 60_000
DEFAULT_BACKOFF_MULTIPLIER: Final = 2.0
DEFAULT_BACKOFF_JITTER: Final = 0.2
DEFAULT_ATTEMPT_TIMEOUT_MS: Final = 300_000
DEFAULT_DEADLINE_MS: Final = DAY_MS
DEFAULT_LEASE_TTL_MS: Final = 30_000
MAX_OPERATION_KEY_LEN: Final = 255

_OPERATION_KEY_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_OPERATION_KEY_LEN}}}")
_SPEC_KEYS = frozenset(
    {
        "handler", "handler_version", "payload_version", "payload", "idempotency",
        "max_attempts", "backoff", "attempt_timeout_ms", "deadline_ms", "lease_ttl_ms",
        "operation_key",
    }
)
_BACKOFF_KEYS = frozenset({"initial_ms", "max_ms", "multiplier", "jitter"})


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS
    max_ms: int = DEFAULT_BACKOFF_MAX_MS
    multiplier: float = DEFAULT_BACKOFF_MULTIPLIER
    jitter: float = DEFAULT_BACKOFF_JITTER

    def delay_ms(self, retry_number: int, draw: float) -> int:
        """Delay before retry ``retry_number`` (1 = first retry); ``draw`` uniform in [0, 1).

        The base grows ``initial * multiplier**(n-1)`` up to ``max_ms``; jitter spreads it
        by ±``jitter`` of itself, and the result never exceeds ``max_ms``.
        """
        exponent = max(0, retry_number - 1)
        # Compare in log space so a large exponent cannot overflow a float.
        if self.initial_ms == 0:
            base = 0.0
        elif self.multiplier > 1.0 and exponent * math.log(self.multiplier) > math.log(
            self.max_ms / self.initial_ms
        ):
            base = float(self.max_ms)
        else:
            base = min(float(self.max_ms), self.initial_ms * self.multiplier**exponent)
        spread = 1.0 + self.jitter * (2.0 * draw - 1.0)
        return max(0, min(self.max_ms, int(base * spread)))


@dataclass(frozen=True, slots=True)
class Policy:
    """The safety policy, frozen at submit."""

    idempotency: Idempotency = Idempotency.NON_IDEMPOTENT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = Backoff()
    attempt_timeout_ms: int = DEFAULT_ATTEMPT_TIMEOUT_MS
    deadline_ms: int = DEFAULT_DEADLINE_MS
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A validated submission. ``payload_json`` is the payload's canonical JSON text."""

    capability: Capability
    payload_json: str
    policy: Policy
    operation_key: str | None


def parse_task_spec(obj: object, where: str = "task") -> TaskSpec:
    """Validate one TaskSpec (docs/http-api.md) and fill the defaults.

    Raises OrbitError BAD_REQUEST naming the field (prefixed by ``where``), or the value
    rule's own code (PAYLOAD_TOO_LARGE, NESTING_TOO_DEEP, ...) for the payload.
    """
    if not isinstance(obj, Mapping):
        raise _bad(where, "must be a JSON object")
    unknown = sorted(str(k) for k in obj if k not in _SPEC_KEYS)
    if unknown:
        raise _bad(where, f"has unknown field(s): {', '.join(unknown)}")
    capability = Capability(
        _name(obj, "handler", where),
        _name(obj, "handler_version", where),
        _name(obj, "payload_version", where),
    )
    if "payload" not in obj:
        raise _bad(where, "payload is required")
    try:
        payload_json = encode_value(obj["payload"], what=f"{where}.payload").decode()
    except ValueRejected as exc:
        raise ValueRejected(exc.code, exc.message) from None

    idempotency_raw = obj.get("idempotency", Idempotency.NON_IDEMPOTENT.value)
    if idempotency_raw not in (Idempotency.IDEMPOTENT.value, Idempotency.NON_IDEMPOTENT.value):
        raise _bad(where, "idempotency must be IDEMPOTENT or NON_IDEMPOTENT")
    backoff_raw = obj.get("backoff", {})
    if backoff_raw is None:
        backoff_raw = {}
    if not isinstance(backoff_raw, Mapping):
        raise _bad(where, "backoff must be an object")
    unknown = sorted(str(k) for k in backoff_raw if k not in _BACKOFF_KEYS)
    if unknown:
        raise _bad(where, f"backoff has unknown field(s): {', '.join(unknown)}")
    initial = _int(backoff_raw, "initial_ms", DEFAULT_BACKOFF_INITIAL_MS, 0, DAY_MS,
                   f"{where}.backoff")
    maximum = _int(backoff_raw, "max_ms", max(DEFAULT_BACKOFF_MAX_MS, initial), initial,
                   2**53, f"{where}.backoff")
    backoff = Backoff(
        initial_ms=initial,
        max_ms=maximum,
        multiplier=_float(backoff_raw, "multiplier", DEFAULT_BACKOFF_MULTIPLIER, 1.0, 10.0,
                          f"{where}.backoff"),
        jitter=_float(backoff_raw, "jitter", DEFAULT_BACKOFF_JITTER, 0.0, 1.0, f"{where}.backoff"),
    )
    policy = Policy(
        idempotency=Idempotency(idempotency_raw),
        max_attempts=_int(obj, "max_attempts", DEFAULT_MAX_ATTEMPTS, 1, 100, where),
        backoff=backoff,
        attempt_timeout_ms=_int(obj, "attempt_timeout_ms", DEFAULT_ATTEMPT_TIMEOUT_MS, 100,
                                DAY_MS, where),
        deadline_ms=_int(obj, "deadline_ms", DEFAULT_DEADLINE_MS, 100, 31 * DAY_MS, where),
        lease_ttl_ms=_int(obj, "lease_ttl_ms", DEFAULT_LEASE_TTL_MS, 100, 600_000, where),
    )
    key = obj.get("operation_key")
    if key is not None and (not isinstance(key, str) or not _OPERATION_KEY_RE.fullmatch(key)):
        raise _bad(
            where,
            f"operation_key must be 1-{MAX_OPERATION_KEY_LEN} printable ASCII characters "
            "without spaces",
        )
    return TaskSpec(capability, payload_json, policy, key)


def _bad(where: str, message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {message}")


def _name(obj: Mapping[object, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not is_name(value):
        raise _bad(where, f"{key} is required: 1-{MAX_NAME_LEN} of [A-Za-z0-9._:/-]")
    return value


def _int(obj: Mapping[object, object], key: str, default: int, lo: int, hi: int,
         where: str) -> int:
    value = obj.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(where, f"{key} must be an integer in [{lo}, {hi}]")
    return value


def _float(obj: Mapping[object, object], key: str, default: float, lo: float, hi: float,
           where: str) -> float:
    value = obj.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, f"{key} must be a number in [{lo}, {hi}]")
    number = float(value)
    if not (math.isfinite(number) and lo <= number <= hi):
        raise _bad(where, f"{key} must be a number in [{lo}, {hi}]")
    return number


# --------------------------------------------------------------------------- state tables


class TaskEvent(StrEnum):
    RESERVE = "RESERVE"  # a worker got a reservation
    RELEASE = "RELEASE"  # the reservation came back unstarted
    SUCCEED = "SUCCEED"
    FAIL = "FAIL"
    RETRY = "RETRY"  # back to PENDING after backoff
    NEED_REVIEW = "NEED_REVIEW"
    CANCEL = "CANCEL"
    DEADLINE = "DEADLINE"  # still PENDING at its deadline
    OPERATOR_RETRY = "OPERATOR_RETRY"
    OPERATOR_SUCCEED = "OPERATOR_SUCCEED"
    OPERATOR_FAIL = "OPERATOR_FAIL"


class AttemptEvent(StrEnum):
    START = "START"
    RELEASE = "RELEASE"
    FINISH = "FINISH"


_T = TaskState
TASK_TRANSITIONS: Final[Mapping[tuple[TaskState, TaskEvent], TaskState]] = {
    (_T.PENDING, TaskEvent.RESERVE): _T.RUNNING,
    (_T.PENDING, TaskEvent.CANCEL): _T.CANCELLED,
    (_T.PENDING, TaskEvent.DEADLINE): _T.FAILED,
    (_T.RUNNING, TaskEvent.RELEASE): _T.PENDING,
    (_T.RUNNING, TaskEvent.SUCCEED): _T.SUCCEEDED,
    (_T.RUNNING, TaskEvent.FAIL): _T.FAILED,
    (_T.RUNNING, TaskEvent.RETRY): _T.PENDING,
    (_T.RUNNING, TaskEvent.NEED_REVIEW): _T.NEEDS_REVIEW,
    (_T.RUNNING, TaskEvent.CANCEL): _T.CANCELLED,
    (_T.NEEDS_REVIEW, TaskEvent.OPERATOR_RETRY): _T.PENDING,
    (_T.NEEDS_REVIEW, TaskEvent.OPERATOR_SUCCEED): _T.SUCCEEDED,
    (_T.NEEDS_REVIEW, TaskEvent.OPERATOR_FAIL): _T.FAILED,
    # An operator may also give up on a task waiting for review.
    (_T.NEEDS_REVIEW, TaskEvent.CANCEL): _T.CANCELLED,
}

_A = AttemptState
ATTEMPT_TRANSITIONS: Final[Mapping[tuple[AttemptState, AttemptEvent], AttemptState]] = {
    (_A.RESERVED, AttemptEvent.START): _A.RUNNING,
    (_A.RESERVED, AttemptEvent.RELEASE): _A.RELEASED,
    (_A.RUNNING, AttemptEvent.FINISH): _A.FINISHED,
}


class IllegalTransition(OrbitError):
    """A move the state tables do not allow; nothing was changed."""

    def __init__(self, what: str, state: str, event: str):
        super().__init__(ErrorCode.CONFLICT, f"{what} in state {state} cannot {event.lower()}")


def next_task_state(state: TaskState, event: TaskEvent) -> TaskState:
    try:
        return TASK_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition("task", state.value, event.value) from None


def next_attempt_state(state: AttemptState, event: AttemptEvent) -> AttemptState:
    try:
        return ATTEMPT_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition("attempt", state.value, event.value) from None


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class TaskRec:
    """The mutable part of a task row plus the policy fields the rules read."""

    id: str
    queue_id: str
    state: TaskState
    idempotency: Idempotency
    max_attempts: int
    backoff: Backoff
    attempt_timeout_ms: int
    lease_ttl_ms: int
    deadline_at_ms: int
    available_at_ms: int
    epoch: int = 0
    attempts_started: int = 0
    uncertain: bool = False
    cancel_requested: bool = False
    current_attempt_id: str | None = None
    result: str | None = None
    failure_code: str | None = None
    failure_details: str | None = None
    updated_at_ms: int = 0


@dataclass(slots=True)
class AttemptRec:
    id: str
    task_id: str
    queue_id: str
    epoch: int
    attempt_number: int
    state: AttemptState
    instance_id: str
    reserved_at_ms: int
    child_pid: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    lease_expires_at_ms: int | None = None
    attempt_deadline_at_ms: int | None = None
    renewals: int = 0
    outcome: Outcome | None = None
    code: str | None = None
    retryable: bool | None = None
    details: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None
    kill_reason: str | None = None
    decision: str | None = None
    decision_rule: str | None = None


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


# --------------------------------------------------------------------------- lease arithmetic


def lease_ms(now_ms: int, lease_ttl_ms: int, attempt_deadline_at_ms: int,
             task_deadline_at_ms: int) -> int:
    """min(lease TTL, attempt deadline - now, task deadline - now); ≤ 0 means no lease."""
    return min(lease_ttl_ms, attempt_deadline_at_ms - now_ms, task_deadline_at_ms - now_ms)


def lease_holds(attempt: AttemptRec, now_ms: int) -> bool:
    return (
        attempt.state is AttemptState.RUNNING
        and attempt.lease_expires_at_ms is not None
        and now_ms < attempt.lease_expires_at_ms
    )


# --------------------------------------------------------------------------- retry decision


@dataclass(frozen=True, slots=True)
class Verdict:
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


_VERDICT_EVENT: Final[Mapping[TaskState, TaskEvent]] = {
    TaskState.SUCCEEDED: TaskEvent.SUCCEED,
    TaskState.FAILED: TaskEvent.FAIL,
    TaskState.PENDING: TaskEvent.RETRY,
    TaskState.NEEDS_REVIEW: TaskEvent.NEED_REVIEW,
}


# --------------------------------------------------------------------------- transitions


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
        raise OrbitError(ErrorCode.PERMISSION_DENIED, "attempt belongs to another worker instance")


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
    PERMISSION_DENIED, STALE_EPOCH, LEASE_EXPIRED (released, finished, cancelled, no time).
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


def renew(task: TaskRec, attempt: AttemptRec, epoch: int, instance_id: str, now_ms: int) -> int:
    """Extend a held lease; returns lease_ms, which may be shorter than the TTL.

    Raises STALE_EPOCH, LEASE_EXPIRED (lease gone, attempt/task deadline reached, or the
    task was cancelled: the worker must stop the child) or PERMISSION_DENIED.
    """
    _check_owner(attempt, instance_id, task.queue_id)
    _check_epoch(attempt, epoch)
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


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's finish report, value rules not yet applied."""

    outcome: Outcome
    code: str | None = None
    retryable: bool = False
    result_json: str | None = None
    details_json: str | None = None
    child_pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None
    kill_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Checked:
    """A report after the server's own value checks (docs/handlers.md "Results")."""

    outcome: Outcome
    code: str | None
    retryable: bool
    result: str | None
    details: str | None


def check_report(report: Report) -> Checked:
    """Apply the value rules again: a bad or missing result turns the outcome into
    UNKNOWN/INVALID_HANDLER_RESULT; failure details default to ``{}``."""
    if report.outcome is Outcome.SUCCEEDED:
        try:
            if report.result_json is None:
                raise ValueRejected(ErrorCode.INVALID_RESULT, "result is missing")
            check_text(report.result_json, what="result")
        except ValueRejected as exc:
            why = encode_value({"reason": exc.code.value}).decode()
            return Checked(Outcome.UNKNOWN, "INVALID_HANDLER_RESULT", False, None, why)
        return Checked(Outcome.SUCCEEDED, report.code, False, report.result_json, None)
    details = _checked_details(report.details_json)
    if report.outcome is Outcome.FAILED:
        return Checked(Outcome.FAILED, report.code or "WORKER_FAILURE", report.retryable,
                       None, details if details is not None else "{}")
    return Checked(Outcome.UNKNOWN, report.code or "HANDLER_ERROR", False, None, details)


def _checked_details(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        value = check_text(text, what="details")
    except ValueRejected as exc:
        return encode_value({"invalid_details": exc.code.value}).decode()
    if value == {} or value == []:
        return "{}"
    return text


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
           report: Checked, now_ms: int, draw: float) -> FinishResult:
    """Decide an attempt from a worker's report, or classify it as evidence.

    Raises PERMISSION_DENIED for another instance's attempt; every other non-authoritative
    report is returned as evidence and changes nothing (never the task's ``uncertain``).
    """
    _check_owner(attempt, instance_id, task.queue_id)
    if epoch != attempt.epoch:
        return FinishResult(evidence=EvidenceReason.STALE_EPOCH)
    if attempt.state is AttemptState.FINISHED:
        return FinishResult(evidence=EvidenceReason.ATTEMPT_FINISHED)
    if attempt.state is AttemptState.RELEASED:
        return FinishResult(evidence=EvidenceReason.ATTEMPT_RELEASED)
    if attempt.state is AttemptState.RESERVED:
        return FinishResult(evidence=EvidenceReason.NOT_STARTED)
    if not lease_holds(attempt, now_ms):
        return FinishResult(evidence=EvidenceReason.LEASE_EXPIRED)
    return _close(task, attempt, report, now_ms, draw, not_before_ms=0)


def expire(task: TaskRec, attempt: AttemptRec, now_ms: int, draw: float,
           kill_grace_ms: int) -> FinishResult:
    """The reaper: a RUNNING attempt whose lease expired ends UNKNOWN/LEASE_EXPIRED; a retry
    is not dispatched before the expiry plus the kill grace (no overlapping attempts)."""
    assert attempt.lease_expires_at_ms is not None
    if attempt.state is not AttemptState.RUNNING or now_ms < attempt.lease_expires_at_ms:
        raise IllegalTransition("attempt", attempt.state.value, "expire")
    checked = Checked(Outcome.UNKNOWN, "LEASE_EXPIRED", False, None, None)
    return _close(task, attempt, checked, now_ms, draw,
                  not_before_ms=attempt.lease_expires_at_ms + kill_grace_ms)


def _close(task: TaskRec, attempt: AttemptRec, report: Checked, now_ms: int, draw: float,
           not_before_ms: int) -> FinishResult:
    new_attempt = next_attempt_state(attempt.state, AttemptEvent.FINISH)
    if task.state is TaskState.CANCELLED:
        attempt.state = new_attempt
        _record(attempt, report, now_ms)
        attempt.decision = Decision.CANCELLED
        attempt.decision_rule = Rule.TASK_CANCELLED
        if report.outcome is Outcome.UNKNOWN:
            task.uncertain = True
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
    _record(attempt, report, now_ms)
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
    elif verdict.task_state is TaskState.FAILED:
        task.failure_code = report.code
        task.failure_details = report.details if report.details is not None else "{}"
    return FinishResult(verdict=verdict)


def _record(attempt: AttemptRec, report: Checked, now_ms: int) -> None:
    attempt.finished_at_ms = now_ms
    attempt.outcome = report.outcome
    attempt.code = report.code
    attempt.retryable = report.retryable
    attempt.details = report.details


def apply_report_facts(attempt: AttemptRec, report: Report) -> None:
    """Copy what the worker observed of the child onto the attempt (history only)."""
    if report.child_pid is not None:
        attempt.child_pid = report.child_pid
    attempt.exit_code = report.exit_code
    attempt.signal = report.signal
    attempt.cpu_ms = report.cpu_ms
    attempt.peak_rss_bytes = report.peak_rss_bytes
    attempt.kill_reason = report.kill_reason


def cancel(task: TaskRec, attempt: AttemptRec | None, now_ms: int) -> bool:
    """Cancel a task. PENDING/NEEDS_REVIEW end at once; RUNNING ends CANCELLED with
    ``cancel_requested`` and a RESERVED attempt released (a RUNNING one keeps its lease until
    the worker reports). Idempotent on CANCELLED (returns False: nothing changed); raises
    CONFLICT on SUCCEEDED/FAILED. ``attempt`` is the task's current attempt, if any."""
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


class ReviewAction(StrEnum):
    RETRY = "retry"
    SUCCEED = "succeed"
    FAIL = "fail"


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
    elif action is ReviewAction.SUCCEED:
        if result_json is None:
            raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a result")
        task.state = next_task_state(task.state, TaskEvent.OPERATOR_SUCCEED)
        task.result = result_json
    else:
        task.state = next_task_state(task.state, TaskEvent.OPERATOR_FAIL)
        task.failure_code = "REVIEW_FAILED"
        task.failure_details = reason_json
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
        return ResumeStatus.LOST, None, ErrorCode.PERMISSION_DENIED.value
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
