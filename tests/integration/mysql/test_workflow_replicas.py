"""A chord of 100 members on two orbit-server replicas sharing one MariaDB database, one
replica SIGKILLed mid-run: members end on both replicas at once, each ending decrements
the callback's count of parents left under its row lock, and the callback is released
exactly once. Afterwards, from the database: every node ended once, the callback ran once
and received the 100 results in declared order, every edge was counted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mysql_support import Supervisor, query, worker_credentials
from support.orbit_http import bearer_of, expect, http_client, new_credential, new_queue
from support.proxy import TcpProxy
from support.server import ServerProcess, replica_pair
from support.waiting import wait_until

pytestmark = [pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True),
              pytest.mark.timeout(300)]

MEMBERS = 100


def _node(key: str, log: Path, parents: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "parents": parents or [], "task": {
        "handler": "sup.collect", "handler_version": "v1", "payload_version": "v1",
        "payload": {"name": key, "path": str(log), "seconds": 0.05},
        "idempotency": "IDEMPOTENT", "max_attempts": 5, "lease_ttl_ms": 3_000}}


def _ended(db_url: str) -> int:
    return int(query(db_url, "SELECT COUNT(*) FROM tasks WHERE workflow_id IS NOT NULL AND "
                             "state IN ('SUCCEEDED','FAILED','CANCELLED')")[0][0])


def test_a_chord_on_two_replicas_one_killed_releases_its_callback_once(
        server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    a, b, admin = replica_pair(server_factory)
    lb = TcpProxy(a.port).start()  # supervisor 1 reaches A through it, then B
    lb_url = f"http://127.0.0.1:{lb.port}"
    proxies = [lb]
    sups: list[Supervisor] = []
    log = tmp_path / "runs.log"
    try:
        with http_client(a.url, admin.bearer) as admin_http:
            queue_id = new_queue(admin_http)
            made = new_credential(admin_http, "producer", [queue_id])
            creds = [worker_credentials(admin_http, queue_id, url, tmp_path / f"w{i}.json")
                     for i, url in enumerate((lb_url, b.url))]
        keys = [f"m{i}" for i in range(MEMBERS)]
        bearer = bearer_of(made)
        with http_client(a.url, bearer) as producer:
            workflow = expect(producer.post(f"/v1/queues/{queue_id}/workflows", json={
                "nodes": [*(_node(k, log) for k in keys), _node("join", log, keys)]}), 201)
        for cred, url in zip(creds, (lb_url, b.url), strict=True):
            sups.append(Supervisor(tmp_path, cred, queue_id, url, workers=3).start())
        wait_until(lambda: _ended(a.db_url) >= MEMBERS // 4, timeout=60, interval=0.05,
                   what="a quarter of the members ended")
        a.kill()  # SIGKILL mid-run
        lb.stop()
        proxies.append(TcpProxy(b.port, port=lb.port).start())
        assert _ended(b.db_url) < MEMBERS, "the kill came after the members; nothing tested"
        with http_client(b.url, bearer) as producer:
            def done() -> bool:
                view = expect(producer.get(f"/v1/workflows/{workflow['workflow_id']}",
                                           params={"wait_ms": 2000}), 200)
                return view["state"] not in ("RUNNING", "BLOCKED")

            wait_until(done, timeout=180, interval=0.2, what="the workflow ends")
            view = expect(producer.get(f"/v1/workflows/{workflow['workflow_id']}"), 200)
            assert view["state"] == "SUCCEEDED", view["counts"]
            join_id = next(n["task_id"] for n in view["nodes"] if n["key"] == "join")
            join = expect(producer.get(f"/v1/tasks/{join_id}"), 200)
    finally:
        for sup in sups:
            sup.stop()
        for proxy in proxies:
            proxy.stop()

    db = b.db_url
    assert [p["key"] for p in join["result"]["parents"]] == keys
    assert [p["result"]["name"] for p in join["result"]["parents"]] == keys
    runs = [line.split()[0] for line in log.read_text().splitlines()]
    assert runs.count("join") == 1, "the callback ran more than once"
    assert set(runs) == {*keys, "join"}
    # Every node ended once, and the callback was released once.
    ends = query(db, "SELECT task_id, COUNT(*) FROM audit WHERE from_state <> to_state AND "
                     "to_state IN ('SUCCEEDED','FAILED','CANCELLED') GROUP BY task_id")
    assert len(ends) == MEMBERS + 1 and all(n == 1 for _, n in ends)
    released = query(db, "SELECT COUNT(*) FROM audit WHERE kind = 'task_released'")
    assert released[0][0] == 1
    assert query(db, "SELECT parents_left FROM tasks WHERE id = %s", join_id) == [(0,)]
    assert query(db, "SELECT COUNT(*) FROM workflow_edges WHERE done = 0") == [(0,)]
