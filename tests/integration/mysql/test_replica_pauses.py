"""A pause across replicas: two servers on one MariaDB database, a real supervisor on each.
A pause taken through replica A holds on replica B within one heartbeat (B's waiting fact
names it, from B's own memory), then no task starts on either replica; a resume through A
restarts dispatch on both."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mysql_support import Supervisor, upper_spec, worker_credentials
from support.orbit_http import bearer_of, expect, http_client, new_credential, new_queue
from support.server import ServerProcess, replica_pair
from support.waiting import UNIT, wait_until

pytestmark = [pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True),
              pytest.mark.timeout(120)]

SESSION_TTL_MS = 3_000
HEARTBEAT_S = min(SESSION_TTL_MS // 3, 5_000) / 1000  # what welcome announces
HOLD_S = 1.5


def _state(http: httpx.Client, task_id: str) -> dict[str, Any]:
    return dict(expect(http.get(f"/v1/tasks/{task_id}"), 200))


def test_a_pause_through_one_replica_holds_on_the_other_within_a_heartbeat(
        server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    a, b, admin = replica_pair(server_factory, session_ttl_ms=SESSION_TTL_MS)
    sups: list[Supervisor] = []
    try:
        with http_client(a.url, admin.bearer) as admin_a:
            queue = new_queue(admin_a)
            made = new_credential(admin_a, "producer", [queue])
            for i, srv in enumerate((a, b)):
                cred = worker_credentials(admin_a, queue, srv.url, tmp_path / f"w{i}.json")
                sups.append(Supervisor(tmp_path, cred, queue, srv.url, workers=1).start())
        bearer = bearer_of(made)
        with http_client(a.url, bearer) as prod_a, http_client(b.url, bearer) as prod_b:
            warm = [expect(p.post(f"/v1/queues/{queue}/tasks", json=upper_spec(i)), 201)["id"]
                    for i, p in enumerate((prod_a, prod_b))]
            for task_id in warm:  # both supervisors serve
                wait_until(lambda t=task_id: _state(prod_a, t)["state"] == "SUCCEEDED",
                           timeout=30, what="the warm-up tasks")
            # PENDING for a while (delayed): B's view of it shows when B holds the pause.
            delayed = expect(prod_b.post(f"/v1/queues/{queue}/tasks",
                                         json=upper_spec(9, delay_ms=4_000)), 201)["id"]
            # Nothing holds it yet (B's cache of live workers may take a moment to see both).
            wait_until(lambda: _state(prod_b, delayed)["waiting"] is None, timeout=5,
                       interval=0.05, what="replica B to see a live worker for the task")

            asked = time.monotonic()
            expect(prod_a.post(f"/v1/queues/{queue}/pause", json={"reason": "replicas"}), 200)
            wait_until(lambda: (_state(prod_b, delayed)["waiting"] or {}).get("reason")
                       == "PAUSED", timeout=3 * HEARTBEAT_S, interval=0.02,
                       what="replica B to hold the pause")
            took_s = time.monotonic() - asked
            assert took_s <= HEARTBEAT_S * UNIT, took_s

            # Nothing starts on either replica, whichever one the task is submitted to.
            paused = [expect(p.post(f"/v1/queues/{queue}/tasks", json=upper_spec(10 + i)),
                             201)["id"] for i, p in enumerate((prod_a, prod_b, prod_a, prod_b))]
            end = time.monotonic() + HOLD_S * UNIT
            while True:  # bounded by the hold
                views = [_state(prod_a, t) for t in [*paused, delayed]]
                assert all(v["state"] == "PENDING" for v in views), views
                if time.monotonic() >= end:
                    break
                time.sleep(0.1)
            wait_until(lambda: _state(prod_a, delayed)["next_attempt_at_ms"] is None
                       or _state(prod_a, delayed)["next_attempt_at_ms"]
                       <= time.time_ns() // 1_000_000, timeout=10, what="the delay to pass")
            assert _state(prod_a, delayed)["state"] == "PENDING"

            expect(prod_a.post(f"/v1/queues/{queue}/resume", json={"reason": "done"}), 200)
            for task_id in [*paused, delayed]:
                wait_until(lambda t=task_id: _state(prod_b, t)["state"] == "SUCCEEDED",
                           timeout=10 * HEARTBEAT_S, interval=0.05,
                           what=lambda t=task_id: f"task {t} after the resume: "
                                                  f"{_state(prod_b, t)}")
    finally:
        for sup in sups:
            sup.stop()
