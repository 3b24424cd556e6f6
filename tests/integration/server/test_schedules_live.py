"""Schedules on a real orbit-server (SQLite and MariaDB): the firing loop submits one task
per tick through the HTTP API's view of it, and a server stopped across ticks, then
restarted, fires the missed ticks at most once (missed_ticks=one: one catch-up) and never a
tick twice."""

from __future__ import annotations

import time
from collections.abc import Callable

from support.server import ServerProcess
from support.waiting import wait_until

from orbit_client import OrbitClient, TaskType

EVERY_SECOND = "* * * * * *"  # six fields with with_seconds: seconds first
TICK_TYPE = TaskType("sched.tick", "v1", "v1", idempotent=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _tick_tasks(client: OrbitClient, schedule_id: str) -> dict[int, list[str]]:
    """Every task the schedule's firings name, by tick (read through the API)."""
    view = client.get_schedule(schedule_id)
    out: dict[int, list[str]] = {}
    for firing in view["firings"]:
        if firing["task_id"] is not None:
            out.setdefault(firing["tick_at_ms"], []).append(firing["task_id"])
    return out


def _check_keys(client: OrbitClient, schedule_id: str, ticks: dict[int, list[str]]) -> None:
    for tick, task_ids in ticks.items():
        assert len(task_ids) == 1, (tick, task_ids)
        task = client.get_task(task_ids[0])
        assert task["operation_key"] == f"schedule:{schedule_id}:{tick}"
        [event] = [e for e in client.audit(task_ids[0])["events"]
                   if e["kind"] == "task_submitted"]
        assert event["actor"] == f"schedule:{schedule_id}"
        assert event["detail"] == {"schedule_id": schedule_id, "tick_at_ms": tick}


def test_restart_across_ticks_fires_one_catch_up(
        server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory()
    admin = server.admin()
    with OrbitClient(credentials=admin) as client:
        queue = client.create_queue("sched")["id"]
        made = client.create_schedule(queue, {"cron": EVERY_SECOND, "with_seconds": True,
                                              "missed_ticks": "one",
                                              "task": TICK_TYPE.spec({"n": 1})})
        sid = made["id"]
        wait_until(lambda: client.get_schedule(sid)["fired"] >= 2, timeout=20,
                   what="two ticks fired")
    server.stop()
    stopped_ms = _now_ms()
    # Let at least two ticks pass while no server runs.
    wait_until(lambda: _now_ms() >= stopped_ms + 2_500, timeout=10, what="ticks pass")
    restarted_ms = _now_ms()
    server.start()
    with OrbitClient(credentials=admin) as client:
        wait_until(lambda: any(f["fired_at_ms"] >= restarted_ms
                               for f in client.get_schedule(sid)["firings"]),
                   timeout=20, what="a tick fired after the restart")
        client.pause_schedule(sid)
        view = client.get_schedule(sid)
        _check_keys(client, sid, _tick_tasks(client, sid))
    firings = sorted(view["firings"], key=lambda f: f["tick_at_ms"])
    ticks = [f["tick_at_ms"] for f in firings]
    assert len(ticks) == len(set(ticks))  # no tick twice
    before = [f for f in firings if f["fired_at_ms"] < stopped_ms]
    after = [f for f in firings if f["fired_at_ms"] >= restarted_ms]
    assert before and after, firings
    catch_up = after[0]
    # One catch-up for the latest missed tick, marked missed; the ticks passed while the
    # server was down before it never fire.
    assert catch_up["missed"] is True and catch_up["task_id"] is not None, catch_up
    assert catch_up["tick_at_ms"] >= before[-1]["tick_at_ms"] + 2_000
    assert not [t for t in ticks if before[-1]["tick_at_ms"] < t < catch_up["tick_at_ms"]]
