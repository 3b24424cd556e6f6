"""The pure rerun move (an operator's retry of an ended task) and the budget of a run: what
a new run may spend, which states the table lets it leave, and that a refusal changes
nothing."""

from __future__ import annotations

import copy

import pytest

from orbit_server import domain
from orbit_server.domain import Backoff, RunBudget, TaskRec
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Idempotency, TaskState

NOW = 50_000_000


def _task(state: TaskState, **extra: object) -> TaskRec:
    task = TaskRec(id="t" * 32, queue_id="q" * 32, state=state,
                   idempotency=Idempotency.NON_IDEMPOTENT, max_attempts=3,
                   backoff=Backoff(1000, 60_000, 2.0, 0.0), attempt_timeout_ms=5_000,
                   lease_ttl_ms=1_000, deadline_at_ms=NOW - 1, available_at_ms=NOW - 10,
                   epoch=3, attempts_started=3, uncertain=True, failure_code="X",
                   failure_details="{}", finished_at_ms=NOW - 5, cancel_requested=True)
    for key, value in extra.items():
        setattr(task, key, value)
    return task


@pytest.mark.parametrize("state", [TaskState.FAILED, TaskState.CANCELLED])
def test_a_rerun_starts_a_new_run_and_keeps_the_history(state: TaskState) -> None:
    task = _task(state)
    domain.rerun(task, RunBudget(max_attempts=3, deadline_ms=60_000), NOW, NOW + 700)
    assert task.state is TaskState.PENDING
    assert task.max_attempts == 6 and task.attempts_started == 3 and task.epoch == 3
    assert task.available_at_ms == NOW + 700 and task.deadline_at_ms == NOW + 700 + 60_000
    assert task.failure_code is None and task.failure_details is None
    assert task.finished_at_ms is None and task.cancel_requested is False
    assert task.uncertain is True  # an uncertain past stays on record
    assert task.updated_at_ms == NOW


def test_a_run_has_time_for_one_attempt_at_least() -> None:
    task = _task(TaskState.FAILED)
    domain.rerun(task, RunBudget(max_attempts=1, deadline_ms=10), NOW)
    assert task.deadline_at_ms == NOW + task.attempt_timeout_ms


@pytest.mark.parametrize("state", [TaskState.PENDING, TaskState.RUNNING, TaskState.SUCCEEDED,
                                   TaskState.NEEDS_REVIEW])
def test_no_other_state_may_rerun_and_a_refusal_changes_nothing(state: TaskState) -> None:
    task = _task(state)
    before = copy.deepcopy(task)
    with pytest.raises(OrbitError) as info:
        domain.rerun(task, RunBudget(3, 60_000), NOW)
    assert info.value.code is ErrorCode.CONFLICT
    assert f"in state {state.value} cannot be retried" in info.value.message
    assert task == before


def test_a_cancelled_attempt_without_outcome_blocks_the_rerun() -> None:
    task = _task(TaskState.CANCELLED, current_attempt_id="a" * 32)
    before = copy.deepcopy(task)
    with pytest.raises(OrbitError) as info:
        domain.rerun(task, RunBudget(3, 60_000), NOW)
    assert info.value.code is ErrorCode.CONFLICT and task == before


def test_the_budget_of_a_run_is_the_kept_one_else_the_submitted_limits() -> None:
    assert domain.run_budget(3, 10_000, 4_000, None, None) == RunBudget(3, 6_000)
    assert domain.run_budget(9, 90_000, 4_000, 3, 6_000) == RunBudget(3, 6_000)
