"""Group commit: queued store calls share one transaction and one commit, each write block in
its own savepoint; a refusal undoes only its own block, any other fault reruns every call
alone (services/context.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import func, select
from store_support import World
from support.waiting import hold, wait_until_async

from orbit_server.store.tables import queues, tasks
from orbit_server.store_thread import StoreThread
from orbit_wire.errors import ErrorCode, OrbitError


@contextmanager
def commits(world: World) -> Iterator[list[int]]:
    """Counts the database commits made while the block runs."""
    seen: list[int] = []

    def on_commit(_conn: Any) -> None:
        seen.append(1)

    with world.listening("commit", on_commit):
        yield seen


def count_tasks(world: World) -> int:
    return world.count(tasks)


def submit(world: World, **spec: Any) -> Callable[[], Any]:
    return lambda: world.service.tasks.submit(world.producer, world.queue_id,
                                              [world.spec(**spec)])


def test_a_group_commits_once_and_answers_each_call(world: World) -> None:
    missing = "0" * 32
    calls = [submit(world, payload={"i": i}) for i in range(4)]
    calls.insert(2, lambda: world.service.tasks.get_task(world.producer, missing))
    with commits(world) as seen:
        outcomes = world.service.tx.run_group(calls)
    assert len(seen) == 1
    assert [ok for ok, _ in outcomes] == [True, True, False, True, True]
    refused = outcomes[2][1]
    assert isinstance(refused, OrbitError) and refused.code is ErrorCode.NOT_FOUND
    assert count_tasks(world) == 4


def test_a_later_call_sees_what_an_earlier_one_wrote(world: World) -> None:
    first, again = world.service.tx.run_group([submit(world, operation_key="k"),
                                               submit(world, operation_key="k")])
    (view1, created1), = first[1][0]
    (view2, created2), = again[1][0]
    assert (created1, created2) == (True, False)
    assert view1["id"] == view2["id"]
    assert count_tasks(world) == 1


def test_a_refused_block_rolls_back_only_itself(world: World) -> None:
    tx = world.service.tx

    def write_then_refuse() -> None:
        with tx.write() as conn:
            conn.execute(queues.insert().values(id="f" * 32, name="never",
                                                created_at_ms=world.clock()))
            raise OrbitError(ErrorCode.CONFLICT, "refused after writing")

    with commits(world) as seen:
        outcomes = tx.run_group([submit(world), write_then_refuse, submit(world)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert len(seen) == 1
    assert count_tasks(world) == 2
    with world.engine.connect() as conn:
        assert conn.scalar(select(func.count()).where(queues.c.id == "f" * 32)) == 0


def test_a_lost_race_reruns_every_call_alone(world: World) -> None:
    runs: list[int] = []

    def flaky() -> str:
        runs.append(1)
        with world.service.tx.write():
            if len(runs) == 1:  # as a compare-and-set lost to another writer
                raise OrbitError(ErrorCode.UNAVAILABLE, "lost a race", retryable=True)
        return "done"

    with commits(world) as seen:
        outcomes = world.service.tx.run_group([submit(world), flaky, submit(world)])
    assert [ok for ok, _ in outcomes] == [True, True, True]
    assert outcomes[1][1] == "done" and len(runs) == 2
    assert len(seen) == 3  # the group rolled back; each call then committed alone
    assert count_tasks(world) == 2  # nothing of the rolled-back group was kept


def test_a_bug_in_one_call_fails_that_call_alone(world: World) -> None:
    def buggy() -> None:
        with world.service.tx.write() as conn:
            conn.execute(queues.insert().values(id="e" * 32, name="bug",
                                                created_at_ms=world.clock()))
            raise ValueError("a bug")

    outcomes = world.service.tx.run_group([submit(world), buggy, submit(world)])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert isinstance(outcomes[1][1], ValueError)
    assert count_tasks(world) == 2
    with world.engine.connect() as conn:
        assert conn.scalar(select(func.count()).where(queues.c.id == "e" * 32)) == 0


@pytest.mark.asyncio
async def test_calls_queued_behind_a_busy_thread_share_one_commit(world: World) -> None:
    store = StoreThread(world.service.tx.run_group, group_max=8)
    store.start()
    try:
        gate, started = threading.Event(), threading.Event()
        blocker = asyncio.ensure_future(store.call(hold, gate, started))
        await wait_until_async(started.is_set, timeout=5, what="the thread busy")
        with commits(world) as seen:
            queued = [asyncio.ensure_future(store.call(submit(world, payload={"i": i})))
                      for i in range(5)]
            await asyncio.sleep(0)
            gate.set()
            await asyncio.gather(blocker, *queued)
        assert len(seen) == 1
        assert count_tasks(world) == 5
        lone = await store.call(submit(world))  # a lone call commits alone, as before
        assert lone[0][0][1] is True and count_tasks(world) == 6
    finally:
        store.close()
