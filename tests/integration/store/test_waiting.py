"""A task nobody live serves never waits in silence (SQLite and MariaDB, hand-moved clock):
the waiting fact in every task view, queue stats per capability, the server's unserved list,
and the policy's schedule_to_start_ms ending an unstarted task FAILED/NOT_STARTED_IN_TIME."""

from __future__ import annotations

import orjson
from store_support import CAP, World, as_json

from orbit_server.domain.listing import parse_filter
from orbit_server.store.tables import tasks
from orbit_wire.model import Capability, Outcome

TYPO = Capability(CAP.handler, "v9", CAP.payload_version)


def typo_spec(**extra: object) -> dict[str, object]:
    return {"handler": TYPO.handler, "handler_version": TYPO.handler_version,
            "payload_version": TYPO.payload_version, "payload": 1, **extra}


def listed(world: World, task_id: str) -> dict:
    page = as_json(world.service.listing.list_tasks(world.producer, world.queue_id,
                                                    parse_filter({})))
    return next(t for t in page["tasks"] if t["id"] == task_id)


def test_waiting_fact_follows_the_live_workers(world: World) -> None:
    made = world.submit()
    expected = {"reason": "NO_LIVE_WORKER", "capability": CAP.to_dict(),
                "since": made["created_at_ms"]}
    assert made["waiting"] == expected
    assert world.task(made["id"])["waiting"] == expected
    assert listed(world, made["id"])["waiting"] == expected
    world.clock.advance(50)
    b = world.hello()  # a live worker now offers the capability
    assert world.task(made["id"])["waiting"] is None
    assert listed(world, made["id"])["waiting"] is None
    world.clock.advance(50)
    world.service.workers.release_reservations(b.instance_id, b.connected_at_ms)
    gone_at = world.clock.now
    world.clock.advance(50)
    assert world.task(made["id"])["waiting"]["since"] == gone_at  # since it was last served
    # A different version is another capability: the worker never serves it.
    world.hello()
    other, _ = world.service.tasks.submit(world.producer, world.queue_id, [typo_spec()])
    view = other[0][0]
    assert view["waiting"]["capability"] == TYPO.to_dict()
    assert world.task(view["id"])["waiting"]["since"] == view["created_at_ms"]
    world.run_once(world.hello())
    running = world.task(made["id"])
    assert running["state"] == "RUNNING" and running["waiting"] is None


def test_stats_and_unserved_list_by_capability(world: World) -> None:
    world.submit_many(2)
    world.service.tasks.submit(world.producer, world.queue_id, [typo_spec(), typo_spec()])
    world.hello()
    stats = as_json(world.service.tasks.queue_stats(world.producer, world.queue_id))
    by_cap = {tuple(c["capability"].values()): c for c in stats["capabilities"]}
    served = by_cap[(CAP.handler, CAP.handler_version, CAP.payload_version)]
    unserved = by_cap[(TYPO.handler, TYPO.handler_version, TYPO.payload_version)]
    assert (served["pending"], served["live_workers"], served["waiting"]) == (2, 1, None)
    assert (unserved["pending"], unserved["live_workers"]) == (2, 0)
    assert unserved["waiting"]["reason"] == "NO_LIVE_WORKER"
    items = world.service.listing.unserved()
    assert [(i["queue_id"], i["capability"], i["pending"]) for i in items] == [
        (world.queue_id, TYPO.to_dict(), 2)]


def test_schedule_to_start_ends_an_unstarted_task(world: World) -> None:
    late = world.service.tasks.submit(world.producer, world.queue_id, [
        typo_spec(schedule_to_start_ms=1_000)])[0][0][0]
    started = world.submit(schedule_to_start_ms=1_000)
    assert late["policy"]["schedule_to_start_ms"] == 1_000
    b = world.hello()
    attempt_id, epoch = world.run_once(b)  # starts the CAP task in time
    world.clock.advance(999)
    world.service.reaper.reap()
    assert world.task(late["id"])["state"] == "PENDING"
    world.clock.advance(1)
    effects = world.service.reaper.reap()
    assert late["id"] in effects.terminal_tasks
    failed = as_json(world.task(late["id"]))
    assert failed["state"] == "FAILED" and failed["failure"]["code"] == "NOT_STARTED_IN_TIME"
    details = failed["failure"]["details"]
    assert details["schedule_to_start_ms"] == 1_000
    assert details["waiting"]["capability"] == TYPO.to_dict()
    assert "no live worker" in details["reason"]
    assert world.audit(late["id"])[-1]["kind"] == "task_not_started_in_time"
    # The started task is untouched; its start-by instant is cleared from the index.
    assert world.task(started["id"])["state"] == "RUNNING"
    with world.engine.connect() as conn:
        rows = dict(conn.execute(tasks.select().with_only_columns(
            tasks.c.id, tasks.c.start_by_at_ms)).all())
    assert rows[started["id"]] is None and rows[late["id"]] is None
    world.finish(b, attempt_id, epoch, Outcome.SUCCEEDED, result=1)
    assert world.task(started["id"])["state"] == "SUCCEEDED"
    assert orjson.loads(orjson.dumps(failed["failure"]))["code"] == "NOT_STARTED_IN_TIME"
