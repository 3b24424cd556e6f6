"""Leases granted with the dispatch, on a fake clock: a grant starts the attempt and stays
unconfirmed until the worker speaks of it; an unconfirmed grant goes back unspent (declined,
or never received); a confirmed one never does (docs/protocol.md, "Grants")."""

from __future__ import annotations

import copy

import pytest

from orbit_server import domain
from orbit_server.domain import Backoff, CheckedReport, Decision, Rule, TaskRec
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

NOW = 1_000_000
WORKER = "i" * 32
CONNECTION = NOW - 5_000  # the connection's connected_at_ms
OK = CheckedReport(Outcome.SUCCEEDED, None, False, "1", None)


def granted(**kw: object) -> tuple[TaskRec, domain.AttemptRec, int]:
    base: dict[str, object] = dict(
        id="t" * 32, queue_id="q" * 32, state=TaskState.PENDING,
        idempotency=Idempotency.NON_IDEMPOTENT, max_attempts=3,
        backoff=Backoff(1000, 60000, 2.0, 0.0), attempt_timeout_ms=10_000, lease_ttl_ms=3_000,
        deadline_at_ms=NOW + 100_000, available_at_ms=NOW - 10)
    base.update(kw)
    task = TaskRec(**base)  # type: ignore[arg-type]
    attempt = domain.reserve(task, "a" * 32, WORKER, NOW)
    lease = domain.grant(task, attempt, WORKER, CONNECTION, NOW)
    return task, attempt, lease


def test_a_grant_starts_the_attempt_with_a_lease_and_is_unconfirmed() -> None:
    task, attempt, lease = granted()
    assert lease == 3_000 and attempt.lease_expires_at_ms == NOW + 3_000
    assert attempt.state is AttemptState.RUNNING and task.state is TaskState.RUNNING
    assert task.attempts_started == 1 and attempt.attempt_number == 1
    assert attempt.grant_connection == CONNECTION


@pytest.mark.parametrize("speak", ["renew", "finish", "confirm"])
def test_any_word_of_the_worker_confirms_it(speak: str) -> None:
    task, attempt, _ = granted()
    if speak == "renew":
        domain.renew(task, attempt, attempt.epoch, WORKER, NOW + 100)
    elif speak == "finish":
        domain.finish(task, attempt, attempt.epoch, WORKER, OK, NOW + 100, 0.5)
    else:  # a resume entry
        domain.confirm_grant(attempt)
    assert attempt.grant_connection is None


def test_decline_gives_it_back_unspent_and_the_task_is_dispatchable_now() -> None:
    task, attempt, _ = granted()
    assert domain.decline(task, attempt, attempt.epoch, WORKER, NOW + 50) is True
    assert attempt.state is AttemptState.RELEASED
    assert attempt.decision == Decision.RELEASED and attempt.decision_rule == Rule.GRANT_DECLINED
    assert attempt.grant_connection is None and attempt.lease_expires_at_ms is None
    assert task.state is TaskState.PENDING and task.current_attempt_id is None
    assert task.attempts_started == 0 and task.available_at_ms <= NOW + 50
    # The next attempt has the same number, and a new epoch fences the declined one.
    again = domain.reserve(task, "b" * 32, WORKER, NOW + 60)
    assert again.attempt_number == 1 and again.epoch == attempt.epoch + 1


def test_a_confirmed_grant_is_never_declined_and_nothing_changes() -> None:
    task, attempt, _ = granted()
    domain.renew(task, attempt, attempt.epoch, WORKER, NOW + 100)
    before = (copy.deepcopy(task), copy.deepcopy(attempt))
    with pytest.raises(OrbitError) as refused:
        domain.decline(task, attempt, attempt.epoch, WORKER, NOW + 200)
    assert refused.value.code is ErrorCode.CONFLICT
    assert (task, attempt) == before


@pytest.mark.parametrize("who, epoch, code", [
    ("o" * 32, None, ErrorCode.NOT_FOUND), (WORKER, 99, ErrorCode.STALE_EPOCH)])
def test_decline_is_fenced_by_owner_and_epoch(who: str, epoch: int | None,
                                              code: ErrorCode) -> None:
    task, attempt, _ = granted()
    before = (copy.deepcopy(task), copy.deepcopy(attempt))
    with pytest.raises(OrbitError) as refused:
        domain.decline(task, attempt, attempt.epoch if epoch is None else epoch, who, NOW)
    assert refused.value.code is code and (task, attempt) == before


def test_a_grant_of_a_cancelled_task_declined_leaves_the_task_cancelled() -> None:
    task, attempt, _ = granted()
    domain.cancel(task, attempt, NOW + 10)
    assert domain.decline(task, attempt, attempt.epoch, WORKER, NOW + 20) is False
    assert task.state is TaskState.CANCELLED and attempt.state is AttemptState.RELEASED


def test_an_unreceived_grant_is_released_and_keeps_its_unconfirmed_mark() -> None:
    task, attempt, _ = granted()
    assert domain.release_unreceived(task, attempt, NOW + 50) is True
    assert attempt.decision_rule == Rule.GRANT_UNRECEIVED
    assert attempt.grant_connection == CONNECTION  # the record: it was never confirmed
    assert task.state is TaskState.PENDING and task.attempts_started == 0


def test_an_unconfirmed_grant_whose_lease_ran_out_is_an_uncertain_attempt() -> None:
    # The worker may have died with the frame unread, or run it: the lease decides, as for
    # any started attempt, so a NON_IDEMPOTENT task goes to review.
    task, attempt, lease = granted()
    result = domain.expire(task, attempt, NOW + lease, 0.5, 2_000)
    assert attempt.outcome is Outcome.UNKNOWN and attempt.code == "LEASE_EXPIRED"
    assert result.verdict is not None and task.state is TaskState.NEEDS_REVIEW
    assert attempt.grant_connection == CONNECTION
