"""Fair dispatch at the service level on both stores (SQLite and MariaDB), with a hand-moved
clock: a queue that is not fair reads no fairness or turn row per submit or dispatch (one
read of its setting per FAIR_MAX_AGE_MS); values take turns across claims, however many;
turns compose with limits (a full key is skipped, the next value served) and with
labels (the tasks a worker's labels meet take their turns too) and with pauses; workflow
nodes keep their own values."""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import select
from store_support import World, as_json

from orbit_server.services.fair_table import FAIR_MAX_AGE_MS
from orbit_server.store.tables import fair_turns, tasks


def _fair(world: World, key: str = "customer") -> None:
    world.service.fair.set_fair(world.admin, world.queue_id, {"key": key})


def fairness_reads(world: World) -> AbstractContextManager[list[str]]:
    return world.statements("queue_fairness", "fair_turns", "fair_floors")


def _value(world: World, task_id: str) -> str:
    return str(as_json(world.task(task_id))["limits"][0])


def test_a_queue_that_is_not_fair_reads_no_fairness_row_per_dispatch(world: World) -> None:
    b = world.hello()
    with fairness_reads(world) as seen:
        world.submit_many(10, limits=["customer:1"])
        for _ in range(3):
            assert len(world.service.workers.reserve(b, 2)) == 2
    assert len(seen) == 1, seen  # the queue's setting, read once and kept
    world.clock.advance(FAIR_MAX_AGE_MS)
    with fairness_reads(world) as seen:
        world.submit(limits=["customer:1"])
        assert len(world.service.workers.reserve(b, 2)) == 2
    assert len(seen) == 1, seen


def test_values_take_turns_across_claims_however_many_values(world: World) -> None:
    _fair(world)
    values = [f"customer:{i:03d}" for i in range(67)]
    # Each value three tasks, the first values' queued first.
    by_value = {v: world.submit_many(3, limits=[v]) for v in values}
    b = world.hello()
    taken: list[str] = []
    for _ in range(40):  # bounded: far more claims than needed
        got = world.service.workers.reserve(b, 7)
        taken.extend(r.task_id for r in got)
        if len(taken) >= len(values):
            break
    first_round = [_value(world, t) for t in taken[:len(values)]]
    assert sorted(first_round) == values  # every value once before any value twice
    # Within a value, oldest first.
    for v in values[:3]:
        mine = [t for t in taken if t in by_value[v]]
        assert mine == by_value[v][:len(mine)]


def test_turns_compose_with_limits_and_labels(world: World) -> None:
    _fair(world)
    world.service.limits.set_limit(world.admin, world.queue_id, "customer:a",
                                   {"max_running": 1})
    a = world.submit_many(5, limits=["customer:a"])
    b = world.submit_many(3, limits=["customer:b"])
    gpu = [world.submit(limits=["customer:c"], requires={"gpu": "a100"})["id"]
           for _ in range(2)]
    binding = world.hello(labels={"gpu": "a100"})
    got = [r.task_id for r in world.service.workers.reserve(binding, 10)]
    # customer:a's limit lets one in; b's three and c's two (which need the label) in turns.
    assert sorted(got) == sorted([a[0], *b, *gpu])
    assert got[:3] in ([a[0], b[0], gpu[0]], [b[0], gpu[0], a[0]], [gpu[0], a[0], b[0]])
    assert world.task(a[1])["waiting"]["reason"] == "LIMIT_FULL"
    # A worker without the label never gets c's tasks.
    world.submit(limits=["customer:c"], requires={"gpu": "a100"})
    plain = world.hello()
    assert world.service.workers.reserve(plain, 10) == []


def test_a_pause_holds_a_fair_queue_and_a_resume_restarts_its_turns(world: World) -> None:
    _fair(world)
    a = world.submit_many(3, limits=["customer:a"])
    b = world.submit_many(3, limits=["customer:b"])
    binding = world.hello()
    world.service.pauses.pause(world.producer, world.queue_id, None, None, "incident")
    assert world.service.workers.reserve(binding, 10) == []
    world.service.pauses.resume(world.producer, world.queue_id, None, None, None)
    got = [r.task_id for r in world.service.workers.reserve(binding, 4)]
    assert sorted(got) == sorted(a[:2] + b[:2])
    assert {_value(world, t) for t in got[:2]} == {"customer:a", "customer:b"}


def test_workflow_nodes_take_their_turns_by_their_own_values(world: World) -> None:
    _fair(world)
    before = world.submit_many(2, limits=["customer:b"])  # customer:b's turns 1 and 2
    body = {"nodes": [
        {"key": "a", "task": world.spec(limits=["customer:a"])},
        {"key": "b", "task": world.spec(limits=["region:eu", "customer:b"])},
        {"key": "join", "task": world.spec(limits=["customer:c"]), "parents": ["a", "b"]},
    ]}
    view, _created, _effects = world.service.workflows.submit(world.producer, world.queue_id,
                                                              body)
    binding = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(binding, 4)]
    with world.engine.connect() as conn:
        nodes = dict(conn.execute(select(tasks.c.node_key, tasks.c.id).where(
            tasks.c.workflow_id == view["workflow_id"])).all())
        last = dict(conn.execute(select(fair_turns.c.fair_value, fair_turns.c.last_turn).where(
            fair_turns.c.queue_id == world.queue_id)).all())
    # Each ready node is numbered by its own key of the name (b by customer:b, not region:eu),
    # after that value's earlier tasks; the waiting node not yet.
    assert last == {"customer:a": 1, "customer:b": 3}
    assert got == [before[0], nodes["a"], before[1], nodes["b"]]
