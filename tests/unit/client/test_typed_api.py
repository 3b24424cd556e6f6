"""The typed declarations without a server: TaskType builds the TaskSpec dict and refuses
bad names and options; Task reads an answer; ``outcome`` maps each settled state to the
result or its typed error; Handlers registers a function per TaskType."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_child import Execution, Handler, Handlers
from orbit_child import TaskType as ChildTaskType
from orbit_child.registry import validate_handlers
from orbit_client import (
    Retryable,
    Task,
    TaskCancelled,
    TaskFailed,
    TaskNeedsReview,
    TaskTimeout,
    TaskType,
)
from orbit_client.tasks import outcome
from orbit_wire.errors import HandlerSpecError, OrbitError
from orbit_wire.fails_on import declared_failure
from orbit_wire.model import Capability, TaskState

NORMALIZE: TaskType[dict[str, str], dict[str, str]] = TaskType(
    "text.normalize", "v1", "v1", idempotent=True)


def test_one_declaration_for_both_sides() -> None:
    assert ChildTaskType is TaskType
    assert NORMALIZE.capability == Capability("text.normalize", "v1", "v1")
    assert str(NORMALIZE) == "text.normalize@v1/v1"


def test_spec_carries_defaults_and_options() -> None:
    assert NORMALIZE.spec({"text": "x"}) == {
        "handler": "text.normalize", "handler_version": "v1", "payload_version": "v1",
        "payload": {"text": "x"}, "idempotency": "IDEMPOTENT",
    }
    spec = NORMALIZE.spec({"text": "x"}, idempotent=False, priority=9, delay_ms=10,
                          operation_key="k", max_attempts=2)
    assert spec["idempotency"] == "NON_IDEMPOTENT"
    assert (spec["priority"], spec["delay_ms"], spec["operation_key"],
            spec["max_attempts"]) == (9, 10, "k", 2)
    urgent = TaskType("a", "1", "1", priority=8)
    assert urgent.spec(1)["priority"] == 8 and urgent.spec(1, priority=2)["priority"] == 2


@pytest.mark.parametrize("bad", [
    {"eta": 5}, {"priority": 10}, {"priority": True}, {"delay_ms": -1},
    {"delay_ms": 1, "not_before_at_ms": 2},
])
def test_spec_refuses_bad_options(bad: dict[str, Any]) -> None:
    with pytest.raises(OrbitError) as info:
        NORMALIZE.spec({}, **bad)
    assert info.value.code.value == "BAD_REQUEST"


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(OrbitError):
        TaskType("has space", "v1", "v1")
    with pytest.raises(OrbitError):
        TaskType("ok", "", "v1")
    with pytest.raises(OrbitError):
        TaskType("ok", "v1", "v1", priority=-1)


def _view(state: str, **extra: Any) -> dict[str, Any]:
    return {"id": "a" * 32, "queue_id": "b" * 32, "state": state,
            "capability": {"handler": "h", "handler_version": "1", "payload_version": "1"},
            "priority": 5, "operation_key": None, "created_at_ms": 1, "updated_at_ms": 2,
            "deadline_at_ms": 3, "next_attempt_at_ms": None, "attempts": 1, "result": None,
            "result_json": None, "failure": None, "cancel_requested": False, **extra}


def test_outcome_per_state() -> None:
    ok = Task.from_view(_view("SUCCEEDED", result={"n": 1}, result_json='{"n":1}'))
    assert outcome(ok, 1.0) == {"n": 1}
    failed = Task.from_view(_view("FAILED", failure={"code": "OBJECT_REJECTED",
                                                     "details": {"f": 1}}))
    with pytest.raises(TaskFailed) as info:
        outcome(failed, 1.0)
    assert (info.value.code, info.value.details) == ("OBJECT_REJECTED", {"f": 1})
    with pytest.raises(TaskNeedsReview):
        outcome(Task.from_view(_view("NEEDS_REVIEW")), 1.0)
    # The errors name the cause of the last attempt, and the exception's type.
    timed_out = Task.from_view(_view("NEEDS_REVIEW", failure={"code": "ATTEMPT_TIMEOUT",
                                                              "details": {}}))
    with pytest.raises(TaskNeedsReview) as review:
        outcome(timed_out, 1.0)
    assert (review.value.code, review.value.failure_code) == ("NEEDS_REVIEW", "ATTEMPT_TIMEOUT")
    assert str(review.value) == f"task {'a' * 32} needs review: ATTEMPT_TIMEOUT"
    raised = Task.from_view(_view("FAILED", failure={
        "code": "HANDLER_ERROR", "details": {"exception_type": "myapp.errors.Boom",
                                             "exception_message": "row 7 is gone"}}))
    with pytest.raises(TaskFailed) as boom:
        outcome(raised, 1.0)
    assert str(boom.value) == (f"task {'a' * 32} failed: HANDLER_ERROR "
                               "(myapp.errors.Boom: row 7 is gone)")
    with pytest.raises(TaskCancelled):
        outcome(Task.from_view(_view("CANCELLED")), 1.0)
    for state in ("PENDING", "RUNNING"):
        with pytest.raises(TaskTimeout) as timed:
            outcome(Task.from_view(_view(state)), 2.5)
        assert timed.value.timeout == 2.5 and timed.value.task.state is TaskState(state)


def test_handlers_registry() -> None:
    handlers = Handlers()

    @handlers.task(NORMALIZE)
    def normalise(execution: Execution) -> dict[str, str]:
        return {"text": str(execution.payload["text"]).upper()}

    other = TaskType("text.count", "v1", "v1")
    handlers.add(other, lambda e: 1)
    assert normalise.__name__ == "normalise"  # the function itself, callable in tests
    assert [h.capability for h in handlers] == [NORMALIZE.capability, other.capability]
    assert handlers.handlers[0] == Handler("text.normalize", "v1", "v1", normalise,
                                           NORMALIZE.policy)
    assert validate_handlers(handlers, "m:handlers") == tuple(handlers.handlers)
    with pytest.raises(HandlerSpecError, match="twice"):
        handlers.add(NORMALIZE, normalise)


class RowMissing(LookupError):
    pass


def test_fails_on_is_declared_once_and_reaches_the_handler() -> None:
    lookup = TaskType("user.lookup", "v1", "v1",
                      fails_on=(RowMissing, Retryable(TimeoutError), LookupError))
    handlers = Handlers()
    handlers.add(lookup, lambda e: None)
    assert handlers.handlers[0].fails_on == lookup.fails_on
    # The first entry an exception is an instance of decides; subclasses count.
    assert declared_failure(lookup.fails_on, RowMissing()) is False
    assert declared_failure(lookup.fails_on, TimeoutError()) is True
    assert declared_failure(lookup.fails_on, KeyError("k")) is False  # a LookupError
    assert declared_failure(lookup.fails_on, ValueError()) is None
    assert TaskType("a", "1", "1", fails_on=[KeyError]).fails_on == (KeyError,)
    assert TaskType("a", "1", "1", fails_on=KeyError).fails_on == (KeyError,)
    # The producer's submit is unchanged by it.
    assert "fails_on" not in lookup.spec({"id": 1})


@pytest.mark.parametrize("fails_on", [
    (SystemExit,), (KeyboardInterrupt,), (ValueError(),), ("ValueError",), (int,),
    (Exception,) * 33, 7,
])
def test_bad_fails_on_is_refused(fails_on: Any) -> None:
    with pytest.raises(OrbitError) as refused:
        TaskType("a", "1", "1", fails_on=fails_on)
    assert refused.value.code.value == "BAD_REQUEST"
    with pytest.raises(OrbitError):
        Retryable(SystemExit)  # type: ignore[arg-type]
    # A Handler built by hand is checked when the handlers are loaded.
    with pytest.raises(HandlerSpecError, match="fails_on"):
        validate_handlers([Handler("a", "1", "1", lambda e: 1, fails_on=(SystemExit,))])  # type: ignore[arg-type]
