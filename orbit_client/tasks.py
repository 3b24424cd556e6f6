"""The typed view of a task (``Task``) and what a settled task means for its producer
(``outcome``): the result, or a typed error for FAILED, NEEDS_REVIEW, CANCELLED, or a wait
that ended first. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from orbit_wire.errors import OutcomeError
from orbit_wire.model import Capability, TaskState

__all__ = [
    "Task",
    "TaskCancelled",
    "TaskError",
    "TaskFailed",
    "TaskNeedsReview",
    "TaskTimeout",
    "outcome",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Task(Generic[R]):
    """A task as the server answered it (docs/http-api.md "Task"). ``result`` is the parsed
    result (None until SUCCEEDED); ``result_json`` its exact text; ``view`` the whole answer
    as a dict, for the fields not lifted here."""

    id: str
    queue_id: str
    state: TaskState
    capability: Capability
    priority: int
    operation_key: str | None
    created_at_ms: int
    updated_at_ms: int
    deadline_at_ms: int
    next_attempt_at_ms: int | None
    attempts: int
    result: R | None
    result_json: str | None
    failure_code: str | None
    failure_details: Mapping[str, Any] | None
    cancel_requested: bool
    view: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> Task[Any]:
        """The Task of an answer of the HTTP API (what the dict API returns)."""
        cap = view["capability"]
        failure = view.get("failure") or None
        return cls(
            id=view["id"], queue_id=view["queue_id"], state=TaskState(view["state"]),
            capability=Capability(cap["handler"], cap["handler_version"],
                                  cap["payload_version"]),
            priority=int(view.get("priority", 5)), operation_key=view.get("operation_key"),
            created_at_ms=view["created_at_ms"], updated_at_ms=view["updated_at_ms"],
            deadline_at_ms=view["deadline_at_ms"],
            next_attempt_at_ms=view.get("next_attempt_at_ms"), attempts=view["attempts"],
            result=view.get("result"), result_json=view.get("result_json"),
            failure_code=None if failure is None else failure.get("code"),
            failure_details=None if failure is None else failure.get("details"),
            cancel_requested=bool(view.get("cancel_requested")), view=dict(view),
        )

    @property
    def settled(self) -> bool:
        """Terminal, or waiting for an operator (NEEDS_REVIEW)."""
        return self.state.settled


class TaskError(OutcomeError):
    """A task did not produce a result for its producer; ``task`` is the task as last read.
    ``code`` is the task's state (TaskFailed: its failure's code), not an ErrorCode."""

    def __init__(self, task: Task[Any], message: str, *, code: str | None = None,
                 retryable: bool = False) -> None:
        super().__init__(task.state.value if code is None else code, message,
                         retryable=retryable)
        self.task = task


class TaskFailed(TaskError):
    """The task ended FAILED: ``code`` and ``details`` are the failure's, the cause of its
    last attempt (e.g. HANDLER_ERROR with ``details["exception_type"]``, ATTEMPT_TIMEOUT, or
    a WorkerFailure's own code)."""

    def __init__(self, task: Task[Any]) -> None:
        super().__init__(task, f"task {task.id} failed: {failure_words(task)}",
                         code=task.failure_code)
        self.details = task.failure_details


class TaskNeedsReview(TaskError):
    """The task waits for an operator (NEEDS_REVIEW): its outcome was uncertain and it was
    not safe to retry. ``orbit tasks review`` resolves it. ``code`` is NEEDS_REVIEW;
    ``failure_code`` and ``details`` say why, the cause of its last attempt (e.g.
    ATTEMPT_TIMEOUT, HANDLER_CRASHED, HANDLER_ERROR with ``details["exception_type"]``)."""

    def __init__(self, task: Task[Any]) -> None:
        super().__init__(task, f"task {task.id} needs review: {failure_words(task)}")
        self.failure_code = task.failure_code
        self.details = task.failure_details


def failure_words(task: Task[Any]) -> str:
    """The failure's code, with the exception's type name (and the first line of its
    message, where the worker records it) when an exception caused it."""
    words = task.failure_code or "no failure recorded"
    details = task.failure_details or {}
    kind = details.get("exception_type")
    if isinstance(kind, str):
        words += f" ({kind}"
        message = details.get("exception_message")
        words += f": {message})" if isinstance(message, str) else ")"
    return words


class TaskCancelled(TaskError):
    """The task was cancelled."""

    def __init__(self, task: Task[Any]) -> None:
        super().__init__(task, f"task {task.id} was cancelled")


class TaskTimeout(TaskError, TimeoutError):
    """The wait ended before the task settled; the task goes on (``task.state``, also the
    code), so waiting again may see it settle (``retryable``). ``pending``: the IDs of every
    task the wait still waited for, ``task`` the first of them (``as_completed`` waits for
    several)."""

    def __init__(self, task: Task[Any], timeout: float,
                 pending: tuple[str, ...] | None = None) -> None:
        pending = (task.id,) if pending is None else pending
        others = len(pending) - 1
        also = f" (and {others} more task(s) not settled)" if others > 0 else ""
        super().__init__(task, f"task {task.id} is still {task.state.value} after "
                               f"{timeout} s{also}", retryable=True)
        self.timeout = timeout
        self.pending = pending


def outcome(task: Task[R], timeout: float) -> R:
    """The result of a SUCCEEDED task; else the typed error of its state (TaskTimeout when
    it has not settled, ``timeout`` being how long the caller waited)."""
    if task.state is TaskState.SUCCEEDED:
        return task.result  # type: ignore[return-value]  # a SUCCEEDED task has a result
    if task.state is TaskState.FAILED:
        raise TaskFailed(task)
    if task.state is TaskState.NEEDS_REVIEW:
        raise TaskNeedsReview(task)
    if task.state is TaskState.CANCELLED:
        raise TaskCancelled(task)
    raise TaskTimeout(task, timeout)
