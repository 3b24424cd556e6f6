"""Fair dispatch across two orbit-server replicas on one MariaDB database, each with real
supervisors: no task is reserved twice (one attempt each, every task SUCCEEDED), and the
small tenant's tasks still start early, ranked by the attempts' started times in the
database (each replica takes turns on its own)."""

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

BIG, SMALL = 400, 10


def _spec(i: int, key: str) -> dict[str, Any]:
    return {"handler": "sup.sleep", "handler_version": "v1", "payload_version": "v1",
            "payload": {"seconds": 0.01, "i": i}, "max_attempts": 1, "limits": [key]}


def test_two_fair_replicas_reserve_each_task_once(
        server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    a, b, admin = replica_pair(server_factory)
    started: list[Supervisor] = []
    try:
        with http_client(a.url, admin.bearer) as admin_http:
            queue_id = new_queue(admin_http)
            expect(admin_http.put(f"/v1/queues/{queue_id}/fair", json={"key": "customer"}),
                   200)
        # Replica B learns of it from the table's refresh (FAIR_MAX_AGE_MS): wait it out.
        with http_client(b.url, admin.bearer) as admin_b:
            assert expect(admin_b.get(f"/v1/queues/{queue_id}/fair"), 200)["key"] == "customer"
            big = [_spec(i, "customer:a") for i in range(BIG)]
            small = [_spec(i, "customer:b") for i in range(SMALL)]
            time.sleep(1.2)
            for batch in (big, small):
                expect(admin_b.post(f"/v1/queues/{queue_id}/tasks/batch",
                                    json={"tasks": batch}), 201)
            for i, url in enumerate((a.url, b.url, a.url)):
                creds = worker_credentials(admin_b, queue_id, url, tmp_path / f"w{i}.json")
                started.append(Supervisor(tmp_path, creds, queue_id, url, workers=3).start())

            def settled() -> bool:
                counts = expect(admin_b.get(f"/v1/queues/{queue_id}/stats"), 200)["counts"]
                return bool(counts.get("SUCCEEDED", 0) + counts.get("FAILED", 0)
                            >= BIG + SMALL)
            wait_until(settled, timeout=180, interval=0.5, what="every task settled")
            counts = expect(admin_b.get(f"/v1/queues/{queue_id}/stats"), 200)["counts"]
        assert counts.get("SUCCEEDED") == BIG + SMALL, counts
        twice = query(a.db_url, "SELECT task_id, COUNT(*) FROM attempts WHERE queue_id = %s "
                                "GROUP BY task_id HAVING COUNT(*) > 1", queue_id)
        assert twice == [], twice
        values = query(a.db_url, "SELECT limit_keys, COUNT(*) FROM tasks WHERE queue_id = %s "
                                 "GROUP BY limit_keys ORDER BY limit_keys", queue_id)
        assert [(v, int(n)) for v, n in values] == [('["customer:a"]', BIG),
                                                    ('["customer:b"]', SMALL)]
        # Each value numbered its tasks at submit, a turn each (a grant given back would be
        # numbered again when claimed: never fewer).
        turns = dict(query(a.db_url, "SELECT fair_value, last_turn FROM fair_turns "
                                     "WHERE queue_id = %s", queue_id))
        assert int(turns["customer:a"]) >= BIG and int(turns["customer:b"]) >= SMALL, turns
        starts = query(a.db_url, "SELECT t.limit_keys, a.started_at_ms FROM attempts a "
                                 "JOIN tasks t ON t.id = a.task_id WHERE a.queue_id = %s",
                       queue_id)
        last_small = max(int(s) for v, s in starts if v == '["customer:b"]')
        rank = sum(1 for _v, s in starts if int(s) <= last_small)
        # Two replicas each take turns; a claim of up to 9 slots per replica: well within.
        assert rank <= 60, rank
    finally:
        for sup in started:
            sup.stop()
