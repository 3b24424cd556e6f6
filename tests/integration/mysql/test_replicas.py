"""Two servers on one MariaDB database, three supervisors spread over them, 2,000 tasks, and
one server SIGKILLed mid-run.

Supervisors 1 and 3 reach server A through a TCP proxy (a stand-in for a load balancer);
when A is killed the proxy is re-pointed at server B on the same address, so their
reconnects land on B. Supervisor 2 talks to B directly. Afterwards, straight from the
database: every task ended exactly once (SUCCEEDED, or NEEDS_REVIEW for a non-idempotent
task whose attempt was lost); no two attempts of a task ever held a valid lease at the same
time; and every task's audit trail is complete.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
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
              pytest.mark.timeout(400)]

TASKS = 2_000
LEASE_TTL_MS = 3_000


def _spec(i: int) -> dict[str, Any]:
    return {"handler": "sup.sleep", "handler_version": "v1", "payload_version": "v1",
            "payload": {"seconds": 0.02, "i": i},
            "idempotency": "IDEMPOTENT" if i % 2 == 0 else "NON_IDEMPOTENT",
            "max_attempts": 5, "lease_ttl_ms": LEASE_TTL_MS}


def _done_count(db_url: str) -> int:
    rows = query(db_url, "SELECT COUNT(*) FROM tasks WHERE state IN "
                         "('SUCCEEDED','FAILED','NEEDS_REVIEW','CANCELLED')")
    return int(rows[0][0])


def test_two_replicas_one_killed_every_task_ends_once(
        server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    a, b, admin = replica_pair(server_factory)
    lb = TcpProxy(a.port).start()  # the "load balancer" address of supervisors 1 and 3
    lb_port = lb.port
    lb_url = f"http://127.0.0.1:{lb_port}"
    proxies = [lb]
    sups: list[Supervisor] = []
    try:
        with http_client(a.url, admin.bearer) as admin_http:
            queue_id = new_queue(admin_http)
            made = new_credential(admin_http, "producer", [queue_id])
            creds = [worker_credentials(admin_http, queue_id, url, tmp_path / f"w{i}.json")
                     for i, url in enumerate((lb_url, b.url, lb_url))]
        with http_client(a.url, bearer_of(made)) as producer:
            for start in range(0, TASKS, 1_000):
                body = {"tasks": [_spec(i) for i in range(start, start + 1_000)]}
                expect(producer.post(f"/v1/queues/{queue_id}/tasks/batch", json=body), 201)
        for cred, url in zip(creds, (lb_url, b.url, lb_url), strict=True):
            sups.append(Supervisor(tmp_path, cred, queue_id, url, workers=2).start())

        wait_until(lambda: _done_count(a.db_url) >= TASKS // 4, timeout=120, interval=0.1,
                   what="a quarter done")
        killed_ms = time.time_ns() // 1_000_000
        a.kill()  # SIGKILL mid-run; its workers' connections drop
        lb.stop()
        proxies.append(TcpProxy(b.port, port=lb_port).start())  # re-point the balancer
        killed_at_done = _done_count(b.db_url)
        assert killed_at_done < TASKS, "the kill came after the run; nothing was tested"
        wait_until(lambda: _done_count(b.db_url) == TASKS, timeout=240, interval=0.5,
                   what="every task ends")
    finally:
        for sup in sups:
            sup.stop()
        for proxy in proxies:
            proxy.stop()

    db = b.db_url
    states = dict(query(db, "SELECT state, COUNT(*) FROM tasks GROUP BY state"))
    assert set(states) <= {"SUCCEEDED", "NEEDS_REVIEW"}, states
    assert sum(states.values()) == TASKS
    review = query(db, "SELECT COUNT(*) FROM tasks WHERE state = 'NEEDS_REVIEW' "
                       "AND idempotency = 'IDEMPOTENT'")
    assert review[0][0] == 0, "an idempotent task went to review instead of a retry"

    # Every task ended once: exactly one audited transition into its final state.
    ends = query(db, "SELECT task_id, COUNT(*) FROM audit WHERE from_state <> to_state AND "
                     "to_state IN ('SUCCEEDED','FAILED','NEEDS_REVIEW','CANCELLED') "
                     "GROUP BY task_id")
    assert len(ends) == TASKS and all(n == 1 for _, n in ends)
    # At most one accepted successful attempt per task.
    wins = query(db, "SELECT task_id, COUNT(*) FROM attempts WHERE outcome = 'SUCCEEDED' "
                     "GROUP BY task_id HAVING COUNT(*) > 1")
    assert wins == []

    # No two attempts of a task ever held a valid lease at once.
    held: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task_id, started, finished, expires in query(
            db, "SELECT task_id, started_at_ms, finished_at_ms, lease_expires_at_ms "
                "FROM attempts WHERE started_at_ms IS NOT NULL"):
        end = min(x for x in (finished, expires) if x is not None)
        held[task_id].append((started, end))
    overlaps = []
    for task_id, spans in held.items():
        spans.sort()
        for (s1, e1), (s2, _e2) in itertools.pairwise(spans):
            if s2 < e1:
                overlaps.append((task_id, s1, e1, s2))
    assert overlaps == []

    # The audit trail is complete: every submit, reservation, start and end is in it.
    submitted = query(db, "SELECT COUNT(DISTINCT task_id) FROM audit "
                          "WHERE kind = 'task_submitted'")
    assert submitted[0][0] == TASKS
    missing = query(db, """
        SELECT a.id, a.state,
               SUM(au.kind = 'attempt_reserved'), SUM(au.kind = 'attempt_started'),
               SUM(au.kind IN ('attempt_finished', 'attempt_released'))
        FROM attempts a LEFT JOIN audit au ON au.attempt_id = a.id
        GROUP BY a.id, a.state
        HAVING SUM(au.kind = 'attempt_reserved') <> 1
            OR (a.state IN ('RUNNING', 'FINISHED') AND SUM(au.kind = 'attempt_started') <> 1)
            OR (a.state IN ('FINISHED', 'RELEASED')
                AND SUM(au.kind IN ('attempt_finished', 'attempt_released')) <> 1)""")
    assert missing == []
    open_attempts = query(db, "SELECT COUNT(*) FROM attempts WHERE state IN "
                              "('RESERVED', 'RUNNING')")
    assert open_attempts[0][0] == 0
    assert " ERROR orbit" not in b.log_tail(1_000_000)
    # All three supervisors worked after the kill: A's two reconnected to B via the balancer.
    after = query(db, "SELECT COUNT(DISTINCT instance_id) FROM attempts "
                      "WHERE started_at_ms > %s", killed_ms + 100)
    assert after[0][0] == 3
    # The kill really interrupted work: some attempts were lost or resumed on B.
    retried = query(db, "SELECT COUNT(*) FROM attempts WHERE attempt_number > 1 "
                        "OR code = 'LEASE_EXPIRED' OR code = 'LEASE_LOST'")
    print(f"states={states} done_at_kill={killed_at_done} lost_or_retried={retried[0][0]} "
          f"at={time.strftime('%H:%M:%S')}")
