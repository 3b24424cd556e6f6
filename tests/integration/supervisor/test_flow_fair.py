"""Fair dispatch between keys with a real server and real supervisors, on both stores: a
tenant's 2,000 tasks queued first do not hold back another tenant's 10 (all of them start
within the first 30 attempts, ranked by the attempts' started times); priority still orders
the tasks of one key; the route round-trips, is audited and refuses bad input with typed
errors; tasks submitted before fairness was turned on still run."""

from __future__ import annotations

from typing import Any

import httpx
from supervisor_support import SupEnv, attempts, spec, submit, wait_task
from support.orbit_http import expect, expect_error

BIG, SMALL, WITHIN = 2000, 10, 30


def _fair(admin: httpx.Client, queue_id: str, key: str) -> dict[str, Any]:
    return dict(expect(admin.put(f"/v1/queues/{queue_id}/fair", json={"key": key}), 200))


def _batch(producer: httpx.Client, queue_id: str, specs: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for i in range(0, len(specs), 1000):
        made = expect(producer.post(f"/v1/queues/{queue_id}/tasks/batch",
                                    json={"tasks": specs[i:i + 1000]}), 201)
        out.extend(t["id"] for t in made["tasks"])
    return out


def _started_tasks(producer: httpx.Client, queue_id: str) -> list[str]:
    """Every task of the queue that has left PENDING (each started at least once)."""
    found: list[str] = []
    cursor = None
    for _ in range(20):  # bounded: at most 10,000 tasks
        params: dict[str, Any] = {"state": "RUNNING,SUCCEEDED", "limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = expect(producer.get(f"/v1/queues/{queue_id}/tasks", params=params), 200)
        found.extend(t["id"] for t in page["tasks"])
        cursor = page["next_cursor"]
        if not cursor:
            return found
    raise AssertionError("more started tasks than expected")


def _starts(producer: httpx.Client, task_ids: list[str]) -> dict[str, int]:
    """Each task's first started time, from its attempts."""
    out: dict[str, int] = {}
    for task_id in task_ids:
        starts = [a["started_at_ms"] for a in attempts(producer, task_id)["attempts"]
                  if a["started_at_ms"] is not None]
        if starts:
            out[task_id] = min(starts)
    return out


def test_a_small_tenant_starts_early_behind_a_big_one(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    made = _fair(admin, queue_id, "customer")
    assert (made["key"], made["updated_by"] is not None) == ("customer", True)
    _batch(producer, queue_id, [spec("sleep", {"seconds": 0.02}, limits=["customer:a"])
                                for _ in range(BIG)])
    small = _batch(producer, queue_id, [spec("sleep", {"seconds": 0.02},
                                             limits=["customer:b", "region:eu"])
                                        for _ in range(SMALL)])
    sup_env.start(workers=2)
    for task_id in small:
        assert wait_task(producer, task_id, timeout_s=60)["state"] == "SUCCEEDED"
    starts = _starts(producer, _started_tasks(producer, queue_id))
    assert set(small) <= set(starts)
    last_small = max(starts[t] for t in small)
    # Ties count against fairness: every attempt started at or before B's last one.
    rank = sum(1 for at in starts.values() if at <= last_small)
    assert rank <= WITHIN, (rank, sorted(starts.values())[:40])
    assert len(starts) >= SMALL * 2 - 1  # the big tenant was served meanwhile too


def test_priority_still_orders_the_tasks_of_one_key(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    _fair(admin, queue_id, "customer")
    low = [submit(producer, queue_id, "sleep", {"seconds": 0.05}, priority=1,
                  limits=["customer:a"]) for _ in range(3)]
    high = [submit(producer, queue_id, "sleep", {"seconds": 0.05}, priority=9,
                   limits=["customer:a"]) for _ in range(3)]
    other = [submit(producer, queue_id, "sleep", {"seconds": 0.05}, priority=1,
                    limits=["customer:b"]) for _ in range(3)]
    sup_env.start(workers=1)
    for task_id in low + high + other:
        assert wait_task(producer, task_id, timeout_s=60)["state"] == "SUCCEEDED"
    starts = _starts(producer, low + high + other)
    assert max(starts[t] for t in high) <= min(starts[t] for t in low), starts
    # The other key took turns with it: its first task did not wait for all six of A's.
    a_order = sorted(starts[t] for t in low + high)
    assert min(starts[t] for t in other) < a_order[-1], starts


def test_tasks_from_before_fairness_still_run_and_off_restores_plain_order(
        sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    before = [submit(producer, queue_id, "upper", {"text": "x"}, limits=["customer:a"])
              for _ in range(3)]
    _fair(admin, queue_id, "customer")
    during = [submit(producer, queue_id, "upper", {"text": "y"}) for _ in range(3)]  # no key
    gone = expect(admin.delete(f"/v1/queues/{queue_id}/fair"), 200)
    assert gone["key"] is None
    after = [submit(producer, queue_id, "upper", {"text": "z"}, limits=["customer:b"])
             for _ in range(3)]
    _fair(admin, queue_id, "customer")
    sup_env.start(workers=2)
    for task_id in before + during + after:
        assert wait_task(producer, task_id, timeout_s=60)["state"] == "SUCCEEDED"


def test_the_route_round_trips_is_audited_and_refuses_bad_input(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    base = f"/v1/queues/{queue_id}/fair"
    assert expect(producer.get(base), 200)["key"] is None
    _fair(admin, queue_id, "customer")
    _fair(admin, queue_id, "tenant")
    expect(admin.delete(base), 200)
    view = expect(producer.get(base), 200)
    assert view["key"] is None
    assert [(c["action"], c["key"]) for c in view["changes"]] == [
        ("fair_off", "tenant"), ("fair_on", "tenant"), ("fair_on", "customer")]
    assert all(c["actor"] for c in view["changes"])
    expect_error(admin.delete(base), 404, "NOT_FOUND")
    for bad in ({"key": "Customer"}, {"key": "customer:1"}, {"key": ""}, {}, {"key": 3},
                {"key": "customer", "extra": 1}):
        expect_error(admin.put(base, json=bad), 400, "BAD_REQUEST")
    expect_error(producer.put(base, json={"key": "customer"}), 403, "PERMISSION_DENIED")
    missing = "0" * 32
    expect_error(admin.put(f"/v1/queues/{missing}/fair", json={"key": "customer"}), 404,
                 "NOT_FOUND")
