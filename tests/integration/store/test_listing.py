"""The operator's lists on a real database (SQLite and MariaDB), with a hand-moved clock:
a queue's tasks (each filter, both orders, keyset pages that stay exact while tasks are
inserted, the scan budget), queues with their counts, and live workers as every replica
records them."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from store_support import CAP, World, as_json

from orbit_server.domain.listing import SCAN_BUDGET, parse_filter
from orbit_server.services import Services
from orbit_server.services.binding import Presence
from orbit_server.store import create_engine_for
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.frames import Hello
from orbit_wire.ids import new_id
from orbit_wire.model import Capability, Outcome

OTHER = Capability("image.resize", "v2", "v1")


def page(world: World, queue_id: str | None = None, **params: Any) -> dict[str, Any]:
    query = {k: [str(v)] for k, v in params.items() if v is not None}
    out: dict[str, Any] = as_json(world.service.listing.list_tasks(
        world.producer, queue_id or world.queue_id, parse_filter(query)))
    return out


def assert_as_missing(read: Callable[[str], object], other_queue: str) -> None:
    """``read`` of ``other_queue`` fails NOT_FOUND, as it does for a queue that does not
    exist, with the same message but for the ID."""
    missing = "f" * 32
    errors = []
    for queue_id in (other_queue, missing):
        with pytest.raises(OrbitError) as exc:
            read(queue_id)
        assert exc.value.code is ErrorCode.NOT_FOUND, exc.value
        errors.append(exc.value.message.replace(queue_id, "<id>"))
    assert errors[0] == errors[1]


def every(world: World, **params: Any) -> list[dict[str, Any]]:
    """Follow the cursors to the end (bounded)."""
    tasks: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1_000):
        got = page(world, cursor=cursor, **params)
        tasks.extend(got["tasks"])
        cursor = got["next_cursor"]
        if cursor is None:
            return tasks
    raise AssertionError("the cursors never ended")


def ids(tasks: list[dict[str, Any]]) -> list[str]:
    return [t["id"] for t in tasks]


def finish_next(world: World, binding: Any, outcome: Outcome) -> str:
    attempt_id, epoch = world.run_once(binding)
    world.finish(binding, attempt_id, epoch, outcome, code="E" if outcome is Outcome.FAILED
                 else None, result=1 if outcome is Outcome.SUCCEEDED else None)
    return attempt_id


def test_filters_and_orders(world: World) -> None:
    made = []
    for i in range(6):  # one millisecond apart, so creation order is the clock's
        made.append(world.submit(payload={"i": i})["id"])
        world.clock.advance(1)
    other = world.service.tasks.submit(world.producer, world.queue_id, [{
        "handler": OTHER.handler, "handler_version": OTHER.handler_version,
        "payload_version": OTHER.payload_version, "payload": 1}])[0][0][0]["id"]
    world.clock.advance(10)
    b = world.hello()
    finished_at = world.clock.now
    finish_next(world, b, Outcome.SUCCEEDED)  # made[0]
    world.clock.advance(10)
    finish_next(world, b, Outcome.FAILED)  # made[1]: NON_IDEMPOTENT FAILED -> FAILED
    everything = [*made, other]

    newest = page(world, limit=50)
    assert ids(newest["tasks"]) == everything[::-1] and newest["next_cursor"] is None
    assert ids(page(world, order="oldest")["tasks"]) == everything
    assert all("payload" not in t and "result" not in t for t in newest["tasks"])
    states = {t["id"]: t["state"] for t in newest["tasks"]}
    assert states[made[0]] == "SUCCEEDED" and states[made[1]] == "FAILED"

    assert ids(page(world, state="SUCCEEDED")["tasks"]) == [made[0]]
    assert ids(page(world, state="succeeded,FAILED", order="oldest")["tasks"]) == made[:2]
    pending = page(world, state="PENDING")["tasks"]
    assert ids(pending) == [other, *made[2:][::-1]]
    assert ids(page(world, handler=OTHER.handler)["tasks"]) == [other]
    assert ids(page(world, handler=CAP.handler, handler_version="v1",
                    payload_version="v1", order="oldest")["tasks"]) == made
    assert ids(page(world, handler_version="nope")["tasks"]) == []
    created = {t["id"]: t["created_at_ms"] for t in newest["tasks"]}
    assert ids(page(world, created_after=created[made[2]], created_before=created[made[4]],
                    order="oldest")["tasks"]) == made[2:5]
    assert ids(page(world, finished_after=finished_at, finished_before=finished_at)
               ["tasks"]) == [made[0]]
    assert ids(page(world, finished_after=finished_at + 1)["tasks"]) == [made[1]]
    done = page(world, state="SUCCEEDED")["tasks"][0]
    assert done["finished_at_ms"] == finished_at


def test_pages_are_exact_while_tasks_are_inserted(world: World) -> None:
    before = world.submit_many(23)
    world.clock.advance(1)
    seen: list[str] = []
    cursor = None
    inserted: list[str] = []
    for _ in range(100):
        got = page(world, limit=5, cursor=cursor)
        assert len(got["tasks"]) <= 5
        seen.extend(ids(got["tasks"]))
        inserted += world.submit_many(3)  # newer than every page already cut
        world.clock.advance(1)
        cursor = got["next_cursor"]
        if cursor is None:
            break
    assert seen == before[::-1]  # every task of the start once, newest first, none new

    seen = []
    cursor = None
    for _ in range(100):
        got = page(world, limit=7, order="oldest", cursor=cursor)
        seen.extend(ids(got["tasks"]))
        cursor = got["next_cursor"]
        if cursor is None:
            break
        if len(inserted) < 60:
            inserted += world.submit_many(2)
            world.clock.advance(1)
    assert seen == before + inserted  # oldest first reaches the new ones at the end, once


def test_pages_of_a_state_mix_and_same_millisecond_ties(world: World) -> None:
    made = world.submit_many(40)  # one millisecond: the id breaks every tie
    b = world.hello()
    for _ in range(9):
        finish_next(world, b, Outcome.SUCCEEDED)
    walked = every(world, limit=4, state="PENDING,SUCCEEDED")
    assert ids(walked) == sorted(made, reverse=True)
    assert ids(every(world, limit=3, order="oldest")) == sorted(made)


def test_scanned_filters_bound_each_page(world: World) -> None:
    # Rare matches spread over more rows than one page scans: pages may come back short
    # (even empty) with a cursor, and following the cursors still finds each match once.
    specs: list[object] = []
    for i in range(SCAN_BUDGET + 500):
        rare = i % 700 == 0
        cap = OTHER if rare else CAP
        specs.append({"handler": cap.handler, "handler_version": cap.handler_version,
                      "payload_version": cap.payload_version, "payload": i})
    made: list[str] = []
    for start in range(0, len(specs), 1_000):
        got, _ = world.service.tasks.submit(world.producer, world.queue_id,
                                            specs[start:start + 1_000])
        made += [view["id"] for view, _created in got]
    rare_ids = [made[i] for i in range(len(made)) if i % 700 == 0]
    first = page(world, handler=OTHER.handler, limit=50)
    assert first["next_cursor"] is not None  # the budget ended the scan, not the list
    assert len(first["tasks"]) < len(rare_ids)
    assert ids(every(world, handler=OTHER.handler, limit=50)) == rare_ids[::-1]
    assert ids(every(world, handler=OTHER.handler, limit=1, order="oldest")) == rare_ids


def test_bad_parameters_and_scopes(world: World) -> None:
    for params in ({"state": ["DONE"]}, {"order": ["sideways"]}, {"limit": ["0"]},
                   {"limit": ["501"]}, {"created_after": ["-1"]}, {"cursor": ["nonsense"]},
                   {"colour": ["red"]}, {"handler": ["a", "b"]}):
        with pytest.raises(OrbitError) as exc:
            parse_filter(params)
        assert exc.value.code is ErrorCode.BAD_REQUEST, params
    world.submit_many(3)
    cursor = page(world, limit=1)["next_cursor"]
    with pytest.raises(OrbitError) as exc:
        parse_filter({"cursor": [cursor], "order": ["oldest"]})  # made for newest first
    assert exc.value.code is ErrorCode.BAD_REQUEST
    other = world.service.admin.create_queue(world.admin, "other")
    # Another queue answers exactly as one that does not exist.
    assert_as_missing(lambda queue_id: page(world, queue_id=queue_id), other["id"])
    with pytest.raises(OrbitError) as exc:
        world.service.listing.list_tasks(world.admin, "f" * 32, parse_filter({}))
    assert exc.value.code is ErrorCode.NOT_FOUND


def test_queues_with_counts(world: World) -> None:
    world.submit_many(3)
    b = world.hello()
    finish_next(world, b, Outcome.SUCCEEDED)
    other = world.service.admin.create_queue(world.admin, "other")
    world.service.tasks.submit(world.admin, other["id"], [world.spec()])
    admin_view = as_json(world.service.listing.list_queues(world.admin))["queues"]
    by_id = {q["queue_id"]: q for q in admin_view}
    assert set(by_id) == {world.queue_id, other["id"]}
    mine = by_id[world.queue_id]
    assert mine["name"] == "q" and mine["created_at"] == mine["created_at_ms"]
    assert mine["counts"]["PENDING"] == 2 and mine["counts"]["SUCCEEDED"] == 1
    assert mine["counts"]["NEEDS_REVIEW"] == 0
    assert by_id[other["id"]]["counts"]["PENDING"] == 1
    producer_view = as_json(world.service.listing.list_queues(world.producer))["queues"]
    assert [q["queue_id"] for q in producer_view] == [world.queue_id]


def _replica(world: World, name: str) -> tuple[Services, Any]:
    engine = create_engine_for(world.url)
    return Services(engine, world.service.tx.config, world.clock, random.Random(3),
                    name), engine


def test_live_workers_of_every_replica(world: World) -> None:
    world.submit_many(2)
    ttl = world.service.tx.config.session_ttl_ms
    other, engine = _replica(world, "replica-b")
    try:
        a = world.service.workers.worker_hello(Hello(
            world.worker_cred["credential_id"], world.worker_cred["secret"], new_id(1), "s1",
            world.queue_id, (CAP,), 4, agent="orbit-supervise/9.9"))
        b = other.workers.worker_hello(Hello(
            world.worker_cred["credential_id"], world.worker_cred["secret"], new_id(2), "s2",
            world.queue_id, (CAP, OTHER), 2))
        attempt_id, _epoch = world.run_once(a)
        world.clock.advance(1_500)
        assert world.service.workers.presence(
            [Presence(a.instance_id, a.connected_at_ms, 3, world.clock.now - 200)]) == 1
        for listing in (world.service.listing, other.listing):  # both replicas, same answer
            workers = {w["instance_id"]: w for w in as_json(
                listing.list_workers(world.producer, None))["workers"]}
            assert set(workers) == {a.instance_id, b.instance_id}
            wa, wb = workers[a.instance_id], workers[b.instance_id]
            assert wa["replica"] == "local" and wb["replica"] == "replica-b"
            assert wa["version"] == "orbit-supervise/9.9" and wb["version"] is None
            assert wa["slots"] == 4 and wa["credit"] == 3 and wb["credit"] == 0
            assert wa["last_heartbeat_at"] == world.clock.now - 200
            assert wa["capabilities"] == [CAP.to_dict()]
            assert wb["capabilities"] == [CAP.to_dict(), OTHER.to_dict()]
            assert [r["attempt_id"] for r in wa["running"]] == [attempt_id]
            assert wa["running"][0]["child_pid"] == 4242
            assert wa["running"][0]["running_ms"] == 1_500
            assert wb["running"] == []
        # Replica A's presence write does not touch B's connection; a newer hello of A's
        # instance on B takes the row over, and A's late close leaves it connected.
        assert world.service.workers.presence(
            [Presence(b.instance_id, b.connected_at_ms, 1, world.clock.now)]) == 0
        world.clock.advance(1)
        a2 = other.workers.worker_hello(Hello(
            world.worker_cred["credential_id"], world.worker_cred["secret"], a.instance_id,
            "s1", world.queue_id, (CAP,), 4))
        world.service.workers.release_reservations(a.instance_id, a.connected_at_ms)
        live = {w["instance_id"]: w for w in as_json(
            world.service.listing.list_workers(world.admin, world.queue_id))["workers"]}
        assert live[a2.instance_id]["replica"] == "replica-b"
        # B closes its first connection: gone at once. A silent replica's rows expire.
        other.workers.release_reservations(b.instance_id, b.connected_at_ms)
        live = as_json(world.service.listing.list_workers(world.admin, None))["workers"]
        assert [w["instance_id"] for w in live] == [a.instance_id]
        world.clock.advance(ttl + 1)
        assert as_json(world.service.listing.list_workers(world.admin, None))["workers"] == []
    finally:
        engine.dispose()


def test_workers_are_scoped_by_queue(world: World) -> None:
    world.hello()
    other = world.service.admin.create_queue(world.admin, "other")
    cred = world.service.admin.create_credential(world.admin, "worker", [other["id"]], None)
    world.service.workers.worker_hello(Hello(
        cred["credential_id"], cred["secret"], new_id(5), "s", other["id"], (CAP,), 1))
    assert len(as_json(world.service.listing.list_workers(world.admin, None))["workers"]) == 2
    mine = as_json(world.service.listing.list_workers(world.producer, None))["workers"]
    assert [w["queue_id"] for w in mine] == [world.queue_id]
    assert_as_missing(lambda queue_id: world.service.listing.list_workers(world.producer,
                                                                          queue_id),
                      other["id"])
