"""Operator retries of ended tasks on a real database (SQLite and MariaDB): one task by ID,
a queue's tasks by filter page by page (a dry-run count first), the audit of each, the
budget a new run gets, and every refusal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from store_support import World

from orbit_server.auth import Principal
from orbit_server.domain.listing import RETRY_QUERY, retry_filter
from orbit_server.domain.query import parse_query
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability, Outcome

OTHER = Capability("other.handler", "v1", "v1")


def _failed(world: World, **spec: Any) -> dict[str, Any]:
    """A task that ran once and failed explicitly (no retry): FAILED."""
    t = world.submit(**spec)
    b = world.hello(caps=(Capability(t["capability"]["handler"], "v1", "v1"),))
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.FAILED, code="OBJECT_REJECTED", retryable=False)
    assert res.task_state == "FAILED"
    return t


def _retry(world: World, task_id: str, reason: str | None = None) -> dict[str, Any]:
    view, _ = world.service.retries.retry_task(world.producer, task_id, reason)
    return view


def test_a_failed_task_runs_again_with_a_new_run_and_succeeds(world: World) -> None:
    t = _failed(world, max_attempts=2)
    before = world.task(t["id"])
    assert before["failure"] is not None and before["finished_at_ms"] is not None
    view, effects = world.service.retries.retry_task(world.producer, t["id"], "fixed the input")
    assert view["state"] == "PENDING" and view["failure"] is None
    assert view["finished_at_ms"] is None and view["attempts"] == 1
    # max_attempts counts every attempt of the task's life: one spent, two more for this run.
    assert view["attempt_limit"] == 3 and view["policy"]["max_attempts"] == 2
    assert view["deadline_at_ms"] == world.clock() + 86_400_000
    assert effects.ready_queues == {world.queue_id}
    event = world.audit(t["id"])[-1]
    assert event["kind"] == "task_retried" and event["actor"].startswith("operator:")
    assert (event["from_state"], event["to_state"]) == ("FAILED", "PENDING")
    assert event["detail"] == {"max_attempts": [2, 3], "reason": "fixed the input"}
    b = world.hello()
    aid, ep = world.run_once(b)
    assert ep == 2
    res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result="fine")
    assert res.task_state == "SUCCEEDED"
    attempts = world.attempts(t["id"])
    assert [a["outcome"] for a in attempts] == ["FAILED", "SUCCEEDED"]  # history kept


def test_each_run_gets_the_submitted_budget_not_a_growing_one(world: World) -> None:
    t = world.submit(max_attempts=2, backoff={"initial_ms": 0, "jitter": 0})
    b = world.hello()
    for run in range(2):
        for _ in range(2):  # retryable failures until the run's budget is spent
            aid, ep = world.run_once(b)
            world.finish(b, aid, ep, Outcome.FAILED, code="FLAKY", retryable=True)
        view = world.task(t["id"])
        assert view["state"] == "FAILED" and view["attempts"] == 2 * (run + 1)
        view = _retry(world, t["id"])
        assert view["attempt_limit"] == 2 * (run + 2) and view["policy"]["max_attempts"] == 2


def test_a_cancelled_task_runs_again(world: World) -> None:
    t = world.submit()
    world.service.tasks.cancel_task(world.producer, t["id"], "not now")
    view = _retry(world, t["id"])
    assert view["state"] == "PENDING" and view["cancel_requested"] is False
    assert view["attempt_limit"] == 3


def test_a_cancelled_attempt_without_outcome_must_end_first(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    world.service.tasks.cancel_task(world.producer, t["id"], None)
    with pytest.raises(OrbitError) as info:
        _retry(world, t["id"])
    assert info.value.code is ErrorCode.CONFLICT and "no outcome yet" in info.value.message
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="TASK_CANCELLED")
    assert _retry(world, t["id"])["state"] == "PENDING"


def test_a_task_in_another_state_is_refused_and_left_as_it_was(world: World) -> None:
    b = world.hello()
    succeeded = world.submit()["id"]
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.SUCCEEDED, result=1)
    running = world.submit()["id"]
    world.run_once(b)
    pending = world.submit()["id"]
    for task_id, state in ((succeeded, "SUCCEEDED"), (running, "RUNNING"),
                           (pending, "PENDING")):
        assert world.task(task_id)["state"] == state
        audit_before = world.audit(task_id)
        with pytest.raises(OrbitError) as info:
            _retry(world, task_id)
        assert info.value.code is ErrorCode.CONFLICT
        assert f"in state {state} cannot be retried" in info.value.message
        assert world.task(task_id)["state"] == state
        assert world.audit(task_id) == audit_before


def test_only_producers_of_the_queue_and_admins_may_retry(world: World) -> None:
    t = _failed(world)
    other_queue = world.service.admin.create_queue(world.admin, "other")["id"]
    cred = world.service.admin.create_credential(world.admin, "producer", [other_queue], "o")
    stranger = world.service.admin.authenticate(f"{cred['credential_id']}.{cred['secret']}")
    with pytest.raises(OrbitError) as info:
        world.service.retries.retry_task(stranger, t["id"], None)
    assert info.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(OrbitError) as info:
        _walk(world, stranger, {}, dry_run=True)
    assert info.value.code is ErrorCode.NOT_FOUND
    view, _ = world.service.retries.retry_task(world.admin, t["id"], None)
    assert view["state"] == "PENDING"


def _walk(world: World, principal: Principal, params: dict[str, list[str]], *,
          dry_run: bool, page: int = 2) -> tuple[int, int, int]:
    """A bulk retry as orbit_server/retrying.py drives it, with small pages: (matched,
    retried, skipped) summed over the pages."""
    filt = retry_filter(parse_query(params, RETRY_QUERY), page, world.clock())
    totals = [0, 0, 0]
    for _ in range(100):
        got, _effects = world.service.retries.retry_page(principal, world.queue_id, filt,
                                                         "bulk fix", dry_run)
        totals = [totals[0] + got.matched, totals[1] + got.retried, totals[2] + got.skipped]
        if got.after is None:
            return totals[0], totals[1], totals[2]
        filt = replace(filt, after=got.after)
    raise AssertionError("the bulk retry did not end")


def test_bulk_retry_counts_then_retries_exactly_those(world: World) -> None:
    wanted = [_failed(world)["id"] for _ in range(5)]
    other_handler = _failed(world, handler=OTHER.handler)["id"]
    cancelled = world.submit()["id"]
    world.service.tasks.cancel_task(world.producer, cancelled, None)
    still_pending = world.submit()["id"]
    params = {"state": ["FAILED"], "handler": ["text.normalize"]}

    assert _walk(world, world.producer, params, dry_run=True) == (5, 0, 0)
    assert all(world.task(i)["state"] == "FAILED" for i in wanted)  # a dry run changes nothing

    assert _walk(world, world.producer, params, dry_run=False) == (5, 5, 0)
    assert all(world.task(i)["state"] == "PENDING" for i in wanted)
    assert world.task(other_handler)["state"] == "FAILED"
    assert world.task(cancelled)["state"] == "CANCELLED"
    assert world.task(still_pending)["state"] == "PENDING"
    for task_id in wanted:
        [event] = [e for e in world.audit(task_id) if e["kind"] == "task_retried"]
        assert event["detail"] == {"max_attempts": [3, 4], "reason": "bulk fix", "bulk": True}
    # Nothing matches any more: a second run finds nothing to do.
    assert _walk(world, world.producer, params, dry_run=True) == (0, 0, 0)
    # Without a state: FAILED and CANCELLED both.
    assert _walk(world, world.producer, {}, dry_run=True) == (2, 0, 0)


def test_bulk_retry_takes_no_state_but_failed_and_cancelled(world: World) -> None:
    for state in ("PENDING", "FAILED,SUCCEEDED", "NEEDS_REVIEW"):
        with pytest.raises(OrbitError) as info:
            retry_filter(parse_query({"state": [state]}, RETRY_QUERY), 10, world.clock())
        assert info.value.code is ErrorCode.BAD_REQUEST
        assert "only FAILED and CANCELLED" in info.value.message
    with pytest.raises(OrbitError) as info:  # the list's paging is not a retry's
        parse_query({"limit": ["5"]}, RETRY_QUERY)
    assert info.value.code is ErrorCode.BAD_REQUEST


def test_bulk_retry_leaves_tasks_created_after_it_began(world: World) -> None:
    early = _failed(world)["id"]
    filt = retry_filter(parse_query({}, RETRY_QUERY), 10, world.clock())
    world.clock.advance(5)
    late = _failed(world)["id"]
    got, _ = world.service.retries.retry_page(world.producer, world.queue_id, filt, None, False)
    assert (got.matched, got.retried, got.after) == (1, 1, None)
    assert world.task(early)["state"] == "PENDING" and world.task(late)["state"] == "FAILED"
