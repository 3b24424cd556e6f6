"""Bulk actions by filter with a real orbit-supervise (docs/flow-control.md "Bulk actions"):
a cancel and each review decision for the tasks a filter selects (state, capability,
created range), a dry-run count first, each task's change audited; and a bulk retry of
5,000 FAILED tasks while a worker runs other tasks, every one retried once and audited.
Both stores."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlalchemy import text
from supervisor_support import SupEnv, spec, submit, wait_task
from support.orbit_http import expect, expect_error
from support.waiting import wait_until

from orbit_server.store import create_engine_for


def _audit(producer: httpx.Client, task_id: str, kind: str) -> list[dict[str, Any]]:
    events = expect(producer.get(f"/v1/tasks/{task_id}/audit"), 200)["events"]
    return [e for e in events if e["kind"] == kind]


def _bulk(producer: httpx.Client, queue_id: str, what: str, params: dict[str, Any],
          body: dict[str, Any]) -> dict[str, Any]:
    return dict(expect(producer.post(f"/v1/queues/{queue_id}/tasks/{what}", params=params,
                                     json=body), 200))


def test_bulk_cancel_by_filter_with_a_dry_run_count(sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    # No worker serves flow.other: its tasks stay PENDING until cancelled.
    other = expect(producer.post(f"/v1/queues/{queue_id}/tasks/batch", json={"tasks": [
        {**spec("upper", {"text": str(i)}), "handler": "flow.other"} for i in range(5)]}),
        201)["tasks"]
    kept = submit(producer, queue_id, "upper", {"text": "kept"}, delay_ms=60_000)
    sup_env.start(workers=1)
    running = submit(producer, queue_id, "sleep", {"seconds": 30})
    wait_task(producer, running, until=lambda t: t["state"] == "RUNNING")

    by_handler = {"handler": "flow.other"}
    counted = _bulk(producer, queue_id, "cancel", by_handler, {"dry_run": True})
    assert (counted["matched"], counted["changed"], counted["dry_run"]) == (5, 0, True)
    assert all(expect(producer.get(f"/v1/tasks/{t['id']}"), 200)["state"] == "PENDING"
               for t in other)
    done = _bulk(producer, queue_id, "cancel", by_handler, {"reason": "wrong handler"})
    assert (done["matched"], done["cancelled"], done["skipped"], done["complete"]) == (
        5, 5, 0, True)
    for task in other:
        assert expect(producer.get(f"/v1/tasks/{task['id']}"), 200)["state"] == "CANCELLED"
        [event] = _audit(producer, task["id"], "task_cancelled")
        assert event["detail"]["bulk"] is True and event["detail"]["reason"] == "wrong handler"
    # RUNNING by state: the running attempt is cancelled on its worker.
    done = _bulk(producer, queue_id, "cancel", {"state": "RUNNING"}, {})
    assert done["cancelled"] == 1
    assert wait_task(producer, running)["state"] == "CANCELLED"
    assert expect(producer.get(f"/v1/tasks/{kept}"), 200)["state"] == "PENDING"
    # A state a cancel does not take is refused, naming the parameter's rule.
    expect_error(producer.post(f"/v1/queues/{queue_id}/tasks/cancel",
                               params={"state": "FAILED"}, json={}), 400, "BAD_REQUEST")


def _needs_review(producer: httpx.Client, queue_id: str, n: int) -> list[str]:
    """``n`` tasks that end NEEDS_REVIEW (a result that breaks the value rules, one
    attempt), created at a later instant than any before."""
    ids = [submit(producer, queue_id, "unchecked_result", {"text": "[NaN]"}, max_attempts=1)
           for _ in range(n)]
    for task_id in ids:
        assert wait_task(producer, task_id)["state"] == "NEEDS_REVIEW"
    return ids


def test_each_bulk_review_decision_by_created_range(sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    sup_env.start(workers=2)
    groups: list[tuple[list[str], int, int]] = []
    for _ in range(3):
        start = time.time_ns() // 1_000_000
        ids = _needs_review(producer, queue_id, 2)
        created = [expect(producer.get(f"/v1/tasks/{t}"), 200)["created_at_ms"] for t in ids]
        groups.append((ids, min(created), max(created)))
        assert min(created) >= start
        time.sleep(0.02)

    everything = _bulk(producer, queue_id, "review", {}, {"action": "fail", "dry_run": True})
    assert (everything["matched"], everything["changed"]) == (6, 0)

    decisions = [({"action": "fail", "reason": "bad input"}, "FAILED"),
                 ({"action": "succeed", "result": {"fixed": True}}, "SUCCEEDED"),
                 ({"action": "retry"}, None)]
    for (ids, first, last), (body, state) in zip(groups, decisions, strict=True):
        window = {"created_after": first, "created_before": last}
        assert _bulk(producer, queue_id, "review", window,
                     {**body, "dry_run": True})["matched"] == 2
        done = _bulk(producer, queue_id, "review", window, body)
        assert (done["matched"], done["changed"], done["skipped"]) == (2, 2, 0)
        for task_id in ids:
            view = (wait_task(producer, task_id) if state is None
                    else expect(producer.get(f"/v1/tasks/{task_id}"), 200))
            if state is not None:
                assert view["state"] == state
            else:  # run again: it ends as before, after a second attempt
                assert view["attempts"] == 2 and view["state"] == "NEEDS_REVIEW"
            [event] = _audit(producer, task_id, "task_reviewed")
            assert event["detail"]["action"] == body["action"]
            assert event["detail"]["bulk"] is True
            assert event["actor"].startswith("operator:")
        if state == "SUCCEEDED":
            assert all(expect(producer.get(f"/v1/tasks/{t}"), 200)["result"] == {"fixed": True}
                       for t in ids)
    expect_error(producer.post(f"/v1/queues/{queue_id}/tasks/review",
                               json={"action": "succeed"}), 400, "BAD_REQUEST")


BULK = 5_000
OTHER = 300


def test_a_bulk_retry_of_5000_failed_tasks_while_a_worker_runs_others(
        sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    # FAILED fast, through the API: no worker serves flow.never and each task must start
    # within 100 ms, so the reaper fails them (NOT_STARTED_IN_TIME).
    failed_spec = {**spec("upper", {"text": "x"}), "handler": "flow.never",
                   "schedule_to_start_ms": 100}
    for _ in range(BULK // 1_000):
        expect(producer.post(f"/v1/queues/{queue_id}/tasks/batch",
                             json={"tasks": [failed_spec] * 1_000}), 201)
    stats = lambda: expect(producer.get(f"/v1/queues/{queue_id}/stats"), 200)  # noqa: E731
    wait_until(lambda: stats()["counts"]["FAILED"] == BULK, timeout=60, interval=0.2,
               what=lambda: f"{BULK} tasks FAILED ({stats()['counts']})")

    others = [t["id"] for t in expect(producer.post(
        f"/v1/queues/{queue_id}/tasks/batch",
        json={"tasks": [spec("sleep", {"seconds": 0.05}) for _ in range(OTHER)]}),
        201)["tasks"]]
    sup_env.start(workers=2)
    wait_until(lambda: stats()["counts"]["SUCCEEDED"] > 0, timeout=30,
               what="the worker running the other tasks")

    counted = _bulk(producer, queue_id, "retry", {"handler": "flow.never"}, {"dry_run": True})
    assert (counted["matched"], counted["retried"]) == (BULK, 0)
    others_left = OTHER - stats()["counts"]["SUCCEEDED"]
    began_ms = time.time_ns() // 1_000_000
    done = _bulk(producer, queue_id, "retry", {"handler": "flow.never"},
                 {"reason": "bulk test"})
    ended_ms = time.time_ns() // 1_000_000
    assert (done["matched"], done["retried"], done["skipped"], done["complete"]) == (
        BULK, BULK, 0, True)
    for task_id in others:
        assert wait_task(producer, task_id, timeout_s=60)["state"] == "SUCCEEDED"

    engine = create_engine_for(sup_env.orbit.server.db_url)
    try:
        with engine.connect() as conn:
            retried = conn.execute(text(
                "SELECT a.task_id, COUNT(*), MIN(a.actor) FROM audit a JOIN tasks t "
                "ON t.id = a.task_id WHERE t.queue_id = :q AND a.kind = 'task_retried' "
                "GROUP BY a.task_id"), {"q": queue_id}).all()
            served = conn.execute(text(
                "SELECT COUNT(*) FROM attempts a JOIN tasks t ON t.id = a.task_id "
                "WHERE t.queue_id = :q AND t.handler = 'sup.sleep' "
                "AND a.started_at_ms BETWEEN :began AND :ended"),
                {"q": queue_id, "began": began_ms, "ended": ended_ms}).scalar_one()
    finally:
        engine.dispose()
    assert len(retried) == BULK
    assert {count for _task, count, _actor in retried} == {1}
    assert all(actor.startswith("operator:") for _task, _count, actor in retried)
    # More left than the two slots hold running: the worker had tasks to start meanwhile.
    if ended_ms - began_ms > 2_000 and others_left > 10:
        # A long walk (one page per transaction) left the worker served between its pages.
        assert served > 0
