"""Periodic schedules on a real store (SQLite and MariaDB) with a hand-moved clock: a tick
fires one task keyed by (schedule, tick), audited and linked; never twice (a second pass,
a second replica racing, a clock stepped back); the missed-tick policies; pause, resume,
delete; time zones; typed refusals."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from store_support import World

from orbit_server.store.tables import schedule_firings, schedules, tasks
from orbit_wire.errors import OrbitError

MIN = 60_000


def _task(**extra: Any) -> dict[str, Any]:
    return {"handler": "text.normalize", "handler_version": "v1", "payload_version": "v1",
            "payload": {"text": "tick"}, **extra}


def _create(world: World, **body: Any) -> dict[str, Any]:
    return world.service.schedules.create(world.producer, world.queue_id,
                                          {"cron": "* * * * *", "task": _task(), **body})


def _tasks(world: World) -> list[dict[str, Any]]:
    with world.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(tasks).order_by(tasks.c.created_at_ms, tasks.c.id)).mappings()]


def _firings(world: World, schedule_id: str) -> list[dict[str, Any]]:
    view = world.service.schedules.get(world.producer, schedule_id)
    out: list[dict[str, Any]] = view["firings"]
    return out


def test_a_tick_fires_one_audited_linked_task(world: World) -> None:
    t0 = world.clock()
    made = _create(world, task=_task(priority=8))
    tick = (t0 // MIN + 1) * MIN
    assert made["next_fire_at_ms"] == tick and made["state"] == "ACTIVE"
    effects, next_ms = world.service.schedules.fire_due()
    assert _tasks(world) == [] and next_ms == tick and not effects.ready_queues
    world.clock.now = tick + 150
    effects, next_ms = world.service.schedules.fire_due()
    assert effects.ready_queues == {world.queue_id} and next_ms == tick + MIN
    [row] = _tasks(world)
    assert row["operation_key"] == f"schedule:{made['id']}:{tick}"
    task = world.task(row["id"])
    assert task["priority"] == 8 and task["state"] == "PENDING"
    [event] = world.audit(row["id"])
    assert event["actor"] == f"schedule:{made['id']}" and event["kind"] == "task_submitted"
    assert event["detail"] == {"schedule_id": made["id"], "tick_at_ms": tick}
    view = world.service.schedules.get(world.producer, made["id"])
    assert view["fired"] == 1 and view["last_task_id"] == row["id"]
    assert view["last_tick_at_ms"] == tick and view["next_fire_at_ms"] == tick + MIN
    assert view["firings"] == [{"tick_at_ms": tick, "task_id": row["id"],
                                "fired_at_ms": tick + 150, "missed": False}]
    # A second pass at the same instant fires nothing more.
    world.service.schedules.fire_due()
    assert len(_tasks(world)) == 1


def test_two_replicas_racing_fire_a_tick_once(world: World) -> None:
    made = _create(world)
    world.clock.now = made["next_fire_at_ms"] + 10
    with world.other_service(1) as a, world.other_service(2) as b:
        errors = world.race(a.schedules.fire_due, b.schedules.fire_due,
                            world.service.schedules.fire_due)
    assert errors == []
    assert len(_tasks(world)) == 1
    assert len(_firings(world, made["id"])) == 1


def test_a_clock_stepped_back_never_fires_a_tick_again(world: World) -> None:
    made = _create(world)
    tick = made["next_fire_at_ms"]
    world.clock.now = tick + 5
    world.service.schedules.fire_due()
    world.clock.now = tick - 10 * MIN  # a replica whose clock is ten minutes behind
    world.service.schedules.fire_due()
    world.clock.now = tick + 30  # and back to the same tick
    world.service.schedules.fire_due()
    assert len(_tasks(world)) == 1
    world.clock.now = tick + MIN + 5  # the next tick fires as usual
    world.service.schedules.fire_due()
    assert [r["operation_key"].rsplit(":", 1)[1] for r in _tasks(world)] == [
        str(tick), str(tick + MIN)]


def test_missed_ticks_skip_passes_over_them(world: World) -> None:
    made = _create(world, cron="0 * * * *")  # hourly
    tick = made["next_fire_at_ms"]
    world.clock.now = tick + 3 * 60 * MIN + 2 * MIN  # three hours down, the latest tick late
    world.service.schedules.fire_due()
    assert _tasks(world) == []
    view = world.service.schedules.get(world.producer, made["id"])
    assert view["next_fire_at_ms"] > world.clock()
    assert view["fired"] == 0
    [passed] = view["firings"]
    assert passed["task_id"] is None and passed["missed"] is True


def test_missed_ticks_one_fires_the_latest_once(world: World) -> None:
    made = _create(world, missed_ticks="one")
    tick = made["next_fire_at_ms"]
    world.clock.now = tick + 10 * MIN + 2 * MIN  # well past the on-time grace
    world.service.schedules.fire_due()
    world.service.schedules.fire_due()
    [row] = _tasks(world)
    latest = tick + 12 * MIN
    assert row["operation_key"] == f"schedule:{made['id']}:{latest}"
    [firing] = _firings(world, made["id"])
    assert firing["missed"] is True and firing["task_id"] == row["id"]


def test_pause_resume_and_delete(world: World) -> None:
    made = _create(world)
    sid = made["id"]
    assert world.service.schedules.pause(world.producer, sid)["state"] == "PAUSED"
    world.clock.now = made["next_fire_at_ms"] + 3 * MIN + 1
    world.service.schedules.fire_due()
    assert _tasks(world) == []
    resumed = world.service.schedules.resume(world.producer, sid)
    assert resumed["state"] == "ACTIVE" and resumed["next_fire_at_ms"] > world.clock()
    world.service.schedules.fire_due()
    assert _tasks(world) == []  # ticks during the pause never fire
    world.clock.now = resumed["next_fire_at_ms"]
    world.service.schedules.fire_due()
    assert len(_tasks(world)) == 1
    listed = world.service.schedules.list_schedules(world.producer, world.queue_id)
    assert [s["id"] for s in listed["schedules"]] == [sid]
    assert world.service.schedules.delete(world.producer, sid) == {"schedule_id": sid,
                                                                   "deleted": True}
    with pytest.raises(OrbitError) as info:
        world.service.schedules.get(world.producer, sid)
    assert info.value.code.value == "NOT_FOUND"
    assert world.count(schedule_firings) == 0
    assert len(_tasks(world)) == 1  # the tasks it made stay


def test_time_zone_ticks(world: World) -> None:
    world.clock.now = int(datetime(2026, 7, 1, 12, 0, tzinfo=UTC).timestamp() * 1000)
    made = _create(world, cron="0 9 * * *", timezone="Europe/Paris")
    # 09:00 in Paris in July is 07:00 UTC, the next day.
    assert made["next_fire_at_ms"] == int(
        datetime(2026, 7, 2, 7, 0, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize("body", [
    {"cron": "not cron"}, {"cron": "* * * * *", "timezone": "Mars/Olympus"},
    {"cron": "0 0 31 2 *"}, {"cron": "* * * * *", "task": {"handler": "x"}},
])
def test_bad_schedules_are_refused(world: World, body: dict[str, Any]) -> None:
    with pytest.raises(OrbitError) as info:
        world.service.schedules.create(world.producer, world.queue_id, {"task": _task(), **body})
    assert info.value.code.value == "BAD_REQUEST"


def test_other_queues_schedules_are_out_of_reach(world: World) -> None:
    made = _create(world)
    other_queue = world.service.admin.create_queue(world.admin, "other")["id"]
    cred = world.service.admin.create_credential(world.admin, "producer", [other_queue], "o")
    stranger = world.service.admin.authenticate(f"{cred['credential_id']}.{cred['secret']}")
    for call, arg in ((world.service.schedules.get, made["id"]),
                      (world.service.schedules.list_schedules, world.queue_id),
                      (world.service.schedules.pause, made["id"])):
        with pytest.raises(OrbitError) as info:
            call(stranger, arg)
        assert info.value.code.value == "NOT_FOUND"  # not yours answers as missing


def test_an_unreadable_stored_schedule_does_not_stop_the_others(world: World) -> None:
    broken = _create(world)
    good = _create(world)
    with world.engine.begin() as conn:  # e.g. a zone this server's tzdata does not know
        conn.execute(schedules.update().where(schedules.c.id == broken["id"])
                     .values(timezone="Gone/Zone"))
    world.clock.now = good["next_fire_at_ms"] + 1
    effects, _ = world.service.schedules.fire_due()
    assert effects.ready_queues == {world.queue_id}
    assert [r["operation_key"] for r in _tasks(world)] == [
        f"schedule:{good['id']}:{good['next_fire_at_ms']}"]


def test_a_stored_task_with_nulls_still_fires(world: World) -> None:
    # Stored before null was refused in a request, when it meant the default.
    made = _create(world)
    stored = {**_task(), "max_attempts": None, "backoff": None, "priority": None}
    with world.engine.begin() as conn:
        conn.execute(schedules.update().where(schedules.c.id == made["id"])
                     .values(task=orjson.dumps(stored).decode()))
    with pytest.raises(OrbitError):  # a new request may not say null
        _create(world, task=stored)
    world.clock.now = made["next_fire_at_ms"] + 1
    world.service.schedules.fire_due()
    [row] = _tasks(world)
    task = world.task(row["id"])
    assert task["priority"] == 5 and task["policy"]["max_attempts"] == 3


def test_seconds_are_refused_unless_asked_for_then_read_first(world: World) -> None:
    with pytest.raises(OrbitError) as info:
        _create(world, cron="*/10 * * * * *")
    assert info.value.code.value == "BAD_REQUEST" and "with_seconds" in info.value.message
    with pytest.raises(OrbitError) as info:
        _create(world, cron="*/10 * * * *", with_seconds=True)
    assert info.value.code.value == "BAD_REQUEST"
    assert _tasks(world) == [] and world.service.schedules.list_schedules(
        world.producer, world.queue_id)["schedules"] == []

    t0 = world.clock()
    made = _create(world, cron="*/10 * * * * *", with_seconds=True)
    first = (t0 // 10_000 + 1) * 10_000
    assert made["with_seconds"] is True and made["next_fire_at_ms"] == first
    assert [f["at_ms"] for f in made["next_fires"]] == [first + i * 10_000 for i in range(5)]
    for n in range(3):  # one task per ten seconds, not one per minute
        world.clock.now = first + n * 10_000 + 50
        world.service.schedules.fire_due()
    ticks = sorted(f["tick_at_ms"] for f in _firings(world, made["id"]))
    assert ticks == [first, first + 10_000, first + 20_000] and len(_tasks(world)) == 3


def test_next_fires_follow_the_zone_and_a_paused_schedule_shows_them_from_now(
        world: World) -> None:
    world.clock.now = int(datetime(2026, 3, 27, 12, 0, tzinfo=UTC).timestamp() * 1000)
    made = _create(world, cron="0 9 * * *", timezone="Europe/Paris", paused=True)
    assert [f["local"] for f in made["next_fires"]] == [
        "2026-03-28T09:00:00+01:00", "2026-03-29T09:00:00+02:00", "2026-03-30T09:00:00+02:00",
        "2026-03-31T09:00:00+02:00", "2026-04-01T09:00:00+02:00"]
    listed = world.service.schedules.list_schedules(world.producer, world.queue_id)
    assert listed["schedules"][0]["next_fires"] == made["next_fires"]
