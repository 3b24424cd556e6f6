"""Two orbit-server replicas on one MariaDB database fire one schedule every second: each
tick gives at most one task, every task is the one its firing names (keyed by schedule and
tick, audited with the tick), and the ticks both replicas raced for are all accounted for."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from mysql_support import query
from support.server import ServerProcess, replica_pair
from support.waiting import wait_until

from orbit_client import OrbitClient, TaskType

pytestmark = [pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True),
              pytest.mark.timeout(300)]

TICK_TYPE = TaskType("sched.tick", "v1", "v1", idempotent=True)


def test_two_replicas_fire_each_tick_once(
        server_factory: Callable[..., ServerProcess]) -> None:
    a, b, admin = replica_pair(server_factory)
    with OrbitClient(credentials=admin) as on_a, OrbitClient(b.url, admin) as on_b:
        queue = on_a.create_queue("sched")["id"]
        sid = on_a.create_schedule(queue, {"cron": "* * * * * *", "with_seconds": True,
                                           "task": TICK_TYPE.spec({"n": 1})})["id"]
        started_ms = time.time_ns() // 1_000_000
        # Both replicas' loops wake at each tick and race for it.
        wait_until(lambda: on_b.get_schedule(sid)["fired"] >= 8, timeout=60,
                   what="eight ticks fired")
        on_b.pause_schedule(sid)
        fired = on_a.get_schedule(sid)["fired"]
    firings = query(a.db_url, "SELECT tick_at_ms, task_id, missed FROM schedule_firings "
                              "WHERE schedule_id = %s ORDER BY tick_at_ms", sid)
    tasks = query(a.db_url, "SELECT id, operation_key FROM tasks WHERE queue_id = %s", queue)
    audit = query(a.db_url, "SELECT task_id, actor FROM audit WHERE kind = 'task_submitted' "
                            "AND task_id IN (SELECT id FROM tasks WHERE queue_id = %s)", queue)
    with_task = [(tick, task_id) for tick, task_id, _ in firings if task_id is not None]
    assert len(with_task) == fired == len(tasks) >= 8
    by_id = dict(tasks)
    for tick, task_id in with_task:
        assert by_id[task_id] == f"schedule:{sid}:{tick}"
        assert tick >= started_ms - 1_000
    assert sorted(t for t, _ in audit) == sorted(by_id)  # one submit audit row per task
    assert {actor for _, actor in audit} == {f"schedule:{sid}"}
    ticks = [tick for tick, _, _ in firings]
    assert ticks == sorted(set(ticks))
    assert all(tick % 1000 == 0 for tick in ticks)  # whole seconds: cron ticks, not clocks
