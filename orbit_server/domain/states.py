"""The task and attempt state machines as tables (h11 style): ``TASK_TRANSITIONS`` and
``ATTEMPT_TRANSITIONS`` list every legal move, and ``next_task_state``/``next_attempt_state``
raise ``IllegalTransition`` (code CONFLICT) for any other, before a caller changes anything."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import AttemptState, TaskState


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
    RERUN = "RERUN"  # an operator runs an ended FAILED or CANCELLED task again
    PARENTS_DONE = "PARENTS_DONE"  # a workflow node's parents all ended: it may run


class AttemptEvent(StrEnum):
    START = "START"
    RELEASE = "RELEASE"
    FINISH = "FINISH"
    DECLINE = "DECLINE"  # a lease granted with the dispatch, given back unconfirmed


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
    # A new run of a task that ended without success (its attempts stay as history).
    (_T.FAILED, TaskEvent.RERUN): _T.PENDING,
    (_T.CANCELLED, TaskEvent.RERUN): _T.PENDING,
    # A workflow node waits for its parents (domain/workflows.py): released, cancelled (by
    # a failed parent, the workflow's cancel or an operator), or failed (PARENTS_TOO_LARGE).
    (_T.WAITING, TaskEvent.PARENTS_DONE): _T.PENDING,
    (_T.WAITING, TaskEvent.CANCEL): _T.CANCELLED,
    (_T.WAITING, TaskEvent.FAIL): _T.FAILED,
}

_A = AttemptState
ATTEMPT_TRANSITIONS: Final[Mapping[tuple[AttemptState, AttemptEvent], AttemptState]] = {
    (_A.RESERVED, AttemptEvent.START): _A.RUNNING,
    (_A.RESERVED, AttemptEvent.RELEASE): _A.RELEASED,
    (_A.RUNNING, AttemptEvent.FINISH): _A.FINISHED,
    (_A.RUNNING, AttemptEvent.DECLINE): _A.RELEASED,
}


_ONLY_REVIEW = "only a task in NEEDS_REVIEW can be reviewed"
# Operators read these messages (`orbit tasks review`, `cancel`): say the move in their words.
_PHRASES: Final[Mapping[str, str]] = {
    TaskEvent.OPERATOR_RETRY: f"be retried by review: {_ONLY_REVIEW}",
    TaskEvent.OPERATOR_SUCCEED: f"be marked succeeded by review: {_ONLY_REVIEW}",
    TaskEvent.OPERATOR_FAIL: f"be marked failed by review: {_ONLY_REVIEW}",
    TaskEvent.CANCEL: "be cancelled: it has already finished",
    TaskEvent.RERUN: ("be retried: only a FAILED or CANCELLED task can be run again (a task "
                      "in NEEDS_REVIEW is resolved with review)"),
    TaskEvent.NEED_REVIEW: "go to review",
    TaskEvent.DEADLINE: "reach its deadline",
}


class IllegalTransition(OrbitError):
    """A move the state tables do not allow; nothing was changed."""

    def __init__(self, what: str, state: str, event: str):
        phrase = _PHRASES.get(event, event.lower())
        super().__init__(ErrorCode.CONFLICT, f"{what} in state {state} cannot {phrase}")


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
