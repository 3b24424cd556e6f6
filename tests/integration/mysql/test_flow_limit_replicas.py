"""Flow-control limits across two orbit-server replicas on one MariaDB database, each with a
real supervisor, one replica SIGKILLed mid-run: straight from the database, never more than
N attempts of a key open at one instant (their started and ended times), and never more
than the rate's count of starts of a key in any window."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mysql_support import Supervisor, query, worker_credentials
from support.orbit_http import expect, http_client, new_queue
from support.server import ServerProcess, replica_pair
from support.waiting import wait_until

pytestmark = [pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True),
              pytest.mark.timeout(300)]

MAX_RUNNING = 3
RATE = (4, 1000)


def _spec(i: int, key: str, seconds: float) -> dict[str, Any]:
    return {"handler": "sup.sleep", "handler_version": "v1", "payload_version": "v1",
            "payload": {"seconds": seconds, "i": i}, "idempotency": "IDEMPOTENT",
            "max_attempts": 5, "lease_ttl_ms": 2000, "limits": [key]}


def _attempts_of_key(db_url: str, key: str) -> list[tuple[int, int | None, int]]:
    rows = query(db_url, "SELECT a.started_at_ms, a.finished_at_ms, a.reserved_at_ms "
                         "FROM attempts a JOIN tasks t ON t.id = a.task_id "
                         "WHERE t.limit_keys = %s", f'["{key}"]')
    return [(r[0], r[1], r[2]) for r in rows]


def _most_at_once(intervals: list[tuple[int, int]]) -> int:
    events = sorted([(s, 1) for s, _e in intervals] + [(e, -1) for _s, e in intervals])
    best = now = 0
    for _at, step in events:
        now += step
        best = max(best, now)
    return best


def test_two_replicas_keep_a_key_within_its_limits(
        server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    a, b, admin = replica_pair(server_factory)
    started: list[Supervisor] = []
    try:
        with http_client(a.url, admin.bearer) as admin_http:
            queue_id = new_queue(admin_http)
            expect(admin_http.put(f"/v1/queues/{queue_id}/limits/licence:matlab",
                                  json={"max_running": MAX_RUNNING}), 201)
            expect(admin_http.put(f"/v1/queues/{queue_id}/limits/api:*", json={
                "rate": {"count": RATE[0], "interval_ms": RATE[1]}}), 201)
            for i, url in enumerate((a.url, b.url, b.url)):
                creds = worker_credentials(admin_http, queue_id, url, tmp_path / f"w{i}.json")
                started.append(Supervisor(tmp_path, creds, queue_id, url, workers=4).start())
            keyed = [_spec(i, "licence:matlab", 0.3) for i in range(24)]
            rated = [_spec(i, "api:partner", 0.01) for i in range(12)]
            made = expect(admin_http.post(f"/v1/queues/{queue_id}/tasks/batch",
                                          json={"tasks": keyed + rated}), 201)["tasks"]
            task_ids = [t["id"] for t in made]
        # A replica dies with attempts open: the other's reaper ends them when their leases
        # lapse, and the limit still counts them until then.
        wait_until(lambda: len(_attempts_of_key(a.db_url, "licence:matlab")) >= 6,
                   timeout=60, what="some keyed attempts")
        a.kill()
        with http_client(b.url, admin.bearer) as admin_http:
            def settled() -> bool:
                views = [expect(admin_http.get(f"/v1/tasks/{t}"), 200) for t in task_ids]
                return all(v["state"] in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW") for v in views)
            wait_until(settled, timeout=120, interval=0.5, what="every task settled")
        now = int(time.time() * 1000)
        keyed_runs = [(s, e if e is not None else now)
                      for s, e, _r in _attempts_of_key(b.db_url, "licence:matlab")
                      if s is not None]
        assert len(keyed_runs) >= 24
        assert _most_at_once(keyed_runs) <= MAX_RUNNING, sorted(keyed_runs)
        reserves = sorted(r for _s, _e, r in _attempts_of_key(b.db_url, "api:partner"))
        assert len(reserves) >= 12
        for i, at in enumerate(reserves):
            assert len([r for r in reserves[i:] if r < at + RATE[1]]) <= RATE[0], reserves
    finally:
        for sup in started:
            sup.stop()
