"""A fair queue's turns on a real store (SQLite and MariaDB): a ready task is numbered when
submitted, each value's tasks in consecutive turns and a new value's first turn right after
the floor; a fair claim reads one range in (rank, turn) order plus the ready tasks not
numbered yet, each bounded by the rows it wants; the turns a claim starts raise the floor,
and a task back to waiting (a retry) loses its turn and takes a new one when ready."""

from __future__ import annotations

from sqlalchemy import select, update
from store_support import CAP, World

from orbit_server.store import claims
from orbit_server.store.tables import fair_floors, tasks
from orbit_wire.model import Outcome


def _turns(world: World, ids: list[str]) -> list[int | None]:
    with world.engine.connect() as conn:
        found = dict(conn.execute(select(tasks.c.id, tasks.c.fair_turn).where(
            tasks.c.id.in_(ids))).all())
    return [found[i] for i in ids]


def _floors(world: World) -> dict[int, int]:
    with world.engine.connect() as conn:
        return {int(r[0]): int(r[1]) for r in conn.execute(
            select(fair_floors.c.dispatch_rank, fair_floors.c.turn).where(
                fair_floors.c.queue_id == world.queue_id)).all()}


def _fair(world: World) -> None:
    world.service.fair.set_fair(world.admin, world.queue_id, {"key": "customer"})


def test_each_value_is_numbered_in_turns_and_a_new_one_starts_at_the_floor(
        world: World) -> None:
    _fair(world)
    a = world.submit_many(4, limits=["customer:a"])
    b = world.submit_many(2, limits=["customer:b"])
    none = world.submit_many(1)  # no key: the value ""
    urgent = world.submit_many(2, limits=["customer:a"], priority=9)
    delayed = world.submit(limits=["customer:b"], delay_ms=60_000)["id"]
    assert _turns(world, a) == [1, 2, 3, 4]
    assert _turns(world, b) == [1, 2]
    assert _turns(world, none) == [1]
    assert _turns(world, urgent) == [1, 2]  # turns are counted per priority
    assert _turns(world, [delayed]) == [None]  # numbered when ready
    # A claim of three starts the urgent ones, then turn 1 of the oldest value.
    binding = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(binding, 3)]
    assert got == [*urgent, a[0]]
    assert max(_floors(world).values()) == 2 and 1 in _floors(world).values()
    # A value that comes now (or comes back) takes its next turn after the floor.
    c = world.submit_many(2, limits=["customer:c"])
    assert _turns(world, c) == [2, 3]


def test_a_claim_reads_one_bounded_range_and_numbers_the_ready_ones(world: World) -> None:
    _fair(world)
    ids = {v: world.submit_many(5, limits=[f"customer:{v}"]) for v in "abc"}
    late = world.submit(limits=["customer:d"], delay_ms=1_000)["id"]
    with world.engine.connect() as conn:
        rows = claims.numbered_rows(conn, world.queue_id, [CAP], world.clock.now, 4)
        waiting = claims.claimable_rows(conn, world.queue_id, [CAP], world.clock.now, 4)
    # Turn 1 of each value (in the order they became ready), then turn 2 of the first; the
    # delayed task is in neither range until it is ready.
    assert [r["id"] for r in rows] == [ids["a"][0], ids["b"][0], ids["c"][0], ids["a"][1]]
    assert waiting == []
    world.clock.advance(1_000)
    binding = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(binding, 4)]
    # The delayed task, ready now, is numbered at the floor's next turn: the first round's,
    # which it ends, having become ready last.
    assert got == [ids["a"][0], ids["b"][0], ids["c"][0], late]
    assert _turns(world, [late]) == [1]


def test_a_retry_gives_up_its_turn_and_takes_a_new_one_when_ready(world: World) -> None:
    _fair(world)
    (first,) = world.submit_many(1, limits=["customer:a"], max_attempts=3)
    b = world.hello()
    attempt_id, epoch = world.run_once(b)
    others = world.submit_many(3, limits=["customer:b"])  # turns 2..4: the floor is 1
    world.finish(b, attempt_id, epoch, Outcome.FAILED, code="TEMPORARY", retryable=True)
    # Back to waiting for its backoff: no turn, so claims never scan past it meanwhile.
    assert world.task(first)["state"] == "PENDING"
    assert _turns(world, [first]) == [None]
    world.clock.advance(600_000)  # past any backoff
    got = [r.task_id for r in world.service.workers.reserve(b, 4)]
    # Ready again, it takes customer:a's next turn after the floor (2), beside b's second.
    assert _turns(world, [first]) == [2]
    assert got == [others[0], first, others[1], others[2]]


def test_turned_off_the_numbered_tasks_go_back_to_plain_order(world: World) -> None:
    _fair(world)
    a = world.submit_many(3, limits=["customer:a"])
    b = world.submit_many(3, limits=["customer:b"])
    world.service.fair.fair_off(world.admin, world.queue_id)
    binding = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(binding, 4)]
    assert got == [*a, b[0]]  # oldest first again
    assert _turns(world, b[1:]) == [None, None]  # turned off, every turn cleared
    # Turned on again, the turns go on from where they stood: a new value takes its first,
    # b's waiting tasks b's next ones (after its third) when a fair claim finds them.
    world.service.fair.set_fair(world.admin, world.queue_id, {"key": "customer"})
    (c,) = world.submit_many(1, limits=["customer:c"])
    assert _turns(world, [c]) == [1]
    got = [r.task_id for r in world.service.workers.reserve(binding, 3)]
    assert got == [c, b[1], b[2]]
    assert _turns(world, b[1:]) == [4, 5]


def test_a_queue_that_is_not_fair_finds_tasks_a_stale_replica_numbered(world: World) -> None:
    # A replica that had not seen the queue turned off yet numbered the middle task.
    ids = world.submit_many(3, limits=["customer:x"])
    with world.engine.begin() as conn:
        conn.execute(update(tasks).where(tasks.c.id == ids[1]).values(fair_turn=7))
    binding = world.hello()
    got = [r.task_id for r in world.service.workers.reserve(binding, 3)]
    assert got == ids  # found by the claim's look, and back in plain order
