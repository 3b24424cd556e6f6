"""Dispatch over several capabilities (queries.dispatch_many): the prepared union returns the
oldest available tasks across the capabilities, never more than asked, never a task of a
capability the worker did not register, and the statement is built once per count."""

from __future__ import annotations

from store_support import CAP, World

from orbit_server.store import queries
from orbit_wire.model import Capability

OTHER = Capability("other", "v1", "v1")
THIRD = Capability("third", "v2", "v1")


def test_reserve_over_three_capabilities_is_oldest_first_and_bounded(world: World) -> None:
    order = []
    for cap in (OTHER, CAP, THIRD, CAP, OTHER, THIRD):
        made = world.submit(handler=cap.handler, handler_version=cap.handler_version,
                            payload_version=cap.payload_version)
        order.append((made["id"], cap))
        world.clock.advance(1)
    stranger = world.submit(handler="stranger")
    b = world.hello(caps=(CAP, OTHER, THIRD))
    first = world.service.workers.reserve(b, 4)
    assert [r.task_id for r in first] == [tid for tid, _ in order[:4]]
    assert [r.capability for r in first] == [cap for _, cap in order[:4]]
    rest = world.service.workers.reserve(b, 10)
    assert [r.task_id for r in rest] == [tid for tid, _ in order[4:]]
    assert world.service.workers.reserve(b, 10) == []
    assert world.task(stranger["id"])["state"] == "PENDING"


def test_reserve_over_two_capabilities_skips_tasks_past_their_deadline(world: World) -> None:
    expired = world.submit(handler=OTHER.handler, deadline_ms=100)
    world.clock.advance(200)
    live = world.submit(deadline_ms=60_000)
    b = world.hello(caps=(OTHER, CAP))
    assert [r.task_id for r in world.service.workers.reserve(b, 5)] == [live["id"]]
    assert world.task(expired["id"])["state"] == "PENDING"  # the reaper fails it, not dispatch


def test_dispatch_statement_is_built_once_per_capability_count() -> None:
    assert queries.dispatch_many(3) is queries.dispatch_many(3)
    assert queries.dispatch_many(2) is not queries.dispatch_many(3)
