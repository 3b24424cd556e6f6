"""Flow-control limits on a real store (SQLite and MariaDB) with a hand-moved clock: a queue
without limits reads no limit row per dispatch (one read per LIMITS_MAX_AGE_MS); each way
an attempt ends (a finish, an expired lease, a lost reservation) frees its key's slot in
that transaction; a rate's window slides with the clock; two services (replicas) claiming
at once on one database never both take a key's last slot; retention prunes the holds of
keys that are never claimed again; a limit set while attempts of its key run counts them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import func, select
from store_support import World

from orbit_server.services.limit_table import LIMITS_MAX_AGE_MS
from orbit_server.store.limits import PRUNE_AGE_MS
from orbit_server.store.tables import attempts, limit_holds
from orbit_wire.model import Outcome

KEY = "licence:matlab"


def _limit(world: World, pattern: str, **body: Any) -> None:
    world.service.limits.set_limit(world.admin, world.queue_id, pattern, body)


def limit_statements(world: World) -> AbstractContextManager[list[str]]:
    """The statements naming a flow-control table run on the world's engine meanwhile."""
    return world.statements("queue_limits", "limit_holds")


def test_a_queue_without_limits_reads_no_limit_row_per_dispatch(world: World) -> None:
    world.submit_many(20, limits=[KEY])  # keys without a limit mean nothing
    b = world.hello()
    with limit_statements(world) as seen:
        for _ in range(5):
            assert len(world.service.workers.reserve(b, 2)) == 2
    assert len(seen) == 1, seen  # the queue's limits, read once and kept
    world.clock.advance(LIMITS_MAX_AGE_MS)
    with limit_statements(world) as seen:
        assert len(world.service.workers.reserve(b, 2)) == 2
    assert len(seen) == 1, seen


def test_every_end_of_an_attempt_frees_its_slot(world: World) -> None:
    _limit(world, "licence:*", max_running=1)
    ids = world.submit_many(4, limits=[KEY], lease_ttl_ms=1_000)
    free = world.submit(payload={"free": True})["id"]
    b = world.hello()
    # One of the key, and the free task behind the held ones.
    got = world.service.workers.reserve(b, 10)
    assert sorted(r.task_id for r in got) == sorted([ids[0], free])
    held = world.task(ids[1])
    assert held["waiting"] == {"reason": "LIMIT_FULL", "key": KEY, "limit": "licence:*",
                               "bound": "max_running", "max": 1}
    first = next(r for r in got if r.task_id == ids[0])
    assert world.start(b, first.attempt_id, first.epoch).ok
    assert len(world.service.workers.reserve(b, 10)) == 0
    # A finish frees it.
    world.finish(b, first.attempt_id, first.epoch, Outcome.SUCCEEDED, result=1)
    (second,) = world.service.workers.reserve(b, 10)
    assert second.task_id == ids[1]
    assert world.start(b, second.attempt_id, second.epoch).ok
    # An expired lease frees it, in the reaper's transaction.
    world.clock.advance(60_000)
    world.service.reaper.reap()
    assert world.attempts(ids[1])[0]["code"] == "LEASE_EXPIRED"
    # (the free task's stale reservation went back to PENDING too: it is taken again)
    (third,) = [r for r in world.service.workers.reserve(b, 10) if r.task_id in ids]
    assert third.task_id in (ids[1], ids[2])  # the lapsed one may be retried first
    # A reservation never started goes back to PENDING when the reaper finds it stale.
    world.clock.advance(600_000)
    world.service.reaper.reap()
    assert world.task(third.task_id)["state"] == "PENDING"
    again = world.service.workers.reserve(world.hello(), 10)
    assert len([r for r in again if r.task_id in ids]) == 1


def test_a_limit_set_while_attempts_of_its_key_run_counts_them(world: World) -> None:
    ids = world.submit_many(3, limits=[KEY, "customer:1"])
    b = world.hello()
    running = world.service.workers.reserve(b, 3)
    for r in running[:2]:
        assert world.start(b, r.attempt_id, r.epoch).ok  # two RUNNING, one RESERVED
    _limit(world, "licence:*", max_running=2)
    _limit(world, "licence:*", max_running=2)  # set again: nothing held twice
    with world.engine.connect() as conn:
        holds = conn.execute(select(limit_holds.c.limit_key, limit_holds.c.attempt_id)).all()
    assert sorted(holds) == sorted((KEY, r.attempt_id) for r in running)  # the matched key only
    later = world.submit(limits=[KEY])["id"]
    assert world.service.workers.reserve(b, 5) == []  # three open, the limit two
    assert world.task(later)["waiting"]["reason"] == "LIMIT_FULL"
    for r in running[:2]:
        world.finish(b, r.attempt_id, r.epoch, Outcome.SUCCEEDED, result=1)
    (next_one,) = world.service.workers.reserve(b, 5)  # one open: one slot
    assert next_one.task_id == later and sorted(ids) == sorted(r.task_id for r in running)


def test_a_rate_set_while_attempts_of_its_key_run_counts_their_starts(world: World) -> None:
    world.submit_many(2, limits=[KEY])
    b = world.hello()
    assert len(world.service.workers.reserve(b, 2)) == 2
    world.clock.advance(1_000)
    _limit(world, KEY, rate={"count": 2, "interval_ms": 60_000})
    world.submit(limits=[KEY])
    assert world.service.workers.reserve(b, 5) == []  # two starts within the minute
    world.clock.advance(60_000)
    assert len(world.service.workers.reserve(b, 5)) == 1


def test_a_rate_window_slides_with_the_clock(world: World) -> None:
    _limit(world, KEY, rate={"count": 2, "interval_ms": 1_000})
    world.submit_many(6, limits=[KEY])
    b = world.hello()
    start = world.clock.now
    first = world.service.workers.reserve(b, 10)
    assert len(first) == 2
    # The held tasks' queue is woken when the window frees (no waiting for a poll).
    assert first.wake_at_ms == start + 1_000
    assert first.effects is not None and first.effects.next_due_ms == start + 1_000
    world.clock.advance(999)
    later = world.service.workers.reserve(b, 10)
    assert len(later) == 0 and later.wake_at_ms == start + 1_000  # both still in the window
    world.clock.advance(1)
    assert world.queue_id in world.service.reaper.reap().ready_queues
    assert len(world.service.workers.reserve(b, 10)) == 2
    world.clock.advance(500)
    assert len(world.service.workers.reserve(b, 10)) == 0
    world.clock.advance(500)
    assert len(world.service.workers.reserve(b, 10)) == 2


def test_two_services_never_both_take_the_last_slot(world: World) -> None:
    _limit(world, KEY, max_running=1)
    world.submit_many(10, limits=[KEY])
    with world.other_service(seed=11) as other:
        mine, theirs = world.hello(), world.hello(service=other)
        got: list[int] = []  # every round's claims: the one slot is taken once in all
        for _round in range(5):
            errors = world.race(
                lambda: got.append(len(world.service.workers.reserve(mine, 5))),
                lambda: got.append(len(other.workers.reserve(theirs, 5))))
            assert errors == []
        assert sum(got) == 1, got
    with world.engine.connect() as conn:
        open_attempts = conn.execute(select(func.count()).select_from(attempts).where(
            attempts.c.state.in_(["RESERVED", "RUNNING"]))).scalar_one()
    assert open_attempts == 1


def test_held_tasks_beyond_the_claims_count_do_not_block_those_behind(world: World) -> None:
    _limit(world, KEY, max_running=1)
    ids = world.submit_many(5, limits=[KEY])
    free = world.submit(payload={"free": True})["id"]
    b = world.hello()
    # The claim's own rows are all of the full key: it reads again with the window behind.
    got = world.service.workers.reserve(b, 2)
    assert sorted(r.task_id for r in got) == sorted([ids[0], free])
    assert len(world.service.workers.reserve(b, 2)) == 0


def _run_all(world: World, b: Any, count: int) -> None:
    got = world.service.workers.reserve(b, count)
    assert len(got) == count
    for r in got:
        assert world.start(b, r.attempt_id, r.epoch).ok
        world.finish(b, r.attempt_id, r.epoch, Outcome.SUCCEEDED, result=1)


def _holds(world: World) -> list[str]:
    with world.engine.connect() as conn:
        return sorted(str(r[0]) for r in conn.execute(select(limit_holds.c.limit_key)))


def test_a_hold_is_pruned_once_its_attempt_ended_and_no_window_counts_it(world: World) -> None:
    _limit(world, KEY, max_running=5)
    world.submit_many(2, limits=[KEY])
    b = world.hello()
    _run_all(world, b, 1)
    assert _holds(world) == [KEY]
    world.clock.advance(1)
    # The next claim of the key prunes the ended attempt's hold (no rate counts it) and
    # holds its own.
    _run_all(world, b, 1)
    assert _holds(world) == [KEY]
    # Under a rate, an ended attempt's hold stays while a window may count its start.
    _limit(world, "other:*", rate={"count": 10, "interval_ms": 1_000})
    world.submit_many(3, limits=["other:1"])
    _run_all(world, b, 1)
    world.clock.advance(999)
    _run_all(world, b, 1)
    assert _holds(world) == [KEY, "other:1", "other:1"]
    world.clock.advance(1)
    _run_all(world, b, 1)  # the first start has left the window: its hold goes
    assert _holds(world) == [KEY, "other:1", "other:1"]


def test_retention_prunes_the_holds_of_keys_never_claimed_again(world: World) -> None:
    _limit(world, "tenant:*", max_running=5)
    world.submit_many(1, limits=["tenant:gone"])
    world.submit_many(1, limits=["tenant:busy"])
    b = world.hello()
    _run_all(world, b, 1)  # tenant:gone's task ends; no claim of that key comes again
    (running,) = world.service.workers.reserve(b, 1)
    assert world.start(b, running.attempt_id, running.epoch).ok  # tenant:busy's runs on
    assert _holds(world) == ["tenant:busy", "tenant:gone"]
    retention = world.service.retention
    world.clock.advance(86_400_000)  # the longest rate window any limit may have
    assert retention.prune_holds() == 0  # not past it by PRUNE_AGE_MS yet
    world.clock.advance(PRUNE_AGE_MS)
    assert retention.prune_holds() == 1
    # The running attempt's hold still counts against tenant:busy's concurrency.
    assert _holds(world) == ["tenant:busy"]
    assert retention.prune_holds() == 0
