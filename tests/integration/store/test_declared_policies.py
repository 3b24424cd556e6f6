"""Declared policies on a real store (SQLite and MariaDB) with a hand-moved clock: a hello
registers its capabilities and their declared policies; a submit (alone, in a batch, or a
schedule's tick) that leaves a field out gets the registered value and says so; a different
declaration for the same version is refused with POLICY_CONFLICT and writes nothing; the
registered policies are resolved from memory (no statement per submit), and a replica that
did not see the hello reads them on a miss."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest
from sqlalchemy import select
from store_support import CAP, World

from orbit_server.services.policies import UNREGISTERED_MS
from orbit_server.store.tables import capability_policies, instances, pushes, tasks
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability, Idempotency
from orbit_wire.policy import Backoff, CapabilityPolicy, DeclaredPolicy

DECLARED = DeclaredPolicy(idempotency=Idempotency.IDEMPOTENT, max_attempts=7,
                          attempt_timeout_ms=1_500, backoff=Backoff(initial_ms=10),
                          cancel_grace_ms=0, priority=8)
V2 = Capability(CAP.handler, "v2", CAP.payload_version)


def declaring(policy: DeclaredPolicy = DECLARED, cap: Capability = CAP
              ) -> tuple[CapabilityPolicy, ...]:
    return (CapabilityPolicy(cap, policy),)


def statements(world: World) -> AbstractContextManager[list[str]]:
    """The SQL statements run on the world's engine meanwhile."""
    return world.statements()


def _registered(world: World) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = world.service.listing.capabilities(
        world.producer, world.queue_id)["capabilities"]
    return out


def test_a_submit_leaving_fields_out_gets_the_registered_policy(world: World) -> None:
    before = world.submit()
    assert before["policy_source"] == "default" and before["policy"]["max_attempts"] == 3
    world.hello(policies=declaring())
    [entry] = _registered(world)
    assert entry["capability"] == {"handler": CAP.handler, "handler_version": "v1",
                                   "payload_version": "v1"}
    assert entry["policy"] == {
        "idempotency": "IDEMPOTENT", "max_attempts": 7, "attempt_timeout_ms": 1500,
        "backoff": {"initial_ms": 10, "max_ms": 60_000, "multiplier": 2.0, "jitter": 0.2},
        "cancel_grace_ms": 0, "priority": 8}
    task = world.submit()
    assert task["policy_source"] == "registered" and task["priority"] == 8
    policy = task["policy"]
    assert (policy["idempotency"], policy["max_attempts"], policy["attempt_timeout_ms"],
            policy["cancel_grace_ms"], policy["backoff"]["initial_ms"]) == (
        "IDEMPOTENT", 7, 1500, 0, 10)
    assert policy["lease_ttl_ms"] == 30_000  # declared by nobody: the server default
    # What the submit sets wins, field by field.
    mine = world.submit(max_attempts=2, idempotency="NON_IDEMPOTENT", priority=1)
    assert (mine["policy"]["max_attempts"], mine["policy"]["idempotency"], mine["priority"],
            mine["policy"]["attempt_timeout_ms"]) == (2, "NON_IDEMPOTENT", 1, 1500)
    assert mine["policy_source"] == "registered"
    every = world.submit(idempotency="IDEMPOTENT", max_attempts=7, attempt_timeout_ms=1500,
                         backoff={"initial_ms": 1}, cancel_grace_ms=0, priority=8)
    assert every["policy_source"] == "submit"
    # A batch, each spec on its own.
    ids = world.submit_many(3, attempt_timeout_ms=900)
    for task_id in ids:
        view = world.task(task_id)
        assert view["policy"]["attempt_timeout_ms"] == 900
        assert view["policy"]["max_attempts"] == 7 and view["policy_source"] == "registered"
    # The stored row says it too (what `orbit tasks get` and the dashboard read).
    with world.engine.connect() as conn:
        sources = dict(conn.execute(select(tasks.c.id, tasks.c.policy_source)).all())
    assert sources[before["id"]] == "default" and sources[task["id"]] == "registered"


def test_an_operation_key_is_the_same_request_before_and_after_a_registration(
        world: World) -> None:
    first = world.submit(operation_key="k1")
    world.hello(policies=declaring())
    again = world.submit(operation_key="k1")
    assert again["id"] == first["id"] and again["policy_source"] == "default"


def test_a_different_declaration_for_the_same_version_is_refused(world: World) -> None:
    world.hello(policies=declaring())
    world.hello(policies=declaring())  # the same declaration again: fine
    world.hello()  # a worker that declares nothing: fine, and nothing changes
    rows, push_rows = world.count(capability_policies), world.count(pushes)
    workers = world.count(instances)
    other = DeclaredPolicy(idempotency=Idempotency.IDEMPOTENT, max_attempts=7,
                           attempt_timeout_ms=60_000, backoff=Backoff(initial_ms=10),
                           cancel_grace_ms=0, priority=8)
    with pytest.raises(OrbitError) as refused:
        world.hello(policies=declaring(other), caps=(CAP, V2))
    assert refused.value.code is ErrorCode.POLICY_CONFLICT
    assert ("text.normalize@v1/v1 (attempt_timeout_ms: registered 1500, declared 60000)"
            in refused.value.message)
    assert "new handler_version" in refused.value.message
    # Nothing of the refused hello was kept: not its other capability, not its instance.
    assert world.count(capability_policies) == rows and world.count(pushes) == push_rows
    assert world.count(instances) == workers
    assert world.task(world.submit()["id"])["policy"]["attempt_timeout_ms"] == 1500
    # A new version declares what it likes.
    world.hello(policies=declaring(other, V2), caps=(CAP, V2))
    by_version = {r["capability"]["handler_version"]: r["policy"] for r in _registered(world)}
    assert by_version["v2"]["attempt_timeout_ms"] == 60_000
    assert by_version["v1"]["attempt_timeout_ms"] == 1500


def test_a_capability_registered_without_a_policy_takes_the_first_declaration(
        world: World) -> None:
    world.hello()  # an older worker: registered, nothing declared
    [entry] = _registered(world)
    assert entry["policy"] == {} and entry["declared_at_ms"] is None
    assert world.submit()["policy_source"] == "default"
    world.clock.advance(5)
    world.hello(policies=declaring())
    [entry] = _registered(world)
    assert entry["policy"]["max_attempts"] == 7 and entry["declared_at_ms"] == world.clock()
    assert world.submit()["policy_source"] == "registered"


def test_submits_resolve_from_memory(world: World) -> None:
    world.hello(policies=declaring())
    world.submit()
    with statements(world) as seen:
        for _ in range(3):
            assert world.submit()["policy_source"] == "registered"
        world.submit_many(5)
    assert not [s for s in seen if "capability_policies" in s]
    # What a miss costs, seen the same way: the one row, once.
    world.service.policies.forget()
    with statements(world) as seen:
        world.submit_many(5)
        world.submit()
    assert len([s for s in seen if "capability_policies" in s]) == 1


def test_a_replica_that_missed_the_hello_reads_on_a_miss(world: World) -> None:
    with world.other_service(1) as other:
        # The other replica has seen no registration of CAP: it remembers that, briefly.
        made, _ = other.tasks.submit(world.producer, world.queue_id, [world.spec()])
        assert made[0][0]["policy_source"] == "default"
        world.hello(policies=declaring())  # registered through this replica
        with world.engine.connect() as conn:
            [push] = conn.execute(select(pushes.c.kind)).scalars().all()
        assert push == "POLICIES"  # the other replicas are told to forget theirs
        world.clock.advance(UNREGISTERED_MS)
        made, _ = other.tasks.submit(world.producer, world.queue_id, [world.spec()])
        assert made[0][0]["policy_source"] == "registered"
        # A declaration it learns of by the push replaces what it cached.
        other.policies.forget()
        made, _ = other.tasks.submit(world.producer, world.queue_id, [world.spec()])
        assert made[0][0]["policy"]["max_attempts"] == 7


def test_a_schedule_tick_gets_the_registered_policy(world: World) -> None:
    world.hello(policies=declaring())
    made = world.service.schedules.create(world.producer, world.queue_id, {
        "cron": "* * * * *", "task": {"handler": CAP.handler, "handler_version": "v1",
                                      "payload_version": "v1", "payload": {"text": "tick"}}})
    world.clock.now = made["next_fire_at_ms"] + 10
    world.service.schedules.fire_due()
    view = world.service.schedules.get(world.producer, made["id"])
    task = world.task(view["last_task_id"])
    assert task["policy"]["idempotency"] == "IDEMPOTENT" and task["policy_source"] == "registered"


def test_the_capability_list_is_for_the_queues_readers(world: World) -> None:
    world.hello(policies=declaring())
    other = world.service.admin.create_queue(world.admin, "other")
    with pytest.raises(OrbitError) as hidden:
        world.service.listing.capabilities(world.producer, other["id"])
    assert hidden.value.code in (ErrorCode.NOT_FOUND, ErrorCode.PERMISSION_DENIED)
    assert world.service.listing.capabilities(world.admin, other["id"])["capabilities"] == []
