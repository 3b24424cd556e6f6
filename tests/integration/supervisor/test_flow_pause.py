"""Pause and resume with a real orbit-supervise (docs/flow-control.md "Pause and resume"):
a paused queue starts nothing new while its running attempt finishes, says so in every view
(the waiting fact, the queue list and stats, the pause log with who and why), and a resume
restarts dispatch; a capability version's pause leaves the other version running. Both
stores."""

from __future__ import annotations

import time
from typing import Any

import httpx
from supervisor_support import SupEnv, submit, wait_task
from support.orbit_http import expect, expect_error
from support.waiting import UNIT

FLOW_HANDLERS = "flow_handlers:HANDLERS"
# How long a paused task is watched to stay PENDING (it would start in milliseconds).
HOLD_S = 1.5


def _stays_pending(producer: httpx.Client, task_ids: list[str]) -> list[dict[str, Any]]:
    """The tasks' views after HOLD_S, asserting each stayed PENDING meanwhile."""
    end = time.monotonic() + HOLD_S * UNIT
    views: list[dict[str, Any]] = []
    while True:  # bounded by the hold
        views = [expect(producer.get(f"/v1/tasks/{t}"), 200) for t in task_ids]
        assert all(v["state"] == "PENDING" for v in views), views
        if time.monotonic() >= end:
            return views
        time.sleep(0.1)


def test_a_paused_queue_starts_nothing_new_and_a_resume_restarts_it(sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    sup_env.start(workers=2, handlers=FLOW_HANDLERS)
    running = submit(producer, queue_id, "sleep", {"seconds": 1.5 * UNIT})
    wait_task(producer, running, until=lambda t: t["state"] == "RUNNING")

    expect(producer.post(f"/v1/queues/{queue_id}/pause", json={"reason": "incident 41"}), 200)
    # Paused again: the same pause with the new reason (both logged).
    paused = expect(producer.post(f"/v1/queues/{queue_id}/pause",
                                  json={"reason": "incident 42"}), 200)
    assert [(p["scope"], p["reason"]) for p in paused["paused"]] == [("queue", "incident 42")]
    waiting = [submit(producer, queue_id, "upper", {"text": f"t{i}"}) for i in range(3)]

    # The running attempt finishes normally; nothing new starts on the free slots.
    assert wait_task(producer, running)["state"] == "SUCCEEDED"
    views = _stays_pending(producer, waiting)
    for view in views:
        fact = view["waiting"]
        assert fact["reason"] == "PAUSED" and fact["pause"]["scope"] == "queue"
        assert fact["pause"]["reason"] == "incident 42"
        assert fact["pause"]["paused_by"].startswith("operator:")
    stats = expect(producer.get(f"/v1/queues/{queue_id}/stats"), 200)
    assert [p["reason"] for p in stats["paused"]] == ["incident 42"]
    listed = expect(producer.get("/v1/queues"), 200)["queues"]
    [mine] = [q for q in listed if q["id"] == queue_id]
    assert [p["scope"] for p in mine["paused"]] == ["queue"]
    listed_tasks = expect(producer.get(f"/v1/queues/{queue_id}/tasks",
                                       params={"state": "PENDING"}), 200)["tasks"]
    assert {t["waiting"]["reason"] for t in listed_tasks} == {"PAUSED"}

    resumed = expect(producer.post(f"/v1/queues/{queue_id}/resume",
                                   json={"reason": "fixed"}), 200)
    assert resumed["resumed"] is True and resumed["paused"] == []
    for task_id in waiting:
        assert wait_task(producer, task_id)["state"] == "SUCCEEDED"
    log = expect(producer.get(f"/v1/queues/{queue_id}/pauses"), 200)["log"]
    assert [(e["action"], e["reason"]) for e in log] == [
        ("resumed", "fixed"), ("paused", "incident 42"), ("paused", "incident 41")]
    assert all(e["actor"].startswith("operator:") for e in log)
    # A second resume finds nothing paused; a pause needs a reason.
    again = expect(producer.post(f"/v1/queues/{queue_id}/resume", json={}), 200)
    assert again["resumed"] is False
    expect_error(producer.post(f"/v1/queues/{queue_id}/pause", json={}), 400, "BAD_REQUEST")
    expect_error(producer.post(f"/v1/queues/{queue_id}/pause",
                               json={"handler_version": "v1", "reason": "x"}),
                 400, "BAD_REQUEST")


def _work(version: str, n: int) -> dict[str, Any]:
    return {"handler": "flow.work", "handler_version": version, "payload_version": "v1",
            "payload": {"n": n}}


def test_a_capability_version_pause_leaves_the_other_version_running(sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    expect(producer.post(f"/v1/queues/{queue_id}/pause", json={
        "handler": "flow.work", "handler_version": "v1", "reason": "v1 is broken"}), 200)
    sup_env.start(workers=2, handlers=FLOW_HANDLERS)
    made = expect(producer.post(f"/v1/queues/{queue_id}/tasks/batch", json={"tasks": [
        _work("v1", 1), _work("v2", 2), _work("v1", 3), _work("v2", 4)]}), 201)["tasks"]
    v1 = [t["id"] for t in made if t["capability"]["handler_version"] == "v1"]
    v2 = [t["id"] for t in made if t["capability"]["handler_version"] == "v2"]
    for task_id in v2:
        assert wait_task(producer, task_id)["state"] == "SUCCEEDED"
    views = _stays_pending(producer, v1)
    assert {v["waiting"]["pause"]["scope"] for v in views} == {"capability_version"}
    # The queue's resume does not lift the version's pause: only its own key does.
    assert expect(producer.post(f"/v1/queues/{queue_id}/resume", json={}),
                  200)["resumed"] is False
    expect(producer.post(f"/v1/queues/{queue_id}/resume", json={
        "handler": "flow.work", "handler_version": "v1"}), 200)
    for task_id in v1:
        assert wait_task(producer, task_id)["state"] == "SUCCEEDED"


def test_a_task_that_waited_for_a_pause_past_its_start_bound_says_so(sup_env: SupEnv) -> None:
    producer, queue_id = sup_env.producer, sup_env.queue_id
    sup_env.start(workers=1, handlers=FLOW_HANDLERS)
    expect(producer.post(f"/v1/queues/{queue_id}/pause",
                         json={"handler": "sup.upper", "reason": "hold"}), 200)
    task_id = submit(producer, queue_id, "upper", {"text": "late"}, schedule_to_start_ms=300)
    failed = wait_task(producer, task_id)
    assert (failed["state"], failed["failure"]["code"]) == ("FAILED", "NOT_STARTED_IN_TIME")
    waited = failed["failure"]["details"]["waiting"]
    assert waited["reason"] == "PAUSED" and waited["pause"]["reason"] == "hold"
