"""Flow-control limits by key with a real server and real supervisors, on both stores: never
more than N attempts of a key open at once, checked from the attempts' own started and ended
times (not from the server's counters), while attempts are killed at their timeout and
leases expire under a SIGKILLed supervisor; a wildcard gives each key its own limit; a rate
is never above N starts in any window; tasks a limit holds do not block the others; the
HTTP routes round-trip and refuse bad patterns, bodies and keys with typed errors."""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
from supervisor_support import SupEnv, attempts, spec, submit, wait_task
from support.orbit_http import expect, expect_error
from support.waiting import wait_until


def _set_limit(admin: httpx.Client, queue_id: str, pattern: str, **body: Any) -> dict[str, Any]:
    response = admin.put(f"/v1/queues/{queue_id}/limits/{pattern}", json=body)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def _intervals(producer: httpx.Client, task_ids: list[str]) -> list[tuple[int, int]]:
    """(started, ended) of every started attempt of these tasks, from the attempts."""
    out = []
    for task_id in task_ids:
        for att in attempts(producer, task_id)["attempts"]:
            if att["started_at_ms"] is not None:
                assert att["finished_at_ms"] is not None, att  # every task has settled
                out.append((att["started_at_ms"], att["finished_at_ms"]))
    return out


def _most_at_once(intervals: list[tuple[int, int]]) -> int:
    """The largest number of intervals open at one instant (an end before a start at the
    same instant: the slot was free again)."""
    events = sorted([(s, 1) for s, _e in intervals] + [(e, -1) for _s, e in intervals],
                    key=lambda ev: (ev[0], ev[1]))
    best = now = 0
    for _at, step in events:
        now += step
        best = max(best, now)
    return best


def _settle(producer: httpx.Client, task_ids: list[str]) -> list[dict[str, Any]]:
    return [wait_task(producer, t, timeout_s=60) for t in task_ids]


def test_max_running_holds_while_attempts_are_killed_and_leases_expire(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    made = _set_limit(admin, queue_id, "licence:matlab", max_running=2)
    assert made["created"] is True and made["max_running"] == 2
    retry = {"idempotency": "IDEMPOTENT", "max_attempts": 3,
             "backoff": {"initial_ms": 50, "jitter": 0}}
    first = sup_env.start(workers=4)
    keyed = [submit(producer, queue_id, "sleep", {"seconds": 0.4}, limits=["licence:matlab"],
                    **retry) for _ in range(6)]
    # Killed at their attempt timeout, then retried: each kill frees the slot it held.
    killed = [submit(producer, queue_id, "sleep", {"seconds": 5}, limits=["licence:matlab"],
                     attempt_timeout_ms=300, **retry) for _ in range(2)]
    # Free tasks are never held behind the limited ones.
    free = [submit(producer, queue_id, "sleep", {"seconds": 0.1}) for _ in range(4)]
    for task in _settle(producer, free):
        assert task["state"] == "SUCCEEDED", task
    # A supervisor SIGKILLed with attempts open: their leases expire on the server.
    wait_until(lambda: any(a["started_at_ms"] for t in keyed[3:]
                           for a in attempts(producer, t)["attempts"]),
               timeout=30, what="a later keyed task started")
    lapsing = [submit(producer, queue_id, "sleep", {"seconds": 3}, limits=["licence:matlab"],
                      lease_ttl_ms=1000, **retry) for _ in range(2)]
    wait_until(lambda: any(a["started_at_ms"] for t in lapsing
                           for a in attempts(producer, t)["attempts"]),
               timeout=30, what="a lapsing task started")
    first.send(signal.SIGKILL)
    first.wait()
    sup_env.start(workers=4)
    everything = keyed + killed + lapsing
    settled = _settle(producer, everything)
    assert all(t["state"] in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW") for t in settled), [
        (t["state"], t["failure"]) for t in settled if t["state"] != "SUCCEEDED"]
    intervals = _intervals(producer, everything)
    assert len(intervals) >= len(everything)
    assert _most_at_once(intervals) == 2, sorted(intervals)  # reached, never passed
    codes = {a["code"] for t in everything for a in attempts(producer, t)["attempts"]}
    assert "ATTEMPT_TIMEOUT" in codes or "LEASE_EXPIRED" in codes, codes
    # The task view carries its keys.
    assert settled[0]["limits"] == ["licence:matlab"]


def test_a_wildcard_gives_each_key_its_own_limit(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    _set_limit(admin, queue_id, "customer:*", max_running=1)
    by_key = {key: [submit(producer, queue_id, "sleep", {"seconds": 0.5}, limits=[key])
                    for _ in range(3)] for key in ("customer:1", "customer:2")}
    sup_env.start(workers=4)
    for key, task_ids in by_key.items():
        for task in _settle(producer, task_ids):
            assert task["state"] == "SUCCEEDED", task
        assert _most_at_once(_intervals(producer, task_ids)) == 1, key
    # Each key has its own slot: the two ran side by side at some point.
    both = _intervals(producer, by_key["customer:1"] + by_key["customer:2"])
    assert _most_at_once(both) == 2, sorted(both)


def test_a_rate_is_never_above_its_count_in_any_window(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    _set_limit(admin, queue_id, "api:partner", rate={"count": 3, "interval_ms": 1000})
    task_ids = [submit(producer, queue_id, "upper", {"text": "x"}, limits=["api:partner"])
                for _ in range(8)]
    sup_env.start(workers=4)
    for task in _settle(producer, task_ids):
        assert task["state"] == "SUCCEEDED", task
    # Attempts reserve their rate slot; a started attempt's start instant is its reserve's
    # or later, so the reserve instants are what the window bounds.
    starts = sorted(a["reserved_at_ms"] for t in task_ids
                    for a in attempts(producer, t)["attempts"])
    for i, at in enumerate(starts):
        in_window = [s for s in starts[i:] if s < at + 1000]
        assert len(in_window) <= 3, (at, starts)
    assert starts[-1] - starts[0] >= 2000  # 8 starts at 3 per second need two more seconds


def test_the_routes_round_trip_and_refuse_bad_input(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    base = f"/v1/queues/{queue_id}/limits"
    made = _set_limit(admin, queue_id, "tenant:*", max_running=5,
                      rate={"count": 10, "interval_ms": 1000})
    assert (made["wildcard"], made["rate"]) == (True, {"count": 10, "interval_ms": 1000})
    again = _set_limit(admin, queue_id, "tenant:*", max_running=7)
    assert (again["created"], again["max_running"], again["rate"]) == (False, 7, None)
    _set_limit(admin, queue_id, "licence:matlab", max_running=1)
    listed = expect(producer.get(base), 200)["limits"]
    assert [(x["pattern"], x["max_running"]) for x in listed] == [
        ("licence:matlab", 1), ("tenant:*", 7)]
    one = expect(producer.get(f"{base}/licence:matlab"), 200)
    assert one["usage"] == {"running": 0, "recent_starts": 0}
    assert one["changes"][0]["action"] == "set" and one["changes"][0]["actor"]
    wild = expect(producer.get(f"{base}/tenant:*"), 200)
    assert [c["detail"]["max_running"] for c in wild["changes"]] == [7, 5]  # newest first
    # A producer reads, only an admin sets or deletes.
    expect_error(producer.put(f"{base}/x:y", json={"max_running": 1}), 403,
                 "PERMISSION_DENIED")
    expect_error(producer.delete(f"{base}/tenant:*"), 403, "PERMISSION_DENIED")
    for bad in ("nocolon", "Upper:x", "a:*b", "a:" + "v" * 65, "a:b c"):
        expect_error(admin.put(f"{base}/{bad}", json={"max_running": 1}), 400, "BAD_REQUEST")
    for body in ({}, {"max_running": 0}, {"max_running": None}, {"rate": {"count": 1}},
                 {"max_running": 1, "extra": 1}):
        expect_error(admin.put(f"{base}/ok:key", json=body), 400, "BAD_REQUEST")
    expect_error(admin.get(f"{base}/none:here"), 404, "NOT_FOUND")
    expect_error(admin.get(f"/v1/queues/{'f' * 32}/limits"), 404, "NOT_FOUND")
    # A submit's keys: at most 8, each name:value.
    for keys in (["nocolon"], [f"k:{i}" for i in range(9)], ["a:*"], "a:b"):
        expect_error(producer.post(f"/v1/queues/{queue_id}/tasks",
                                   json=spec("upper", {"text": "x"}, limits=keys)),
                     400, "BAD_REQUEST")
    assert expect(admin.delete(f"{base}/tenant:*"), 200)["deleted"] is True
    expect_error(admin.delete(f"{base}/tenant:*"), 404, "NOT_FOUND")
    assert [x["pattern"] for x in expect(admin.get(base), 200)["limits"]] == ["licence:matlab"]


def test_a_deleted_limit_lets_its_held_tasks_run(sup_env: SupEnv) -> None:
    admin, queue_id, producer = sup_env.orbit.admin_http, sup_env.queue_id, sup_env.producer
    _set_limit(admin, queue_id, "gpu:a100", max_running=1)
    sup_env.start(workers=2)
    long = submit(producer, queue_id, "sleep", {"seconds": 30}, limits=["gpu:a100"])
    wait_task(producer, long, until=lambda t: t["state"] == "RUNNING")
    held = submit(producer, queue_id, "upper", {"text": "x"}, limits=["gpu:a100"])
    time.sleep(1.0)  # a dispatch pass or two: the task stays held
    assert expect(producer.get(f"/v1/tasks/{held}"), 200)["state"] == "PENDING"
    expect(admin.delete(f"/v1/queues/{queue_id}/limits/gpu:a100"), 200)
    assert wait_task(producer, held, timeout_s=30)["state"] == "SUCCEEDED"
    expect(producer.post(f"/v1/tasks/{long}/cancel", json={}), 200)
