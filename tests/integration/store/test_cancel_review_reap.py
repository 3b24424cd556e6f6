"""Cancel, review, the reaper, audit and stats on a real SQLite file."""

from __future__ import annotations

from typing import Any

import pytest
from store_support import World, as_json

from orbit_wire.errors import ErrorCode, OrbitError, ValueRejected
from orbit_wire.model import Outcome

# ------------------------------------------------------------------------ cancel


def test_cancel_pending_ends_at_once_and_is_idempotent(world: World) -> None:
    t = world.submit()
    view, effects = world.service.tasks.cancel_task(world.producer, t["id"], "not needed")
    assert view["state"] == "CANCELLED" and effects.terminal_tasks == [t["id"]]
    assert not effects.cancels
    again, effects = world.service.tasks.cancel_task(world.producer, t["id"], None)
    assert again["state"] == "CANCELLED" and not effects.terminal_tasks
    assert world.service.workers.reserve(world.hello(), 5) == []
    kinds = [e["kind"] for e in world.audit(t["id"])]
    assert kinds == ["task_submitted", "task_cancelled"]
    assert world.audit(t["id"])[1]["detail"] == {"reason": "not needed"}


def test_cancel_reserved_releases_and_notifies(world: World) -> None:
    t = world.submit()
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    view, effects = world.service.tasks.cancel_task(world.producer, t["id"], None)
    assert view["state"] == "CANCELLED" and view["cancel_requested"] is True
    assert effects.cancels == [(b.instance_id, r.attempt_id, r.epoch)]
    (a,) = world.attempts(t["id"])
    assert a["state"] == "RELEASED" and a["decision_rule"] == "task_cancelled"
    res = world.start(b, r.attempt_id, r.epoch)
    assert not res.ok and res.error_code is ErrorCode.LEASE_EXPIRED


def test_cancel_running_keeps_the_attempt_outcome_in_history(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    view, effects = world.service.tasks.cancel_task(world.producer, t["id"], "stop")
    assert view["state"] == "CANCELLED" and effects.cancels == [(b.instance_id, aid, ep)]
    renew = world.renew(b, aid, ep)
    assert not renew.ok and renew.error_code is ErrorCode.LEASE_EXPIRED
    res, effects = world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST")
    assert res.disposition == "ACCEPTED" and res.task_state == "CANCELLED"
    assert not effects.terminal_tasks
    (a,) = world.attempts(t["id"])
    assert a["state"] == "FINISHED" and a["outcome"] == "UNKNOWN"
    assert a["decision"] == "CANCELLED"
    assert world.task(t["id"])["state"] == "CANCELLED"


def test_cancel_running_whose_worker_vanished_is_closed_by_the_reaper(world: World) -> None:
    t = world.submit(lease_ttl_ms=1_000)
    b = world.hello()
    world.run_once(b)
    world.service.tasks.cancel_task(world.producer, t["id"], None)
    world.clock.advance(1_000)
    world.service.reaper.reap()
    (a,) = world.attempts(t["id"])
    assert (a["code"], a["decision"]) == ("LEASE_EXPIRED", "CANCELLED")
    assert world.task(t["id"])["state"] == "CANCELLED"


def test_cancel_terminal_is_conflict(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.SUCCEEDED, result=1)
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.cancel_task(world.producer, t["id"], None)
    assert exc.value.code is ErrorCode.CONFLICT


# ------------------------------------------------------------------------ review


def to_review(world: World, **spec: Any) -> dict[str, Any]:
    t = world.submit(**spec)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="HANDLER_CRASHED")
    assert world.task(t["id"])["state"] == "NEEDS_REVIEW"
    return t


def test_review_succeed_fail_and_conflict(world: World) -> None:
    t = to_review(world)
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.review(world.producer, t["id"], "succeed", None, None)
    assert exc.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(ValueRejected):
        world.service.tasks.review(world.producer, t["id"], "succeed", {"x": 2**70}, None)
    view, effects = world.service.tasks.review(world.producer, t["id"], "succeed", {"done": 1},
                                               "ok")
    assert view["state"] == "SUCCEEDED" and as_json(view["result"]) == {"done": 1}
    assert effects.terminal_tasks == [t["id"]]
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.review(world.producer, t["id"], "retry", None, None)
    assert exc.value.code is ErrorCode.CONFLICT
    event = world.audit(t["id"])[-1]
    assert event["kind"] == "task_reviewed" and event["actor"].startswith("operator:")
    assert event["detail"] == {"action": "succeed", "reason": "ok"}

    t2 = to_review(world)
    view, _ = world.service.tasks.review(world.producer, t2["id"], "fail", None, "bad input")
    assert as_json(view["failure"]) == {"code": "REVIEW_FAILED",
                                        "details": {"reason": "bad input"}}
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.review(world.producer, t2["id"], "maybe", None, None)
    assert exc.value.code is ErrorCode.BAD_REQUEST


def test_review_retry_grants_one_more_attempt(world: World) -> None:
    t = to_review(world, max_attempts=1)
    view, effects = world.service.tasks.review(world.producer, t["id"], "retry", None, None)
    assert view["state"] == "PENDING" and view["attempt_limit"] == 2
    assert view["policy"]["max_attempts"] == 1  # the policy as submitted
    assert effects.ready_queues == {world.queue_id}
    b = world.hello()
    aid, ep = world.run_once(b)
    assert ep == 2
    res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result="fine")
    assert res.task_state == "SUCCEEDED"


# ------------------------------------------------------------------------ reaper


def test_reaper_expires_leases_with_kill_grace_and_policy(world: World) -> None:
    t = world.submit(idempotency="IDEMPOTENT", lease_ttl_ms=1_000, backoff={"initial_ms": 0})
    b = world.hello()
    aid, _ep = world.run_once(b)
    world.clock.advance(999)
    assert world.service.reaper.reap().next_due_ms == world.clock() + 1
    assert world.task(t["id"])["state"] == "RUNNING"
    world.clock.advance(1)
    effects = world.service.reaper.reap()
    assert not effects.terminal_tasks and not effects.ready_queues
    assert effects.next_due_ms == world.clock() + 2_000
    view = world.task(t["id"])
    assert view["state"] == "PENDING" and view["next_attempt_at_ms"] == world.clock() + 2_000
    world.clock.advance(2_000)
    assert world.service.reaper.reap().ready_queues == {world.queue_id}
    aid2, ep2 = world.run_once(b)
    assert aid2 != aid and ep2 == 2
    kinds = [(e["kind"], e["actor"]) for e in world.audit(t["id"])]
    assert ("attempt_finished", "server") in kinds


def test_reaper_releases_stale_reservations(world: World) -> None:
    t = world.submit()
    b = world.hello()
    world.service.workers.reserve(b, 1)
    world.clock.advance(world.service.tx.config.reservation_ttl_ms - 1)
    world.service.reaper.reap()
    assert world.task(t["id"])["state"] == "RUNNING"
    world.clock.advance(1)
    effects = world.service.reaper.reap()
    assert effects.ready_queues == {world.queue_id}
    assert world.task(t["id"])["state"] == "PENDING"
    assert world.attempts(t["id"])[0]["decision_rule"] == "reservation_expired"


def test_reaper_fails_pending_tasks_at_their_deadline(world: World) -> None:
    t = world.submit(deadline_ms=5_000)
    keep = world.submit(deadline_ms=6_000)
    assert world.service.reaper.reap().next_due_ms == world.clock() + 5_000
    world.clock.advance(5_000)
    effects = world.service.reaper.reap()
    assert effects.terminal_tasks == [t["id"]]
    view = as_json(world.task(t["id"]))
    assert view["state"] == "FAILED"
    assert view["failure"] == {"code": "DEADLINE_EXCEEDED", "details": {}}
    assert world.task(keep["id"])["state"] == "PENDING"
    assert world.service.workers.reserve(world.hello(), 5)[0].task_id == keep["id"]


def test_a_submit_reports_when_its_tasks_fall_due(world: World) -> None:
    """The reaper sleeps until a submit's deadline or start-by bound without polling for
    it: the submit says when (on SQLite the periodic pass is only a safety net)."""
    now = world.clock()
    specs: list[object] = [world.spec(deadline_ms=9_000),
                           world.spec(deadline_ms=8_000, schedule_to_start_ms=3_000)]
    _made, effects = world.service.tasks.submit(world.producer, world.queue_id, specs)
    assert effects.next_due_ms == now + 3_000
    _made, effects = world.service.tasks.submit(world.producer, world.queue_id,
                                                [world.spec(deadline_ms=7_000)])
    assert effects.next_due_ms == now + 7_000


def test_reserved_task_past_deadline_is_released_then_failed(world: World) -> None:
    t = world.submit(deadline_ms=40_000)
    world.service.workers.reserve(world.hello(), 1)
    world.clock.advance(40_000)  # past the deadline and the reservation TTL (30 s)
    effects = world.service.reaper.reap()
    assert effects.terminal_tasks == [t["id"]]
    assert world.task(t["id"])["failure"]["code"] == "DEADLINE_EXCEEDED"


def test_reaper_pass_is_bounded_and_reports_more_work(world: World) -> None:
    import random

    from orbit_server.config import ServerConfig
    from orbit_server.services import Services

    small = Services(world.engine, ServerConfig(db_url=world.url, reap_batch=3), world.clock,
                     random.Random(1))
    for _ in range(7):
        world.submit(deadline_ms=1_000)
    world.clock.advance(1_000)
    first = small.reaper.reap()
    assert len(first.terminal_tasks) == 3 and first.next_due_ms == world.clock()
    assert len(small.reaper.reap().terminal_tasks) == 3
    assert len(small.reaper.reap().terminal_tasks) == 1


# ------------------------------------------------------------------------ audit and stats


def test_audit_trail_explains_an_attempt(world: World) -> None:
    t = world.submit(max_attempts=2, backoff={"initial_ms": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    world.renew(b, aid, ep)
    world.finish(b, aid, ep, Outcome.FAILED, code="TEMPORARY_REJECTION", retryable=True)
    events = world.audit(t["id"])
    assert [(e["kind"], e["from_state"], e["to_state"]) for e in events] == [
        ("task_submitted", None, "PENDING"),
        ("attempt_reserved", "PENDING", "RUNNING"),
        ("attempt_started", "RUNNING", "RUNNING"),
        ("attempt_finished", "RUNNING", "PENDING"),
    ]
    assert events[3]["detail"]["rule"] == "retryable_failure_retry"
    assert events[1]["actor"] == f"worker:{b.instance_id}"
    assert events[0]["actor"] == f"producer:{world.producer.credential_id}"
    assert all(e["at_ms"] == world.clock() for e in events)


def test_queue_stats(world: World) -> None:
    world.submit()
    world.clock.advance(500)
    world.submit()
    b = world.hello()
    world.run_once(b)
    stats = world.service.tasks.queue_stats(world.producer, world.queue_id)
    assert stats["counts"]["PENDING"] == 1 and stats["counts"]["RUNNING"] == 1
    assert stats["running_attempts"] == 1 and stats["oldest_pending_age_ms"] == 0
    world.clock.advance(100)
    assert world.service.tasks.queue_stats(
        world.admin, world.queue_id)["oldest_pending_age_ms"] == 100


def test_review_retry_after_lost_lease_waits_for_the_kill_grace(world: World) -> None:
    t = world.submit(lease_ttl_ms=1_000)
    b = world.hello()
    world.run_once(b)
    world.clock.advance(1_000)
    world.service.reaper.reap()  # UNKNOWN/LEASE_EXPIRED, non-idempotent: review
    assert world.task(t["id"])["state"] == "NEEDS_REVIEW"
    view, effects = world.service.tasks.review(world.producer, t["id"], "retry", None, None)
    assert view["next_attempt_at_ms"] == world.clock() + 2_000  # expiry + kill grace
    assert not effects.ready_queues and effects.next_due_ms == world.clock() + 2_000
    assert world.service.workers.reserve(b, 1) == []
    world.clock.advance(2_000)
    assert world.service.reaper.reap().ready_queues == {world.queue_id}
    assert world.service.workers.reserve(b, 1)[0].task_id == t["id"]
